"""When is a gain known well enough? The stop rule of the finalist stage and of the re-measure.

Racing stops once candidates are *separated*; that says who is faster, not by how much. A gain read
off a handful of p99 windows can be off by tens of percent (issue 16: selection estimated 1.05 where
the re-measure found 1.28 [0.96, 1.70]), so both the finalist stage and the separate re-measure go on
with the pair that matters - the selected candidate and the baseline - until the ratio of their objective is
known to ``measure.gain_precision`` (the 95% interval's relative half-width), or the window cap
``measure.gain_max_windows`` is reached, or the run's ``time_budget_s`` would be overrun (the finalist
stage may use half of what is left, the re-measure the rest). Both runs then rest on an interval of
known width, and a selection estimate and its re-measured gain can only disagree by about the two
widths together.

The ratio is formed as ``measure.gain_statistic`` says: paired by round (the default, :mod:`.paired`: a
t interval over the rounds' log ratios, cheap) or pooled. The pooled interval is a two-stage bootstrap
over every window so far, so its cost grows with the windows: checked
after every round, it took more wall time than the windows themselves once a pair had some 40 each
(2026-12-05, conv_attention: at 60 windows each a round of two 0.75 s windows took 6 s, some 4 s of it
checking). :func:`next_check` spaces the checks geometrically instead, and earlier when the width seen
so far says the target is near.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpt_triton.core.measurements import Interval
from gpt_triton.core.spec import GainStatistic
from gpt_triton.measure.paired import pair_ratio_interval

STOP_RULE_RESAMPLES = 1000  # the stop rule's interval; the reported one uses the spec's resamples
CHECK_GROWTH = 1.25  # windows between two checks of the rule grow by this factor: at most 25% past the target


@dataclass(frozen=True)
class GainPrecision:
    """The baseline/leader ratio after a round, and whether it is known to the target."""

    ratio: Interval
    half_width: float  # relative: the larger of high/value - 1 and 1 - low/value
    windows: int  # of the side with fewer windows
    reached: bool
    requests: tuple[int, int]  # (baseline, leader): the requests the ratio rests on


def rule_applies(gain_precision_target: float, metric: str) -> bool:
    """Whether the stop rule runs at all: a target above 0 and a latency objective (a throughput ratio is
    over windows' rates, not latencies)."""
    return gain_precision_target > 0 and metric != "throughput"


def relative_half_width(interval: Interval) -> float:
    if interval.value <= 0 or not np.isfinite(interval.value):
        return float("inf")
    return max(interval.high / interval.value - 1.0, 1.0 - interval.low / interval.value)


def gain_precision(baseline_windows: Sequence[np.ndarray], leader_windows: Sequence[np.ndarray], metric: str,
                   target: float, seed: int = 0, statistic: GainStatistic = "paired") -> GainPrecision | None:
    """The ratio ``metric(baseline) / metric(leader)`` with its 95% interval, formed as ``statistic`` says
    (``measure.gain_statistic``: paired by round, :mod:`.paired`; or pooled, with a two-stage bootstrap);
    None while either side has fewer than 3 windows (no window-level interval yet) or the metric is not
    a latency statistic."""
    if metric not in ("p50", "p90", "p99", "mean"):
        return None
    base, lead = [w for w in baseline_windows if w.size], [w for w in leader_windows if w.size]
    if min(len(base), len(lead)) < 3:
        return None
    # Unfiltered: paired, the i-th window of each is round i, so the pairs are formed before any is left out.
    ratio = pair_ratio_interval(baseline_windows, leader_windows, metric, statistic,  # type: ignore[arg-type]
                                0.95, STOP_RULE_RESAMPLES, seed)
    width = relative_half_width(ratio)
    return GainPrecision(ratio=ratio, half_width=width, windows=min(len(base), len(lead)), reached=width <= target,
                         requests=(sum(w.size for w in base), sum(w.size for w in lead)))


def windows_to_reach(found: GainPrecision, target: float) -> int | None:
    """The windows each the pair would need for a half-width of ``target``, projected from ``found`` as a
    ratio's half-width shrinks, about 1/sqrt(windows); None when the width is unknown (an infinite bound)."""
    projected = _projected(found.windows, found.half_width, target)
    return None if projected is None else max(found.windows, projected)


def _projected(windows: int, half_width: float, target: float) -> int | None:
    if target <= 0 or not math.isfinite(half_width):
        return None
    return math.ceil(windows * (half_width / target) ** 2)


def next_check(windows: int, found: GainPrecision | None, target: float) -> int:
    """The windows each (of the pair) at which the stop rule is next worth computing, after computing it
    at ``windows``: a quarter more windows, or fewer when the width ``found`` there projects the target
    sooner (:func:`windows_to_reach`); always at least one more round."""
    if found is None or target <= 0:
        return windows + 1
    growth = math.ceil(windows * CHECK_GROWTH)
    projected = _projected(windows, found.half_width, target)
    return max(windows + 1, min(growth, projected if projected is not None else growth))


def shortfall_note(found: GainPrecision, target: float, round_s: float | None) -> str:
    """What the target would have cost, for a run that stopped short of it: the projected windows each
    and, with ``round_s`` (the wall seconds of one round of the pair as run), the time. A user sizes
    ``measure.gain_max_windows`` and ``time_budget_s`` from it instead of guessing."""
    needed = windows_to_reach(found, target)
    if needed is None:
        return ""
    more = f", some {needed - found.windows} rounds ({_duration((needed - found.windows) * round_s)}) more" \
        if round_s is not None and round_s > 0 else ""
    return f"; at this spread +/-{100 * target:.1f}% needs about {needed} windows each{more}"


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def precision_note(doing: str, pair: tuple[str, str], found: GainPrecision | None, target: float,
                   stopped_by: str = "window cap", round_s: float | None = None) -> str:
    """One decision-log line: how well the pair's ratio is known after ``doing``, and what ended it when
    the target was not reached (``stopped_by``: the window cap or the run's time budget) with what
    reaching it would take (:func:`shortfall_note`; ``round_s``: wall seconds of one round of the pair)."""
    baseline, leader = pair
    if found is None:
        return f"{doing}: {baseline}/{leader} ratio not estimated (fewer than 3 windows each)"
    r = found.ratio
    verdict = "reached" if found.reached else \
        f"NOT reached ({stopped_by}): read the interval, not the point{shortfall_note(found, target, round_s)}"
    return (f"{doing}: {baseline}/{leader} ratio {r.value:.3f} [{r.low:.3f}, {r.high:.3f}], +/-{100 * found.half_width:.1f}% "
            f"after {found.windows} windows each ({found.requests[0]} + {found.requests[1]} requests); target +/-{100 * target:.1f}% {verdict}")
