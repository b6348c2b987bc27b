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

from gpt_triton.core.measurements import Interval
from gpt_triton.measure import tail_resample

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
# A p99 alone is drawn tail first (gpt_triton/measure/tail_resample.py): the same replicates' law
# without sorting each resample.


class _TwoStage:
    """Two-stage resamples of windows, vectorised for the named statistics.

    Windows are padded into a (k, max_n) array; a batch of draws picks k windows per draw, resamples
    each chosen window to its own size, pads with +inf, sorts each draw once and reads every quantile
    (numpy's linear interpolation, on each draw's own length) and the mean from it. A callable
    statistic falls back to one draw at a time.
    """

    def __init__(self, windows: Sequence[np.ndarray]) -> None:
        self.windows = list(windows)
        self.sizes = np.array([w.size for w in windows])
        self.padded = np.full((len(windows), int(self.sizes.max())), np.inf)
        for j, w in enumerate(windows):
            self.padded[j, : w.size] = w

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        chosen = rng.integers(0, self.sizes.size, size=self.sizes.size)
        return np.concatenate([self.windows[j][rng.integers(0, self.sizes[j], self.sizes[j])] for j in chosen])

    def stats(self, statistic: Statistic | Callable[..., np.ndarray] | Sequence[Statistic], resamples: int,
              rng: np.random.Generator) -> np.ndarray:
        """(resamples, n_statistics) bootstrap replicates."""
        names = [statistic] if isinstance(statistic, str) else statistic
        if callable(names) or not all(isinstance(n, str) for n in names):
            fn = statistic_fn(statistic)  # type: ignore[arg-type]
            return np.array([[float(fn(self.draw(rng), axis=-1))] for _ in range(resamples)])
        fractions = [_QUANTILES[str(n)] / 100.0 if n in _QUANTILES else -1.0 for n in names]
        if tail_resample.applies(fractions):  # p99 alone: drawn tail first, no sort (same distribution)
            return tail_resample.upper_quantile_replicates(self.windows, fractions, resamples, rng)
        return self.sorted_replicates(names, resamples, rng)

    def sorted_replicates(self, names: Sequence[Statistic], resamples: int, rng: np.random.Generator) -> np.ndarray:
        """(resamples, len(names)) replicates by resampling every latency and sorting each draw."""
        k, width = self.padded.shape
        chunk = max(1, _MAX_BATCH_ELEMENTS // (k * width))
        out = []
        for first in range(0, resamples, chunk):
            b = min(chunk, resamples - first)
            chosen = rng.integers(0, k, size=(b, k))
            sizes = self.sizes[chosen]  # (b, k)
            within = (rng.random((b, k, width)) * sizes[..., None]).astype(np.int64)
            values = self.padded[chosen[..., None], within]
            values[np.arange(width) >= sizes[..., None]] = np.inf
            flat = np.sort(values.reshape(b, -1), axis=1)
            length = sizes.sum(axis=1)
            rows = np.arange(b)
            cols = []
            for name in names:
                if name == "mean":
                    cols.append(np.where(np.isfinite(flat), flat, 0.0).sum(axis=1) / length)
                    continue
                pos = _QUANTILES[str(name)] / 100.0 * (length - 1)
                lo = np.floor(pos).astype(np.int64)
                hi = np.minimum(lo + 1, length - 1)
                cols.append(flat[rows, lo] + (pos - lo) * (flat[rows, hi] - flat[rows, lo]))
            out.append(np.stack(cols, axis=1))
        return np.concatenate(out)


def _clean(windows: Sequence[np.ndarray | Sequence[float]]) -> list[np.ndarray]:
    return [np.asarray(w, dtype=np.float64) for w in windows if len(w)]


def _percentile_ci(boot: np.ndarray, point: np.ndarray, level: float) -> list[Interval]:
    alpha = (1.0 - level) / 2.0
    lows, highs = np.quantile(boot, alpha, axis=0), np.quantile(boot, 1.0 - alpha, axis=0)
    out = []
    for i in range(boot.shape[1]):
        low, high = _finite(float(lows[i]), float(highs[i]), float(point[i]))
        out.append(Interval(value=float(point[i]), low=low, high=high, level=level))
    return out


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
    point = np.array([float(statistic_fn(statistic)(np.concatenate(parts), axis=-1))])
    boot = _TwoStage(parts).stats(statistic, resamples, np.random.default_rng(seed))
    return _percentile_ci(boot, point, level)[0]


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
    pooled = np.concatenate(parts)
    point = np.array([float(statistic_fn(name)(pooled, axis=-1)) for name in statistics])
    boot = _TwoStage(parts).stats(list(statistics), resamples, np.random.default_rng(seed))
    return {str(name): iv for name, iv in zip(statistics, _percentile_ci(boot, point, level), strict=True)}


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
    point = np.array([float(fn(np.concatenate(base), axis=-1)) / float(fn(np.concatenate(win), axis=-1))])
    rng = np.random.default_rng(seed)
    boot = _TwoStage(base).stats(statistic, resamples, rng) / _TwoStage(win).stats(statistic, resamples, rng)
    return _percentile_ci(boot, point, level)[0]
