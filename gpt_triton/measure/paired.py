"""The gain as a paired statistic: one ratio per round, from two windows run side by side.

The finalist stage's estimate and the re-measure alternate the baseline and the selected candidate, a
window each per round. The pooled ratio, p99(every baseline request) / p99(every winner request), lets a
few windows decide it: on the ResNet CNN the machine had slow spells of a second or more (no other process
to be seen, no steal), and a window that caught one put dozens of requests into a p99 that rests on the
slowest 1% of 12,000. An additive stall moves the faster candidate's p99 further in proportion, so the
pooled ratio fell with the number of such windows each run happened to catch: over ten ResNet tunes the
estimate lay within 5% of the re-measure in 5, and the finalist pair's interval stayed at +/-17% to
+/-75% after 24 windows each (benchmarks/results/estimate_resnet_2026-12-06.txt).

Paired, each round gives log(stat(baseline window) / stat(winner window)) from two windows a few seconds
apart: a slow spell that spans both moves both, and one that hits one window is one round of 24, not a
pool's tail. The gain is the geometric mean over rounds, with a t interval over the rounds' log ratios
(each window holds the requests the quantile needs, 500 for a p99: :mod:`.quantiles`). Recomputed from
the same ten tunes' windows, the estimate came within 5% of the re-measure in 9 (benchmarks/paired_gain.py).

It measures a slightly different thing: the typical window's p99 ratio, not the ratio of pooled p99s.
On a quiet machine the two agree to a few percent (conv_attention: 1.47 paired, 1.43 pooled); under slow
spells the paired one stays near what a quiet machine shows. ``measure.gain_statistic: pooled`` keeps the
pooled ratio with its two-stage bootstrap (:func:`.stats.window_ratio_interval`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from gpt_triton.core.measurements import Interval
from gpt_triton.core.spec import GainStatistic
from gpt_triton.measure.stats import Statistic, statistic_fn, window_ratio_interval


def window_values(windows: Sequence[np.ndarray | Sequence[float]], statistic: Statistic) -> np.ndarray:
    """``statistic`` of each window's latencies, in the order run (an empty window gives NaN)."""
    fn = statistic_fn(statistic)
    return np.array([float(fn(np.asarray(w, dtype=np.float64), axis=-1)) if len(w) else np.nan for w in windows])


def round_log_ratios(baseline_values: Sequence[float] | np.ndarray,
                     winner_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """log(baseline / winner) per round: the i-th window of each side is round i (the harness alternates
    them); rounds past the shorter side, or with a value that is not a positive number, are left out."""
    n = min(len(baseline_values), len(winner_values))
    base = np.asarray(baseline_values, dtype=np.float64)[:n]
    win = np.asarray(winner_values, dtype=np.float64)[:n]
    ok = np.isfinite(base) & np.isfinite(win) & (base > 0) & (win > 0)
    return np.log(base[ok] / win[ok])


def log_ratio_interval(log_ratios: Sequence[float] | np.ndarray, level: float = 0.95) -> Interval:
    """exp(mean) of the rounds' log ratios with a t interval over the rounds; one round gives its point alone."""
    data = np.asarray(log_ratios, dtype=np.float64)
    if data.size == 0:
        raise ValueError("a paired ratio needs at least one round with a window of each side")
    centre = float(data.mean())
    if data.size < 2 or np.ptp(data) == 0.0:
        value = float(np.exp(centre))
        return Interval(value=value, low=value, high=value, level=level)
    half = float(stats.t.ppf(0.5 + level / 2, data.size - 1)) * float(data.std(ddof=1)) / np.sqrt(data.size)
    return Interval(value=float(np.exp(centre)), low=float(np.exp(centre - half)), high=float(np.exp(centre + half)),
                    level=level)


def paired_ratio_interval(baseline_windows: Sequence[np.ndarray | Sequence[float]],
                          winner_windows: Sequence[np.ndarray | Sequence[float]],
                          statistic: Statistic = "p99", level: float = 0.95) -> Interval:
    """The gain stat(baseline) / stat(winner) (>1: the winner is faster) paired by round: the geometric mean
    of the per-round window ratios with its t interval."""
    return log_ratio_interval(round_log_ratios(window_values(baseline_windows, statistic),
                                               window_values(winner_windows, statistic)), level)


def pair_ratio_interval(baseline_windows: Sequence[np.ndarray | Sequence[float]],
                        winner_windows: Sequence[np.ndarray | Sequence[float]], statistic: Statistic,
                        how: GainStatistic = "paired", level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Interval:
    """The pair's gain as ``measure.gain_statistic`` (``how``) forms it: paired by round
    (:func:`paired_ratio_interval`) or pooled with a two-stage bootstrap (:func:`.stats.window_ratio_interval`,
    ``resamples`` and ``seed`` for it). The one place both the stop rule and the reported gain choose."""
    if how == "paired":
        return paired_ratio_interval(baseline_windows, winner_windows, statistic, level)
    return window_ratio_interval(baseline_windows, winner_windows, statistic, level, resamples, seed)
