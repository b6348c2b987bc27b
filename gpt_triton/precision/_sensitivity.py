"""The sensitivity search: which layer groups must a reduced-precision route keep at full precision?

Pure over a ``probe`` (kept groups -> the tuning-split verdict of the route that lowers every other group),
so it is tested without building anything. The steps, each probe costing one build and one pass over the
tuning split:

1. lower every group (the whole-graph route); if it passes, no mix is needed;
2. for each group, lower that group alone (keep the others): its damage to the task metric
   (requests failing, then the margin);
3. keep groups back in fp32, most damaging first, until the route passes with the safety margin: that mix
   is proposed. Keeping every group is the fp32 route, never a mix.

Every step stops when the :class:`ProbeBudget` (probe count and time, shared by every lowering of a run)
is spent, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProbeResult:
    """The verdict on the tuning split of one route that keeps ``kept`` in fp32 and lowers the rest."""

    kept: tuple[str, ...]
    exceedances: int
    requests: int
    min_margin: float
    passed: bool  # under the tightened tolerance (the safety margin applied)
    seconds: float = 0.0
    reason: str | None = None  # a failed build or run

    def describe(self) -> str:
        kept = ", ".join(self.kept) or "none"
        text = f"keep [{kept}]: {self.exceedances}/{self.requests} requests fail, margin {self.min_margin:.3f}"
        return text + (f" ({self.reason})" if self.reason else "")


Probe = Callable[[tuple[str, ...]], ProbeResult]


class ProbeBudget:
    """Probes left and a monotonic deadline, shared by every lowering of one run."""

    def __init__(self, max_probes: int, deadline: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_probes = max_probes
        self.deadline = deadline
        self.clock = clock
        self.used = 0
        self.exhausted: str | None = None  # why the last take() failed

    def take(self) -> bool:
        if self.used >= self.max_probes:
            self.exhausted = f"precision.max_probes={self.max_probes} reached"
            return False
        if self.deadline is not None and self.clock() >= self.deadline:
            self.exhausted = "the run's time budget (less precision.reserve_s) is spent"
            return False
        self.used += 1
        return True


@dataclass
class SensitivityResult:
    groups: list[str]
    whole_graph: ProbeResult | None = None
    damage: dict[str, ProbeResult] = field(default_factory=dict)  # group -> verdict with only it lowered
    steps: list[ProbeResult] = field(default_factory=list)  # the greedy keep-back steps
    mix: ProbeResult | None = None  # the first passing mix, proposed as a candidate
    stopped: str | None = None  # why the search ended early (budget), None when it ran its course

    @property
    def probes(self) -> int:
        return (self.whole_graph is not None) + len(self.damage) + len(self.steps)


def sensitivity_search(groups: Sequence[str], probe: Probe, budget: ProbeBudget) -> SensitivityResult:
    """Find the fewest groups (greedily, by damage) to keep in fp32 so the lowered route passes."""
    result = SensitivityResult(groups=list(groups))
    if not budget.take():
        result.stopped = budget.exhausted
        return result
    result.whole_graph = probe(())
    if result.whole_graph.passed or len(groups) < 2:
        return result
    for group in groups:
        if not budget.take():
            result.stopped = budget.exhausted
            return result
        result.damage[group] = probe(tuple(g for g in groups if g != group))
    position = {g: i for i, g in enumerate(groups)}
    order = sorted(groups, key=lambda g: (-result.damage[g].exceedances, result.damage[g].min_margin, position[g]))
    kept: list[str] = []
    for group in order[:-1]:
        kept.append(group)
        if not budget.take():
            result.stopped = budget.exhausted
            return result
        step = probe(tuple(sorted(kept, key=position.__getitem__)))
        result.steps.append(step)
        if step.passed:
            result.mix = step
            break
    return result
