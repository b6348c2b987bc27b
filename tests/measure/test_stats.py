"""Bootstrap intervals: coverage on known distributions, ratios, degenerate inputs."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.measure.stats import (
    bootstrap_interval,
    overlaps,
    ratio_interval,
    throughput_interval,
    window_bootstrap_interval,
    window_bootstrap_intervals,
    window_ratio_interval,
)


@pytest.mark.parametrize(("statistic", "q"), [("p50", 0.5), ("p90", 0.9), ("mean", None)])
def test_interval_covers_true_value_at_about_the_stated_rate(statistic: str, q: float | None) -> None:
    # Exponential(scale=1): quantile q is -ln(1-q), mean is 1. 150 simulated samples of 400 latencies.
    truth = -np.log(1 - q) if q is not None else 1.0
    rng = np.random.default_rng(123)
    trials, hits = 150, 0
    for i in range(trials):
        data = rng.exponential(1.0, size=400)
        iv = bootstrap_interval(data, statistic, level=0.90, resamples=600, seed=i)  # type: ignore[arg-type]
        assert iv.low <= iv.value <= iv.high
        hits += iv.low <= truth <= iv.high
    coverage = hits / trials
    # Nominal 0.90; binomial sd over 150 trials is ~0.025, so [0.80, 0.97] is a ~4 sd band.
    assert 0.80 <= coverage <= 0.97, coverage


def test_interval_narrows_with_more_data() -> None:
    rng = np.random.default_rng(1)
    small = bootstrap_interval(rng.exponential(1.0, 100), "p90", resamples=500)
    large = bootstrap_interval(rng.exponential(1.0, 10_000), "p90", resamples=500)
    assert (large.high - large.low) < (small.high - small.low) / 3


def test_ratio_interval_separates_a_real_gain_and_not_noise() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(np.log(10.0), 0.2, 2000)
    faster = rng.lognormal(np.log(8.0), 0.2, 2000)
    same = rng.lognormal(np.log(10.0), 0.2, 2000)
    gain = ratio_interval(base, faster, "p50", resamples=800)
    assert gain.low > 1.15 and gain.high < 1.35  # true ratio 1.25
    null = ratio_interval(base, same, "p99", resamples=800)
    assert null.low < 1.0 < null.high


def test_degenerate_inputs_give_point_intervals() -> None:
    iv = bootstrap_interval([5.0, 5.0, 5.0, 5.0], "p99")
    assert (iv.low, iv.value, iv.high) == (5.0, 5.0, 5.0)
    one = bootstrap_interval([3.0], "mean")
    assert one.low == one.high == 3.0
    with pytest.raises(ValueError):
        bootstrap_interval([], "p50")


def test_throughput_interval_over_windows() -> None:
    two = throughput_interval([100.0, 120.0])
    assert (two.low, two.value, two.high) == (100.0, 110.0, 120.0)
    many = throughput_interval([100, 104, 98, 101, 99, 103, 97, 102])
    assert 97 < many.low < many.value < many.high < 104
    assert overlaps(two, many)


def test_window_bootstrap_accounts_for_drift_between_windows() -> None:
    # Each window has its own multiplicative condition (other tenants, frequency): a candidate's true
    # p50 is the median of the mixture; pooled-request intervals ignore the window effect and
    # under-cover, the two-stage bootstrap keeps near its level.
    rng = np.random.default_rng(7)
    # The mixture's median from a very large sample stands in for the exact value.
    truth = float(np.median(rng.exponential(1.0, 1_000_000) * rng.lognormal(0, 0.25, 1_000_000)))
    trials, pooled_hits, window_hits = 60, 0, 0
    for i in range(trials):
        windows = [rng.exponential(1.0, 300) * rng.lognormal(0, 0.25) for _ in range(8)]
        pooled = bootstrap_interval(np.concatenate(windows), "p50", 0.90, 300, seed=i)
        two = window_bootstrap_interval(windows, "p50", 0.90, 300, seed=i)
        assert two.value == pooled.value and (two.high - two.low) > (pooled.high - pooled.low)
        pooled_hits += pooled.low <= truth <= pooled.high
        window_hits += two.low <= truth <= two.high
    assert pooled_hits / trials < 0.70  # over-confident (about 0.45 here)
    assert window_hits / trials > 0.75  # near the nominal 0.90 with 8 windows (about 0.9 here)


def test_window_intervals_fall_back_and_agree() -> None:
    rng = np.random.default_rng(3)
    windows = [rng.exponential(1.0, 100) for _ in range(4)]
    many = window_bootstrap_intervals(windows, ("p50", "p99", "mean"), resamples=300)
    single = window_bootstrap_interval(windows, "p99", resamples=300)
    assert many["p99"].value == single.value and set(many) == {"p50", "p99", "mean"}
    two = window_bootstrap_interval(windows[:2], "p50", resamples=300)  # < 3 windows: plain bootstrap
    assert two == bootstrap_interval(np.concatenate(windows[:2]), "p50", resamples=300)
    ratio = window_ratio_interval(windows, [w * 0.5 for w in windows], "p50", resamples=300)
    assert ratio.value == 2.0 and ratio.low < 2.0 < ratio.high
