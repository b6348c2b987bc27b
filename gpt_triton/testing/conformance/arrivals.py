"""The conformance suite every :class:`~gpt_triton.measure.arrivals.ArrivalProcess` passes.

A test class subclasses :class:`ArrivalProcessConformance`, implements :meth:`make` and sets ``rate``:
the arrivals per second the process claims, or None for a closed loop (no schedule). Everything is
computed from the process alone; no server is involved.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from gpt_triton.measure.arrivals import ArrivalProcess

# Stated bounds. A rate process's count in a window of expected size m = rate x duration stays within
# m +- (4 sqrt(m) + 1): four Poisson standard deviations (false alarm < 1e-4 per window for a true
# Poisson count; a process conditioned on its count, or a constant one, is exact) plus rounding.
COUNT_SDS = 4.0
# The last arrival is within this many mean gaps of the window's end: a Poisson window's last gap
# exceeds it with probability e^-10.
END_GAPS = 10.0
SEEDS = range(20)


class ArrivalProcessConformance:
    """Contract: sorted, non-negative, finite offsets drawn from the given generator only (same seed,
    same schedule), at least ``min_requests`` of them, the claimed rate within the stated bound and
    covering the window; a closed loop returns None whatever it is asked."""

    rate: ClassVar[float | None]  # arrivals/s the process claims; None: closed loop
    duration_s: ClassVar[float] = 2.0

    def make(self) -> ArrivalProcess:
        raise NotImplementedError

    def _offsets(self, duration_s: float, min_requests: int = 0, seed: int = 0) -> np.ndarray | None:
        return self.make().offsets(duration_s, min_requests, np.random.default_rng(seed))

    def test_closed_loop_exactly_when_no_rate_is_claimed(self) -> None:
        for min_requests in (0, 50):
            offsets = self._offsets(self.duration_s, min_requests)
            if self.rate is None:
                assert offsets is None, "a closed loop has no schedule: offsets() must return None"
            else:
                assert isinstance(offsets, np.ndarray) and offsets.ndim == 1 and offsets.size > 0

    def test_offsets_are_sorted_finite_and_non_negative(self) -> None:
        for seed in SEEDS:
            offsets = self._offsets(self.duration_s, seed=seed)
            if offsets is None:
                assert self.rate is None
                continue
            assert np.all(np.isfinite(offsets)), f"seed {seed}: non-finite offsets"
            assert offsets[0] >= 0.0, f"seed {seed}: first offset {offsets[0]} < 0"
            assert np.all(np.diff(offsets) >= 0.0), f"seed {seed}: offsets not sorted"

    def test_same_seed_same_schedule_from_the_generator_only(self) -> None:
        # The legacy global generator must play no part: put it in two different states between the calls.
        saved = np.random.get_state()
        try:
            np.random.seed(1)
            first = self._offsets(self.duration_s, seed=7)
            np.random.seed(2)
            second = self._offsets(self.duration_s, seed=7)
        finally:
            np.random.set_state(saved)
        if first is None or second is None:
            assert first is None and second is None and self.rate is None
            return
        assert np.array_equal(first, second), "the same seed must give the same schedule"

    def test_count_and_rate_within_the_stated_bound(self) -> None:
        if self.rate is None:
            assert self._offsets(self.duration_s) is None
            return
        expected = self.rate * self.duration_s
        slack = COUNT_SDS * math.sqrt(expected) + 1.0
        counts = []
        for seed in SEEDS:
            offsets = self._offsets(self.duration_s, seed=seed)
            assert offsets is not None
            count = int(np.sum(offsets < self.duration_s))
            assert abs(count - expected) <= slack, (
                f"seed {seed}: {count} arrivals in {self.duration_s} s, expected {expected:g} +- {slack:.1f}")
            counts.append(count)
            # The schedule covers the window: no silent stretch at its end.
            assert self.duration_s - float(offsets[offsets < self.duration_s][-1]) <= END_GAPS / self.rate
        # Over all seeds the mean rate is tighter still: the same bound on the pooled count.
        pooled, pooled_expected = sum(counts), expected * len(counts)
        assert abs(pooled - pooled_expected) <= COUNT_SDS * math.sqrt(pooled_expected) + len(counts)

    def test_min_requests_are_honoured(self) -> None:
        short = 0.05
        for min_requests in (1, 50, 137):
            offsets = self._offsets(short, min_requests)
            if offsets is None:
                assert self.rate is None
                continue
            assert offsets.size >= min_requests, f"{offsets.size} arrivals for min_requests={min_requests}"
            if self.rate is not None and min_requests > self.rate * short + 1:
                # Extra arrivals keep the rate: they stretch the schedule instead of bunching up.
                span = float(offsets[-1])
                assert span >= (offsets.size - 1) / self.rate * 0.5, f"{offsets.size} arrivals bunched into {span:.3f} s"
