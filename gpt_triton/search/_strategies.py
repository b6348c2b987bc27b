"""Search strategies, ask/tell (like Model Analyzer's run-config generators fed back measurements).

A strategy plans candidates from a :class:`~gpt_triton.search._space.SearchSpace` in batches
(:meth:`SearchStrategy.ask`, ``[]`` when done) and may learn from scores (:meth:`SearchStrategy.tell`).
Every strategy plans the baseline first. One class per ``search.mode`` (TensorRT's ``--tuningSearch``
semantics):

* :class:`FastSearch`: each family's starting route plus one knob changed at a time (serving and graph
  knobs included);
* :class:`FullSearch`: the cartesian product per family;
* :class:`MixedSearch`: fast, then - after feedback - the product over the knob values that beat that
  family's starting route;
* :class:`RandomSearch`: ``random_routes`` routes drawn with ``seed`` (reproducible).

Nothing is dropped except by ``max_builds`` (:class:`Budget`), and every cut is logged.
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import SearchSpec
from gpt_triton.search._space import SearchSpace, value_key

Score = Callable[[Candidate], float | None]  # lower is better; None: crashed, infeasible or unmeasured
Change = tuple[int, str, Any]  # (space index: 0 compiler, 1 graph, 2 serving; knob; value)


class Budget:
    """The ``max_builds`` cap across every batch of one search, and the ledger of what was planned.

    ``decisions`` is shared with the caller: each cut and each plan is one line of the run's log."""

    def __init__(self, max_builds: int, decisions: list[str]) -> None:
        self.max_builds = max_builds
        self.decisions = decisions
        self.planned: dict[str, Candidate] = {}

    def take(self, candidates: Iterator[Candidate] | Sequence[Candidate], label: str, limit: int | None = None) -> list[Candidate]:
        """New candidates from ``candidates`` up to ``limit`` and the max_builds budget (a cut is logged)."""
        budget = self.max_builds - len(self.planned)
        out: list[Candidate] = []
        seen: set[str] = set()
        cut = 0
        for candidate in candidates:
            if candidate.id in self.planned or candidate.id in seen:
                continue
            if limit is not None and len(out) >= limit:
                break
            if len(out) >= budget:
                cut += 1
                if not isinstance(candidates, Sequence):
                    break  # an open-ended stream (full, random): do not enumerate millions just to count
                continue
            seen.add(candidate.id)
            out.append(candidate)
        if cut:
            more = f"{cut} more routes" if isinstance(candidates, Sequence) else "further routes"
            self.decisions.append(
                f"{label}: max_builds={self.max_builds} reached; {more} not planned "
                f"(raise search.max_builds to cover them)"
            )
        for candidate in out:
            self.planned[candidate.id] = candidate
        return out


class SearchStrategy(ABC):
    """One search mode. Subclasses implement :meth:`ask`; :meth:`tell` and :meth:`plan_count` are
    optional hooks whose defaults suit a strategy that plans everything up front."""

    mode: ClassVar[str]

    def __init__(self, space: SearchSpace, budget: Budget, settings: SearchSpec) -> None:
        self.space = space
        self.budget = budget
        self.settings = settings
        self.asked = 0  # how many times ask() was called

    @abstractmethod
    def ask(self) -> list[Candidate]:
        """The next batch of new candidates (the first batch starts with the baseline); [] when done."""

    def tell(self, candidates: Sequence[Candidate], score: Score) -> None:
        """Feedback on planned candidates. The default ignores it: the plan does not depend on scores."""
        return None

    def plan_count(self) -> int | None:
        """How many candidates this strategy plans before any feedback, before max_builds cuts them
        (read by ``gpt-triton routes``); None when it cannot say without planning."""
        return None

    def _baseline(self) -> list[Candidate]:
        """The first batch's head: the baseline, always planned first, as the reference for every gain."""
        if not self.space.compilers:
            self.budget.decisions.append("no compiler family is enabled and available; only the baseline is planned")
        return self.budget.take([self.space.baseline], "baseline")


def one_knob_at_a_time(space: SearchSpace) -> list[tuple[Candidate, str, list[Change]]]:
    """Each family's starting route, then one knob changed at a time: (candidate, family, what changed)."""
    out: list[tuple[Candidate, str, list[Change]]] = []
    for name in space.compilers:
        spaces = space.spaces(name)
        start = [dict(s.start) for s in spaces]
        out.append((space.make(name, start), name, []))
        for index, knob_space in enumerate(spaces):
            for knob, values in knob_space.values.items():
                for value in values:
                    if value_key(value) == value_key(start[index][knob]):
                        continue
                    changes: list[Change] = [(index, knob, value)]
                    knobs = dict(start[index], **{knob: value})
                    rule = knob_space.rules.get(knob)
                    if rule and knobs.get(rule[0]) not in rule[1]:
                        # A knob that only applies under another knob's value is tried under the first such
                        # value the parent sweeps; without one it cannot change anything.
                        enabling = [v for v in knob_space.values.get(rule[0], []) if v in rule[1]]
                        if not enabling:
                            continue
                        knobs[rule[0]] = enabling[0]
                        changes.append((index, rule[0], enabling[0]))
                    routes = list(start)
                    routes[index] = knob_space.canon(knobs)
                    out.append((space.make(name, routes), name, changes))
    return out


class FastSearch(SearchStrategy):
    """The baseline, each family's starting route, and one knob changed at a time; one batch."""

    mode = "fast"

    def __init__(self, space: SearchSpace, budget: Budget, settings: SearchSpec) -> None:
        super().__init__(space, budget, settings)
        self.one_knob: list[tuple[Candidate, str, list[Change]]] = []  # the first batch's plan, once asked

    def ask(self) -> list[Candidate]:
        self.asked += 1
        return self._first() if self.asked == 1 else []

    def _first(self) -> list[Candidate]:
        first = self._baseline()
        planned = one_knob_at_a_time(self.space)
        batch = self.budget.take([c for c, _, _ in planned], f"{self.mode} (one knob at a time)")
        self.one_knob = planned  # what each candidate changed, for a strategy that learns from their scores
        self.budget.decisions.append(
            f"{self.mode}: planned {len(first) + len(batch)} routes (baseline + each family's start + one knob at a time)"
        )
        return first + batch

    def plan_count(self) -> int:
        return len({self.space.baseline.id} | {c.id for c, _, _ in one_knob_at_a_time(self.space)})


class FullSearch(SearchStrategy):
    """The cartesian product per family (the baseline first); one batch, capped by max_builds."""

    mode = "full"

    def ask(self) -> list[Candidate]:
        self.asked += 1
        if self.asked > 1:
            return []
        first = self._baseline()
        total = sum(self.space.full_count(n) for n in self.space.compilers)
        batch = self.budget.take(self.space.full(), "full (cartesian)")
        self.budget.decisions.append(f"full: {total} routes in the cartesian product; planned {len(first) + len(batch)}")
        return first + batch

    def plan_count(self) -> int:
        total = sum(self.space.full_count(n) for n in self.space.compilers)
        return total + (0 if self.space.baseline_in_product() else 1)


class RandomSearch(SearchStrategy):
    """``random_routes`` distinct routes drawn with ``seed`` (plus the baseline); one batch."""

    mode = "random"

    def ask(self) -> list[Candidate]:
        self.asked += 1
        if self.asked > 1:
            return []
        first = self._baseline()
        batch = self.budget.take(self._draws(), "random", limit=self.settings.random_routes)
        self.budget.decisions.append(f"random: planned {len(batch)} routes with seed {self.settings.seed} (+ baseline)")
        return first + batch

    def _draws(self) -> Iterator[Candidate]:
        rng = random.Random(self.settings.seed)
        names = list(self.space.compilers)
        if not names:
            return
        # 100 draws per wanted route: plenty to find them in any space that holds them, and still finite.
        for _ in range(self.settings.random_routes * 100):
            name = rng.choice(names)
            routes = [s.canon({k: rng.choice(v) for k, v in s.values.items()}) for s in self.space.spaces(name)]
            yield self.space.make(name, routes)

    def plan_count(self) -> int:
        """1 + random_routes, unless the space holds fewer routes besides the baseline (then all of them)."""
        others = sum(self.space.full_count(n) for n in self.space.compilers) - int(self.space.baseline_in_product())
        return 1 + min(self.settings.random_routes, others)


class MixedSearch(FastSearch):
    """Fast first; then, from the scores told, per family the product over the knob values that beat its
    starting route. Two batches at most."""

    mode = "mixed"

    def __init__(self, space: SearchSpace, budget: Budget, settings: SearchSpec) -> None:
        super().__init__(space, budget, settings)
        self._scores: dict[str, float | None] = {}

    def ask(self) -> list[Candidate]:
        self.asked += 1
        if self.asked == 1:
            return self._first()
        return self._refine() if self.asked == 2 else []

    def tell(self, candidates: Sequence[Candidate], score: Score) -> None:
        for candidate in candidates:
            self._scores[candidate.id] = score(candidate)

    def _refine(self) -> list[Candidate]:
        """Per family, the product over the knob values that beat its starting route."""
        decisions = self.budget.decisions
        changed: dict[str, tuple[str, list[Change]]] = {}  # first plan of each id wins, as the budget took it
        for candidate, family, changes in self.one_knob:
            changed.setdefault(candidate.id, (family, changes))
        restrict: dict[str, list[dict[str, list[Any]]]] = {}
        for name in self.space.compilers:
            spaces = self.space.spaces(name)
            start_id = self.space.make(name, (s.start for s in spaces)).id
            start_score = self._scores.get(start_id)
            if start_score is None:
                why = "was not scored" if start_id not in self._scores else "crashed or was infeasible"
                decisions.append(f"mixed: {name}'s starting route {why}; no refinement for {name}")
                continue
            winners: list[dict[str, list[Any]]] = [{k: [v] for k, v in s.start.items()} for s in spaces]
            found = []
            for cid, (family, changes) in changed.items():
                score = self._scores.get(cid)
                if family != name or not changes or score is None or score >= start_score:
                    continue
                for index, knob, value in changes:
                    if value_key(value) not in {value_key(v) for v in winners[index][knob]}:
                        winners[index][knob].append(value)
                found.append(" & ".join(f"{k}={json.dumps(v)}" for _, k, v in changes) + f" ({score:.4g} < {start_score:.4g})")
            if found:
                decisions.append(f"mixed: {name} values that beat its start: {'; '.join(found)}")
                restrict[name] = winners
            else:
                decisions.append(f"mixed: no {name} knob value beat its start; nothing to combine")
        if not restrict:
            return []
        batch = self.budget.take(self.space.full(restrict), "mixed (product of winners)")
        decisions.append(f"mixed: planned {len(batch)} combinations of winning values")
        return batch


STRATEGIES: dict[str, type[SearchStrategy]] = {
    "fast": FastSearch,
    "full": FullSearch,
    "mixed": MixedSearch,
    "random": RandomSearch,
}
