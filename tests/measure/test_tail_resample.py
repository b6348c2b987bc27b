"""The p99's two-stage replicates drawn tail first have the law of the sorted two-stage resamples."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ks_2samp

from gpt_triton.measure import tail_resample
from gpt_triton.measure.stats import _TwoStage


def drifting_windows(seed: int, count: int = 24) -> list[np.ndarray]:
    """Windows of 200-400 latencies whose scale drifts, one of them a burst three times slower: the shape
    that makes the pooled p99 hang on a few windows."""
    rng = np.random.default_rng(seed)
    out = [(1 + 0.3 * rng.standard_normal() ** 2) * (1 + rng.exponential(0.2, int(rng.integers(200, 400))))
           for _ in range(count)]
    out[3] = out[3] * 3
    return out


def sorted_replicates(windows: list[np.ndarray], resamples: int, seed: int) -> np.ndarray:
    return _TwoStage(windows).sorted_replicates(["p99"], resamples, np.random.default_rng(seed))[:, 0]


def assert_same_law(a: np.ndarray, b: np.ndarray) -> None:
    assert ks_2samp(a, b).pvalue > 0.01
    for q in (0.025, 0.5, 0.975):
        assert np.quantile(a, q) == pytest.approx(np.quantile(b, q), rel=0.03)


def test_the_tail_first_replicates_have_the_sorted_resamples_law() -> None:
    windows = drifting_windows(1)
    tail = tail_resample.upper_quantile_replicates(windows, [0.99], 3000, np.random.default_rng(2))
    assert tail.shape == (3000, 1)
    assert_same_law(tail[:, 0], sorted_replicates(windows, 3000, 3))
    # _TwoStage takes the tail path for a p99 alone.
    via_stats = _TwoStage(windows).stats("p99", 3000, np.random.default_rng(2))
    assert np.array_equal(via_stats, tail)


def test_replicates_whose_quantile_leaves_the_tail_are_completed_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # A tail cut at the data's own p99: about half the replicates read below it and must be completed.
    monkeypatch.setattr(tail_resample, "TAIL_FACTOR", 1.0)
    completed: list[int] = []
    complete = tail_resample._Tail.complete

    def counting(self: tail_resample._Tail, *args: object) -> np.ndarray:
        completed.append(1)
        return complete(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(tail_resample._Tail, "complete", counting)
    windows = drifting_windows(4)
    tail = tail_resample.upper_quantile_replicates(windows, [0.99], 3000, np.random.default_rng(5))
    assert 300 < len(completed) < 2700
    assert_same_law(tail[:, 0], sorted_replicates(windows, 3000, 6))


def test_degenerate_windows() -> None:
    rng = np.random.default_rng(0)
    constant = [np.full(50, 2.5) for _ in range(5)]
    assert np.all(tail_resample.upper_quantile_replicates(constant, [0.99], 200, rng) == 2.5)
    tiny = [np.array([1.0]), np.array([2.0, 3.0]), np.array([4.0, 5.0, 6.0])]  # every value in the tail
    reps = tail_resample.upper_quantile_replicates(tiny, [0.99, 0.95], 4000, rng)
    assert reps.shape == (4000, 2) and np.all((reps >= 1.0) & (reps <= 6.0)) and np.all(reps[:, 0] >= reps[:, 1])
    reference = sorted_replicates(tiny, 4000, 1)  # a discrete law: compared whole, not by its quantiles
    assert ks_2samp(reps[:, 0], reference).pvalue > 0.01
    assert reps[:, 0].mean() == pytest.approx(reference.mean(), rel=0.03)


def test_only_high_quantiles_take_the_tail_path() -> None:
    assert tail_resample.applies([0.99]) and tail_resample.applies([0.95, 0.99])
    assert not tail_resample.applies([0.5, 0.99]) and not tail_resample.applies([]) and not tail_resample.applies([1.0])
    with pytest.raises(ValueError, match="needs quantiles"):
        tail_resample.upper_quantile_replicates([np.ones(3)], [0.5], 10, np.random.default_rng(0))
