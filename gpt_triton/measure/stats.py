"""Bootstrap confidence intervals for latency statistics, gains and throughput.

Built on :func:`scipy.stats.bootstrap`. Quantiles use the percentile method: BCa's jackknife
acceleration is unreliable for a non-smooth statistic like a sample quantile (and costs n evaluations);
the mean uses BCa. Resampling is batched so a window pool of 50k latencies never materialises a
resamples x n matrix at once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from scipy import stats

from gpt_triton.measure.records import Interval

Statistic = Literal["p50", "p90", "p99", "mean"]
_QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
_MAX_BATCH_ELEMENTS = 4_000_000  # resamples x n held in memory at once


def statistic_fn(statistic: Statistic | Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """A vectorised ``f(x, axis=-1)`` for a statistic name (or the callable itself)."""
    if callable(statistic):
        return statistic
    if statistic == "mean":
        return lambda x, axis=-1: np.asarray(np.mean(x, axis=axis))
    if statistic in _QUANTILES:
        q = _QUANTILES[statistic]
        return lambda x, axis=-1: np.asarray(np.percentile(x, q, axis=axis))
    raise ValueError(f"unknown statistic {statistic!r}: use p50, p90, p99, mean or a callable")


def _method(statistic: Statistic | Callable[..., np.ndarray]) -> Literal["percentile", "BCa"]:
    return "BCa" if statistic == "mean" else "percentile"


def _batch(n: int) -> int:
    return max(1, _MAX_BATCH_ELEMENTS // max(n, 1))


def _finite(low: float, high: float, value: float) -> tuple[float, float]:
    # A degenerate resample distribution can give NaN bounds (BCa on near-constant data): fall back to
    # the point estimate rather than propagating NaN into selection.
    low = value if not np.isfinite(low) else min(low, value)
    high = value if not np.isfinite(high) else max(high, value)
    return float(low), float(high)


def bootstrap_interval(
    samples: Sequence[float] | np.ndarray,
    statistic: Statistic | Callable[..., np.ndarray] = "p99",
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Point estimate and bootstrap CI of ``statistic`` over ``samples`` (e.g. pooled latencies, ms)."""
    data = np.asarray(samples, dtype=np.float64)
    if data.size == 0:
        raise ValueError("bootstrap_interval needs at least one sample")
    fn = statistic_fn(statistic)
    value = float(fn(data, axis=-1))
    if data.size < 3 or np.ptp(data) == 0.0:
        return Interval(value=value, low=value, high=value, level=level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on degenerate resamples; handled by _finite
        res = stats.bootstrap(
            (data,), fn, vectorized=True, n_resamples=resamples, batch=_batch(data.size),
            confidence_level=level, method=_method(statistic), random_state=np.random.default_rng(seed),
        )
    low, high = _finite(res.confidence_interval.low, res.confidence_interval.high, value)
    return Interval(value=value, low=low, high=high, level=level)


def ratio_interval(
    baseline_samples: Sequence[float] | np.ndarray,
    winner_samples: Sequence[float] | np.ndarray,
    statistic: Statistic | Callable[..., np.ndarray] = "p99",
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """CI of stat(baseline) / stat(winner) (>1: the winner is faster), resampling both independently.

    For throughput pass window throughputs as samples with ``statistic="mean"`` and swap the arguments
    (winner / baseline), so >1 still means the winner is better.
    """
    base = np.asarray(baseline_samples, dtype=np.float64)
    win = np.asarray(winner_samples, dtype=np.float64)
    if base.size == 0 or win.size == 0:
        raise ValueError("ratio_interval needs samples on both sides")
    fn = statistic_fn(statistic)

    def ratio(b: np.ndarray, w: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(fn(b, axis=axis)) / np.asarray(fn(w, axis=axis))

    value = float(ratio(base, win))
    if min(base.size, win.size) < 3 or (np.ptp(base) == 0.0 and np.ptp(win) == 0.0):
        return Interval(value=value, low=value, high=value, level=level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (base, win), ratio, vectorized=True, paired=False, n_resamples=resamples,
            batch=_batch(base.size + win.size), confidence_level=level, method=_method(statistic),
            random_state=np.random.default_rng(seed),
        )
    low, high = _finite(res.confidence_interval.low, res.confidence_interval.high, value)
    return Interval(value=value, low=low, high=high, level=level)


def throughput_interval(window_throughputs: Sequence[float], level: float = 0.95, resamples: int = 2000,
                        seed: int = 0) -> Interval:
    """CI of the mean throughput over windows (each window is one observation: requests inside a
    window are not independent, windows roughly are). Fewer than 3 windows: the min-max range."""
    data = np.asarray(window_throughputs, dtype=np.float64)
    if data.size == 0:
        raise ValueError("throughput_interval needs at least one window")
    if data.size < 3:
        return Interval(value=float(data.mean()), low=float(data.min()), high=float(data.max()), level=level)
    return bootstrap_interval(data, "mean", level, resamples, seed)


def overlaps(a: Interval, b: Interval) -> bool:
    return a.low <= b.high and b.low <= a.high


# ---------------------------------------------------------------- two-stage (window) bootstrap
#
# Requests inside one window share its conditions (other tenants, frequency, cache state): on this kind
# of shared 2-core machine a candidate's window p99 moved 7.6 -> 14.2 ms between consecutive windows
# while the pooled bootstrap interval over 3 windows was +-6%. Treating pooled requests as independent
# makes intervals far too narrow, so racing drops and ties trust them too much. The two-stage bootstrap
# resamples windows with replacement, then requests within each chosen window, so between-window
# variation is in the interval. Percentile method (scipy's bootstrap has no clustered resampling).


class _TwoStage:
    """Draws two-stage resamples from windows flattened into one array (a few numpy calls per draw)."""

    def __init__(self, windows: Sequence[np.ndarray]) -> None:
        self.pooled = np.concatenate(windows)
        self.sizes = np.array([w.size for w in windows])
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        chosen = rng.integers(0, self.sizes.size, size=self.sizes.size)
        sizes = self.sizes[chosen]
        within = (rng.random(int(sizes.sum())) * np.repeat(sizes, sizes)).astype(np.int64)
        return self.pooled[np.repeat(self.starts[chosen], sizes) + within]


def _clean(windows: Sequence[np.ndarray | Sequence[float]]) -> list[np.ndarray]:
    return [np.asarray(w, dtype=np.float64) for w in windows if len(w)]


def window_bootstrap_interval(
    windows: Sequence[np.ndarray | Sequence[float]],
    statistic: Statistic | Callable[..., np.ndarray] = "p99",
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """CI of ``statistic`` over the pooled latencies of several windows, resampling windows and then
    requests within them. With fewer than 3 windows it falls back to :func:`bootstrap_interval`."""
    parts = _clean(windows)
    if len(parts) < 3:
        return bootstrap_interval(np.concatenate(parts) if parts else [], statistic, level, resamples, seed)
    fn = statistic_fn(statistic)
    value = float(fn(np.concatenate(parts), axis=-1))
    rng = np.random.default_rng(seed)
    draws = _TwoStage(parts)
    boot = np.array([float(fn(draws.draw(rng), axis=-1)) for _ in range(resamples)])
    alpha = (1.0 - level) / 2.0
    low, high = _finite(float(np.quantile(boot, alpha)), float(np.quantile(boot, 1.0 - alpha)), value)
    return Interval(value=value, low=low, high=high, level=level)


def window_ratio_interval(
    baseline_windows: Sequence[np.ndarray | Sequence[float]],
    winner_windows: Sequence[np.ndarray | Sequence[float]],
    statistic: Statistic | Callable[..., np.ndarray] = "p99",
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """CI of stat(baseline) / stat(winner) with both sides resampled in two stages, independently.
    Falls back to :func:`ratio_interval` on the pooled latencies when a side has fewer than 3 windows."""
    base, win = _clean(baseline_windows), _clean(winner_windows)
    if not base or not win:
        raise ValueError("window_ratio_interval needs latencies on both sides")
    if min(len(base), len(win)) < 3:
        return ratio_interval(np.concatenate(base), np.concatenate(win), statistic, level, resamples, seed)
    fn = statistic_fn(statistic)
    value = float(fn(np.concatenate(base), axis=-1)) / float(fn(np.concatenate(win), axis=-1))
    rng = np.random.default_rng(seed)
    base_draws, win_draws = _TwoStage(base), _TwoStage(win)
    boot = np.array([float(fn(base_draws.draw(rng), axis=-1)) / float(fn(win_draws.draw(rng), axis=-1))
                     for _ in range(resamples)])
    alpha = (1.0 - level) / 2.0
    low, high = _finite(float(np.quantile(boot, alpha)), float(np.quantile(boot, 1.0 - alpha)), value)
    return Interval(value=value, low=low, high=high, level=level)


def window_bootstrap_intervals(
    windows: Sequence[np.ndarray | Sequence[float]],
    statistics: Sequence[Statistic] = ("p50", "p90", "p99", "mean"),
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Interval]:
    """:func:`window_bootstrap_interval` for several named statistics from the same draws (one pass)."""
    parts = _clean(windows)
    if len(parts) < 3:
        return {str(name): window_bootstrap_interval(parts, name, level, resamples, seed) for name in statistics}
    qs = [_QUANTILES[name] for name in statistics if name in _QUANTILES]

    def all_stats(x: np.ndarray) -> np.ndarray:
        values = list(np.percentile(x, qs)) if qs else []
        return np.asarray(values + ([float(x.mean())] if "mean" in statistics else []))

    names = [name for name in statistics if name in _QUANTILES] + (["mean"] if "mean" in statistics else [])
    point = all_stats(np.concatenate(parts))
    rng = np.random.default_rng(seed)
    draws = _TwoStage(parts)
    boot = np.stack([all_stats(draws.draw(rng)) for _ in range(resamples)])
    alpha = (1.0 - level) / 2.0
    lows, highs = np.quantile(boot, alpha, axis=0), np.quantile(boot, 1.0 - alpha, axis=0)
    out: dict[str, Interval] = {}
    for i, name in enumerate(names):
        low, high = _finite(float(lows[i]), float(highs[i]), float(point[i]))
        out[name] = Interval(value=float(point[i]), low=low, high=high, level=level)
    return out
