"""Two-stage bootstrap replicates of a pooled upper quantile (p99) without sorting every resample.

The two-stage bootstrap (:class:`gpt_triton.measure.stats._TwoStage`) picks k windows with replacement,
resamples each picked window to its own size, pools and reads the quantile: a sort of some 50,000
latencies per replicate once a pair has 60 windows. The stop rule of the gain-precision extension and
the reported gain interval (p99 ratios, 1000-2000 replicates a side) spent seconds per call on those
sorts (2026-12-05, conv_attention, 63 windows each: ~10 s for the re-measure's gain interval alone).

A p99 only depends on the top 1% of the pooled resample, and the same draw can be generated top
first, exactly:

* the windows picked: counts ``M_j`` of each window j over k uniform picks;
* window j picked ``M_j`` times, each resampling its ``n_j`` latencies, is one multinomial of
  ``M_j * n_j`` draws over them; the counts of its largest values come one at a time as binomials of
  what is left (``c_1 ~ Bin(M n, 1/n)``, ``c_2 ~ Bin(M n - c_1, 1/(n-1))``, ...), and only values at or
  above a threshold G (the pooled data's own p96 for a p99) are drawn this way;
* the pooled quantile is read off the cumulative counts of those values in descending order. It is
  exact when the value read is at least every picked window's largest value below G: no value left
  out could then rank above it. A replicate where it is not (rare: the resample's p99 would have to
  fall below the data's p96) is completed exactly: its remaining draws are made and it is sorted.

So the replicates have the same distribution as :class:`~gpt_triton.measure.stats._TwoStage`'s
(different random numbers), at a cost that grows with the tail, not with every latency.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TAIL_FACTOR = 4.0  # the values drawn one by one: the top TAIL_FACTOR x (1 - q) of the pooled data
MIN_QUANTILE = 0.95  # below it the tail is no longer small: callers sort instead
_MAX_ELEMENTS = 4_000_000  # replicates x tail values held at once


def applies(quantiles: Sequence[float]) -> bool:
    """Whether every requested quantile (a fraction) is high enough for the tail path."""
    return bool(quantiles) and min(quantiles) >= MIN_QUANTILE and max(quantiles) < 1.0


def upper_quantile_replicates(windows: Sequence[np.ndarray], quantiles: Sequence[float], resamples: int,
                              rng: np.random.Generator) -> np.ndarray:
    """(resamples, len(quantiles)) two-stage bootstrap replicates of the pooled quantiles (fractions,
    numpy's linear interpolation), drawn tail first. ``windows`` are non-empty latency arrays."""
    if not applies(quantiles):
        raise ValueError(f"the tail path needs quantiles in [{MIN_QUANTILE}, 1): got {list(quantiles)}")
    tail = _Tail([np.sort(np.asarray(w, dtype=np.float64))[::-1] for w in windows], min(quantiles))
    chunk = max(1, _MAX_ELEMENTS // max(tail.values.size, len(windows)))
    return np.concatenate([tail.replicates(quantiles, min(chunk, resamples - first), rng)
                           for first in range(0, resamples, chunk)])


class _Tail:
    """Each window's values at or above the threshold, laid end to end (window j's largest first at
    ``offsets[j]``), and the same values in descending order over all windows."""

    def __init__(self, desc: list[np.ndarray], quantile: float) -> None:
        self.desc = desc
        self.sizes = np.array([w.size for w in desc], dtype=np.int64)
        threshold = float(np.quantile(np.concatenate(desc), 1.0 - TAIL_FACTOR * (1.0 - quantile)))
        self.tail_sizes = np.array([int(np.count_nonzero(w >= threshold)) for w in desc], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.tail_sizes)[:-1]]).astype(np.int64)
        self.values = np.concatenate([w[:m] for w, m in zip(desc, self.tail_sizes, strict=True)])
        # The largest value of each window that is not drawn one by one (-inf when all of it is).
        self.below = np.array([w[m] if m < w.size else -np.inf for w, m in zip(desc, self.tail_sizes, strict=True)])
        self.order = np.argsort(-self.values, kind="stable")
        self.values_desc = self.values[self.order]

    def replicates(self, quantiles: Sequence[float], b: int, rng: np.random.Generator) -> np.ndarray:
        k = len(self.desc)
        picks = rng.integers(0, k, size=(b, k))
        times = np.bincount((picks + k * np.arange(b)[:, None]).ravel(), minlength=b * k).reshape(b, k)
        left = times * self.sizes  # draws still to place, per replicate and window
        counts = np.zeros((b, self.values.size), dtype=np.int64)
        for i in range(int(self.tail_sizes.max(initial=0))):
            active = np.flatnonzero(self.tail_sizes > i)
            c = rng.binomial(left[:, active], 1.0 / (self.sizes[active] - i))
            counts[:, self.offsets[active] + i] = c
            left[:, active] -= c
        cum = np.cumsum(counts[:, self.order], axis=1)
        length = times @ self.sizes
        floor_values = np.where(times > 0, self.below[None, :], -np.inf).max(axis=1)
        result = np.empty((b, len(quantiles)))
        exact = np.ones(b, dtype=bool)
        for col, q in enumerate(quantiles):
            pos = q * (length - 1)
            lo = np.floor(pos).astype(np.int64)
            hi = np.minimum(lo + 1, length - 1)
            v_lo, ok_lo = _rank_from_top(cum, self.values_desc, length - lo)
            v_hi, ok_hi = _rank_from_top(cum, self.values_desc, length - hi)
            exact &= ok_lo & ok_hi & (v_lo >= floor_values)
            with np.errstate(invalid="ignore"):  # -inf where the tail is short: those rows are completed below
                result[:, col] = v_lo + (pos - lo) * (v_hi - v_lo)
        for row in np.flatnonzero(~exact):
            result[row] = self.complete(counts[row], left[row], quantiles, rng)
        return result

    def complete(self, counts: np.ndarray, left: np.ndarray, quantiles: Sequence[float],
                 rng: np.random.Generator) -> np.ndarray:
        """One replicate whose quantile reaches below the drawn tail: its remaining draws (uniform over
        each window's values below the tail, as the multinomial continues), then a sort."""
        parts = []
        for j, w in enumerate(self.desc):
            m, at = int(self.tail_sizes[j]), int(self.offsets[j])
            parts.append(np.repeat(w[:m], counts[at: at + m]))
            if left[j] > 0:
                parts.append(w[rng.integers(m, w.size, size=int(left[j]))])
        return np.quantile(np.concatenate(parts), list(quantiles))


def _rank_from_top(cum: np.ndarray, values_desc: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``rank``-th largest (1-based) of each replicate's drawn tail, and whether the tail has that many."""
    if cum.shape[1] == 0:
        return np.full(rank.shape, -np.inf), np.zeros(rank.shape, dtype=bool)
    enough = cum[:, -1] >= rank
    at = np.argmax(cum >= rank[:, None], axis=1)
    return np.where(enough, values_desc[at], -np.inf), enough
