"""The run's time budget, planned from what the run has seen of its own costs.

A budget that is only checked between stages is overrun by whatever starts just before its end: on a
slow model the re-measure alone (its minimum windows, on a fresh server) takes minutes. So the run keeps
what its costs have been so far (seconds per window at the objective's load, seconds to start a server
and to load a candidate) and every stage's deadline leaves room for the minimum of the stages after it:
the search for the finalists, the re-measure and the held-out acceptance; the finalists for the last two.
Stages check their deadline between rounds, so a run can still end late by about one round, never by a
whole stage.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpt_triton.core.spec import TuneSpec
from gpt_triton.measure.gain_precision import rule_applies

# Candidates in the re-measure: the winner, the baseline and the runner-up.
REMEASURE_CANDIDATES = 3
# The held-out acceptance loads the chosen candidate and the baseline and only runs inference.
HELDOUT_CANDIDATES = 2


def judging_reserve_s(spec: TuneSpec) -> float:
    """The least the search leaves of ``time_budget_s`` for the stages after it, whatever their observed
    cost: with ``measure.gain_precision`` on, a quarter of the budget (at least a minute), so that the
    finalists and the re-measure have room to extend towards a known gain width (the finalists take half of
    what is left beyond the re-measure's least cost); a search that spent it all would leave the gain
    resting on the minimum windows."""
    budget = spec.time_budget_s or 0.0
    return max(60.0, 0.25 * budget) if spec.measure.gain_precision > 0 else 60.0


@dataclass
class TimeBudget:
    """``time_budget_s`` from ``started`` (monotonic), with the run's observed costs."""

    spec: TuneSpec
    started: float = field(default_factory=time.monotonic)
    window_seconds: list[float] = field(default_factory=list)  # objective-load windows, warm-ups excluded
    server_start_seconds: list[float] = field(default_factory=list)
    server_stop_seconds: list[float] = field(default_factory=list)
    load_seconds: list[float] = field(default_factory=list)  # per candidate loaded
    unload_seconds: list[float] = field(default_factory=list)  # per candidate unloaded

    def observe_windows(self, seconds: Iterable[float]) -> None:
        self.window_seconds.extend(seconds)

    def observe_server_start(self, seconds: float) -> None:
        self.server_start_seconds.append(seconds)

    def observe_server_stop(self, seconds: float) -> None:
        self.server_stop_seconds.append(seconds)

    def observe_loads(self, seconds: float, candidates: int) -> None:
        if candidates > 0:
            self.load_seconds.extend([seconds / candidates] * candidates)

    def observe_unloads(self, seconds: float, candidates: int) -> None:
        if candidates > 0:
            self.unload_seconds.extend([seconds / candidates] * candidates)

    def server_s(self) -> float:
        """Seconds a separate step's server costs to start and stop (the slowest seen: a start is rare)."""
        return max(self.server_start_seconds, default=0.0) + max(self.server_stop_seconds, default=0.0)

    def load_s(self) -> float:
        """Seconds one candidate costs to load and unload (medians)."""
        return sum(statistics.median(seen) for seen in (self.load_seconds, self.unload_seconds) if seen)

    def window_s(self, more: Sequence[float] = ()) -> float:
        """Seconds one objective window takes: the median observed (``more``: a running stage's own), or
        before any, the configured length (a lower bound: a window is at least that long)."""
        seen = [*self.window_seconds, *more]
        m = self.spec.measure
        return statistics.median(seen) if seen else m.window_s + m.settle_s

    def step_s(self, candidates: int, windows: int, more: Sequence[float] = (), burn_in: bool = False) -> float:
        """The least a separate step costs: a fresh server, ``candidates`` loaded, each with a warm-up and
        ``windows`` windows, after ``measure.burn_in_s`` each with ``burn_in`` (the steps the gain comes from)."""
        if candidates <= 0:
            return 0.0
        per_candidate = self.load_s() + (self.spec.measure.warmup_s if windows else 0.0) + windows * self.window_s(more)
        return self.server_s() + candidates * (per_candidate + (self.spec.measure.burn_in_s if burn_in else 0.0))

    def finalists_s(self, measured: int, more: Sequence[float] = ()) -> float:
        """The finalist stage's least cost: up to ``max_finalists`` contenders and the baseline, ``min_windows``
        each, then (with ``gain_precision``) the estimate's server, which costs what a re-measure server does."""
        m = self.spec.measure
        if m.finalists <= 0 or measured <= 1:
            return 0.0
        pair = self.remeasure_server_s(more) if rule_applies(m.gain_precision, self.spec.objective.metric) else 0.0
        return self.step_s(min(m.max_finalists, measured) + 1, m.min_windows, more) + pair

    def heldout_s(self) -> float:
        """The held-out acceptance's least cost: a fresh server and two candidates loaded."""
        return self.step_s(HELDOUT_CANDIDATES, 0)

    def remeasure_server_s(self, more: Sequence[float] = ()) -> float:
        """The least one re-measure server costs (its burn-in and ``remeasure_windows`` always run)."""
        return self.step_s(REMEASURE_CANDIDATES, self.spec.measure.remeasure_windows, more, burn_in=True)

    def cross_check_s(self, more: Sequence[float] = ()) -> float:
        """The least the other client's rounds cost (``measure.cross_check``): the re-measure's first server's
        windows again, on that server (no start, load or burn-in of its own)."""
        m = self.spec.measure
        if m.cross_check == "none":
            return 0.0
        if m.cross_check_window_s is not None:  # the pair alone, remeasure_windows rounds of its own windows
            return 2 * (m.warmup_s + m.remeasure_windows * (m.cross_check_window_s + m.settle_s))
        return REMEASURE_CANDIDATES * (m.warmup_s + m.remeasure_windows * self.window_s(more))

    def remeasure_s(self, more: Sequence[float] = ()) -> float:
        """The re-measure's (on every one of its servers, and its cross-check) and the held-out acceptance's least cost."""
        return (self.spec.measure.remeasure_servers * self.remeasure_server_s(more) + self.cross_check_s(more)
                + self.heldout_s())

    def after_search_s(self, measured: int, more: Sequence[float] = ()) -> float:
        """The least the stages after the search cost: the finalists, the re-measure, the held-out acceptance."""
        return self.finalists_s(measured, more) + self.remeasure_s(more)

    def search_reserve_s(self, measured: int, more: Sequence[float] = ()) -> float:
        """What the search leaves: the later stages' least cost, and never less than :func:`judging_reserve_s`."""
        return max(judging_reserve_s(self.spec), self.after_search_s(measured, more))

    def plan_note(self, measured: int) -> str:
        """One line for the decision log after the search: what is left and what the later stages need."""
        left = self.left_s() or 0.0
        return (f"time budget: {max(0.0, left):.0f} s of {self.spec.time_budget_s or 0:.0f} s left after the search; "
                f"the finalists, the re-measure and the held-out acceptance need at least "
                f"{self.after_search_s(measured):.0f} s (planned from a {self.window_s():.3g} s "
                f"objective window, {self.server_s():.3g} s to start and stop a server, "
                f"{self.load_s():.3g} s to load and unload a candidate)")

    def left_s(self) -> float | None:
        budget = self.spec.time_budget_s
        return None if budget is None else self.started + budget - time.monotonic()

    def deadline(self, share: float = 1.0, keep_s: float = 0.0) -> float | None:
        """The monotonic time by which a stage should end to use ``share`` of what is left of the budget
        after ``keep_s`` (the later stages' least cost); None without a budget. Past it, it is now: the
        stage does its minimum."""
        left = self.left_s()
        if left is None:
            return None
        now = time.monotonic()
        return now + share * max(0.0, left - keep_s)

    def over(self, reserve_s: float = 0.0) -> bool:
        left = self.left_s()
        return left is not None and left < reserve_s
