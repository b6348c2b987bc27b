"""Candidate search as ask/tell, like Model Analyzer's generators: plan routes, learn from scores, plan more.

The space, per enabled and available compiler family: its knobs, the graph-rewrite knobs and the serving
knobs. A spec entry ``{knob: value}`` fixes a knob, ``{knob: [values]}`` sweeps those values, and an
unspecified knob sweeps every value its family offers. Modes (TensorRT's ``--tuningSearch`` semantics):

* ``fast``: each family's starting route plus one knob changed at a time (serving and graph knobs included);
* ``full``: the cartesian product per family, capped by ``max_builds`` (logged);
* ``mixed``: fast, then - after :meth:`CandidateSearch.tell` - the product over the knob values that beat
  that family's starting route;
* ``random``: ``random_routes`` routes drawn with ``seed`` (reproducible).

Knobs that cannot matter (e.g. the fp16 block list under fp32) are reset to their default, so no two
planned routes differ only in them; nothing else is ever dropped except by ``max_builds``, which is logged.
The baseline (ONNX Runtime defaults, no graph rewrite, serving defaults) is always the first candidate.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Route
from gpt_triton.core.spec import FamilySpec, TuneSpec
from gpt_triton.routes import FAMILIES
from gpt_triton.routes._base import RouteFamily
from gpt_triton.routes._common import canonical, conditional

BASELINE_FAMILY = "onnxruntime"


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _unique(values: Sequence[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for value in values:
        if _key(value) not in seen:
            seen.add(_key(value))
            out.append(value)
    return out


@dataclass
class KnobSpace:
    """One family's knobs under the spec: values swept per knob and the starting route."""

    family: RouteFamily
    values: dict[str, list[Any]]
    defaults: dict[str, Any]  # the family's own defaults
    start: dict[str, Any]  # the starting route under the spec (fixed values applied)
    rules: Mapping[str, tuple[str, tuple[Any, ...]]] = field(default_factory=dict)

    def canon(self, knobs: dict[str, Any]) -> dict[str, Any]:
        return canonical(self.family, knobs, self.defaults)

    def _split(self, values: Mapping[str, list[Any]]) -> tuple[list[str], list[str]]:
        conds = [k for k in values if k in self.rules and self.rules[k][0] in values]
        return [k for k in values if k not in conds], conds

    def enumerate(self, values: Mapping[str, list[Any]] | None = None) -> Iterator[dict[str, Any]]:
        """Every distinct canonical route over ``values`` (default: the whole space), in a stable order."""
        values = values or self.values
        plain, conds = self._split(values)
        for combo in itertools.product(*(values[k] for k in plain)):
            base = dict(zip(plain, combo, strict=True))
            choices = [
                values[c] if base[self.rules[c][0]] in self.rules[c][1] else [self.defaults[c]] for c in conds
            ]
            for extra in itertools.product(*choices):
                yield {**base, **dict(zip(conds, extra, strict=True))}

    def count(self, values: Mapping[str, list[Any]] | None = None) -> int:
        """len(list(enumerate(values))) without enumerating: sum over the parents' values only."""
        values = values or self.values
        plain, conds = self._split(values)
        parents = sorted({self.rules[c][0] for c in conds})
        free = 1
        for k in plain:
            if k not in parents:
                free *= len(values[k])
        total = 0
        for combo in itertools.product(*(values[p] for p in parents)):
            chosen = dict(zip(parents, combo, strict=True))
            n = 1
            for c in conds:
                parent, when = self.rules[c]
                n *= len(values[c]) if chosen[parent] in when else 1
            total += n
        return free * total


def knob_space(family: RouteFamily, model: ModelInfo, family_spec: FamilySpec | None) -> KnobSpace:
    knobs = family.knobs(model)
    values = {k.name: _unique(k.values) for k in knobs}
    defaults = {k.name: k.default for k in knobs}
    start = dict(defaults)
    for name, ks in (family_spec.knob_specs() if family_spec else {}).items():
        if name not in values:
            raise GptTritonError(
                f"spec families.{family.name}.knobs names unknown knob {name!r}; {family.name} knobs: {', '.join(values)}"
            )
        if ks.values is not None:
            if not ks.values:
                raise GptTritonError(f"spec families.{family.name}.knobs.{name} sweeps an empty list; give at least one value")
            values[name] = _unique(ks.values)
            start[name] = defaults[name] if _key(defaults[name]) in {_key(v) for v in values[name]} else values[name][0]
        else:
            values[name] = [ks.value]
            start[name] = ks.value
    space = KnobSpace(family=family, values=values, defaults=defaults, start={}, rules=conditional(family))
    space.start = space.canon(start)
    return space


def candidate_id(route: Route, graph: Route | None, serving: Route) -> str:
    text = f"{route.key()} | {graph.key() if graph else 'graph: none'} | {serving.key()}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


Change = tuple[int, str, Any]  # (space index: 0 compiler, 1 graph, 2 serving; knob; value)


class CandidateSearch:
    """Plans candidates in batches (:meth:`ask`) and learns from their scores (:meth:`tell`)."""

    def __init__(self, spec: TuneSpec, model: ModelInfo, families: Mapping[str, RouteFamily] = FAMILIES) -> None:
        self.spec = spec
        self.model = model
        self.families = families
        self.decisions: list[str] = []
        unknown = sorted(set(spec.families) - set(families))
        if unknown:
            raise GptTritonError(f"spec names unknown route famil(ies) {unknown}; known families: {', '.join(families)}")
        self.compilers: dict[str, KnobSpace] = {}
        graph_space: KnobSpace | None = None
        serving_space: KnobSpace | None = None
        for name, family in families.items():
            fspec = spec.families.get(name)
            space = knob_space(family, model, fspec)  # validates knob names even for disabled families
            available, why = family.availability()
            if fspec is not None and not fspec.enabled:
                self.decisions.append(f"{name}: disabled by the spec")
                space = self._frozen(space)
            elif not available:
                self.decisions.append(f"{name}: unavailable here ({why})")
                space = self._frozen(space)
            elif family.kind == "compiler":
                self.compilers[name] = space
            if family.kind == "graph" and graph_space is None:
                graph_space = space
            elif family.kind == "serving" and serving_space is None:
                serving_space = space
        self.graph = graph_space or self._empty()
        self.serving = serving_space or self._empty()
        base_family = families.get(BASELINE_FAMILY) or next(iter(families.values()))
        self.baseline = self._candidate(
            base_family.name, knob_space(base_family, model, None).defaults, self.graph.defaults, self.serving.defaults,
            is_baseline=True,
        )
        if BASELINE_FAMILY not in self.compilers:
            self.decisions.append(f"baseline: {BASELINE_FAMILY} defaults are still planned first, as the reference for every gain")
        self._planned: dict[str, Candidate] = {}
        self._changes: dict[str, tuple[str, list[Change]]] = {}  # fast candidates: family and what changed
        self._scores: dict[str, float | None] = {}
        self._phase = 0

    # -- construction helpers -------------------------------------------------------------------------
    @staticmethod
    def _frozen(space: KnobSpace) -> KnobSpace:
        """A disabled graph/serving family keeps its defaults (and a disabled compiler is not searched)."""
        return KnobSpace(space.family, {k: [v] for k, v in space.defaults.items()}, space.defaults, dict(space.defaults), space.rules)

    @staticmethod
    def _empty() -> KnobSpace:
        class _None(RouteFamily):
            name = "none"

            def availability(self) -> tuple[bool, str]:
                return True, ""

            def knobs(self, model: ModelInfo) -> list[Any]:
                return []

            def build(self, route: Route, context: Any, out_dir: Any) -> Any:
                raise NotImplementedError

        return KnobSpace(_None(), {}, {}, {})

    def _candidate(
        self, family: str, knobs: dict[str, Any], graph: dict[str, Any], serving: dict[str, Any], is_baseline: bool = False
    ) -> Candidate:
        route = Route(family=family, knobs=knobs)
        graph_route = None if graph == self.graph.defaults else Route(family=self.graph.family.name, knobs=graph)
        serving_route = Route(family=self.serving.family.name, knobs=serving)
        return Candidate(
            id=candidate_id(route, graph_route, serving_route), family=family, route=route, graph=graph_route,
            serving=serving_route, is_baseline=is_baseline,
        )

    def _make(self, family: str, routes: Sequence[dict[str, Any]] | Iterator[dict[str, Any]]) -> Candidate:
        compiler, graph, serving = routes
        return self._candidate(family, compiler, graph, serving)

    def _spaces(self, name: str) -> list[KnobSpace]:
        return [self.compilers[name], self.graph, self.serving]

    # -- plans ----------------------------------------------------------------------------------------
    def _fast(self) -> list[tuple[Candidate, str, list[Change]]]:
        """Each family's starting route, then one knob changed at a time."""
        out: list[tuple[Candidate, str, list[Change]]] = []
        for name in self.compilers:
            spaces = self._spaces(name)
            start = [dict(s.start) for s in spaces]
            out.append((self._make(name, start), name, []))
            for index, space in enumerate(spaces):
                for knob, values in space.values.items():
                    for value in values:
                        if _key(value) == _key(start[index][knob]):
                            continue
                        changes: list[Change] = [(index, knob, value)]
                        knobs = dict(start[index], **{knob: value})
                        rule = space.rules.get(knob)
                        if rule and knobs.get(rule[0]) not in rule[1]:
                            # A knob that only applies under another knob's value is tried under the first such
                            # value the parent sweeps; without one it cannot change anything.
                            enabling = [v for v in space.values.get(rule[0], []) if v in rule[1]]
                            if not enabling:
                                continue
                            knobs[rule[0]] = enabling[0]
                            changes.append((index, rule[0], enabling[0]))
                        routes = list(start)
                        routes[index] = space.canon(knobs)
                        out.append((self._make(name, routes), name, changes))
        return out

    def _full(self, restrict: dict[str, list[dict[str, list[Any]]]] | None = None) -> Iterator[Candidate]:
        """Cartesian product per family, interleaved round-robin so a cap still covers every family."""
        streams = [self._product(name, restrict[name] if restrict else None) for name in self.compilers]
        for batch in itertools.zip_longest(*streams):
            yield from (c for c in batch if c is not None)

    def _product(self, name: str, values: list[dict[str, list[Any]]] | None) -> Iterator[Candidate]:
        spaces = self._spaces(name)
        restricted: Sequence[dict[str, list[Any]] | None] = values if values else [None, None, None]
        for routes in itertools.product(*(s.enumerate(v) for s, v in zip(spaces, restricted, strict=True))):
            yield self._make(name, routes)

    def full_count(self, name: str) -> int:
        return self.compilers[name].count() * self.graph.count() * self.serving.count()

    def _random(self) -> Iterator[Candidate]:
        rng = random.Random(self.spec.search.seed)
        names = list(self.compilers)
        if not names:
            return
        for _ in range(self.spec.search.random_routes * 100):
            name = rng.choice(names)
            routes = [s.canon({k: rng.choice(v) for k, v in s.values.items()}) for s in self._spaces(name)]
            yield self._make(name, routes)

    # -- ask / tell -----------------------------------------------------------------------------------
    def _take(self, candidates: Iterator[Candidate] | Sequence[Candidate], label: str, limit: int | None = None) -> list[Candidate]:
        """New candidates from ``candidates`` up to ``limit`` and the max_builds budget (a cut is logged)."""
        budget = self.spec.search.max_builds - len(self._planned)
        out: list[Candidate] = []
        seen: set[str] = set()
        cut = 0
        for candidate in candidates:
            if candidate.id in self._planned or candidate.id in seen:
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
                f"{label}: max_builds={self.spec.search.max_builds} reached; {more} not planned "
                f"(raise search.max_builds to cover them)"
            )
        for candidate in out:
            self._planned[candidate.id] = candidate
        return out

    def ask(self) -> list[Candidate]:
        """The next batch of new planned candidates; [] when the mode is done or the budget is used."""
        mode = self.spec.search.mode
        phase, self._phase = self._phase, self._phase + 1
        if not self.compilers and phase == 0:
            self.decisions.append("no compiler family is enabled and available; only the baseline is planned")
        if phase == 0:
            first = self._take([self.baseline], "baseline")
            if mode in ("fast", "mixed"):
                planned = self._fast()
                batch = self._take([c for c, _, _ in planned], f"{mode} (one knob at a time)")
                for candidate, name, changes in planned:
                    self._changes.setdefault(candidate.id, (name, changes))
                self.decisions.append(f"{mode}: planned {len(first) + len(batch)} routes (baseline + each family's start + one knob at a time)")
                return first + batch
            if mode == "full":
                total = sum(self.full_count(n) for n in self.compilers)
                batch = self._take(self._full(), "full (cartesian)")
                self.decisions.append(f"full: {total} routes in the cartesian product; planned {len(first) + len(batch)}")
                return first + batch
            batch = self._take(self._random(), "random", limit=self.spec.search.random_routes)
            self.decisions.append(
                f"random: planned {len(batch)} routes with seed {self.spec.search.seed} (+ baseline)"
            )
            return first + batch
        if mode == "mixed" and phase == 1:
            return self._refine()
        return []

    def tell(self, candidates: Sequence[Candidate], score: Callable[[Candidate], float | None]) -> None:
        """Record scores (lower is better; None = crashed or infeasible) for planned candidates."""
        for candidate in candidates:
            self._scores[candidate.id] = score(candidate)

    def _refine(self) -> list[Candidate]:
        """Mixed, phase 2: per family, the product over the knob values that beat its starting route."""
        restrict: dict[str, list[dict[str, list[Any]]]] = {}
        for name in self.compilers:
            spaces = self._spaces(name)
            start_id = self._make(name, (s.start for s in spaces)).id
            start_score = self._scores.get(start_id)
            if start_score is None:
                why = "was not scored" if start_id not in self._scores else "crashed or was infeasible"
                self.decisions.append(f"mixed: {name}'s starting route {why}; no refinement for {name}")
                continue
            winners: list[dict[str, list[Any]]] = [{k: [v] for k, v in s.start.items()} for s in spaces]
            found = []
            for cid, (family, changes) in self._changes.items():
                score = self._scores.get(cid)
                if family != name or not changes or score is None or score >= start_score:
                    continue
                for index, knob, value in changes:
                    if _key(value) not in {_key(v) for v in winners[index][knob]}:
                        winners[index][knob].append(value)
                found.append(" & ".join(f"{k}={json.dumps(v)}" for _, k, v in changes) + f" ({score:.4g} < {start_score:.4g})")
            if found:
                self.decisions.append(f"mixed: {name} values that beat its start: {'; '.join(found)}")
                restrict[name] = winners
            else:
                self.decisions.append(f"mixed: no {name} knob value beat its start; nothing to combine")
        if not restrict:
            return []
        saved = self.compilers
        self.compilers = {n: s for n, s in saved.items() if n in restrict}
        try:
            batch = self._take(self._full(restrict), "mixed (product of winners)")
        finally:
            self.compilers = saved
        self.decisions.append(f"mixed: planned {len(batch)} combinations of winning values")
        return batch

    # -- counts for `gpt-triton routes` ---------------------------------------------------------------
    def plan_counts(self) -> dict[str, Any]:
        """Routes each mode would plan for this model and spec (before max_builds, and after it)."""
        fast = self._fast()
        fast_ids = {self.baseline.id} | {c.id for c, _, _ in fast}
        families: dict[str, dict[str, int]] = {}
        for name in self.compilers:
            families[name] = {"fast": len({c.id for c, n, _ in fast if n == name}), "full": self.full_count(name)}
        families[self.graph.family.name] = {"values": self.graph.count()}
        families[self.serving.family.name] = {"values": self.serving.count()}
        full = 1 + sum(self.full_count(n) for n in self.compilers)  # upper bound: the baseline may repeat a route
        cap = self.spec.search.max_builds
        return {
            "modes": {
                "fast": len(fast_ids), "full": full, "mixed": len(fast_ids),
                "random": 1 + self.spec.search.random_routes,
            },
            "max_builds": cap,
            "families": families,
        }
