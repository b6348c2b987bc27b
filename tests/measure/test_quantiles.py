"""Quantile estimation sized for the quantile: requests needed, order-statistic intervals, widening."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.measurements import Interval, LoadProfile, WindowResult
from gpt_triton.measure.driver import WindowSample
from gpt_triton.measure.quantiles import (
    order_statistic_interval,
    order_statistic_ranks,
    requests_needed,
    sizing_note,
    widen_for_sample_size,
    window_requests,
)
from gpt_triton.measure.windows import summarise


def test_requests_needed_follows_the_quantile() -> None:
    assert requests_needed("p99") == 500 and requests_needed("p90") == 50 and requests_needed("p50") == 10
    assert requests_needed("p99", tail=2) == 200 and requests_needed("mean") == 1
    assert window_requests("p99", 50) == 500 and window_requests("p50", 50) == 50


def test_sizing_note_turns_the_rate_into_a_window_length() -> None:
    note = sizing_note("p99", 50, 2.0, 60.0)
    assert "at least 500 requests" in note and "about 8.33 s" in note  # issue 16's 60 requests/s


def test_order_statistic_ranks_match_the_binomial_tables() -> None:
    assert order_statistic_ranks(50, 0.5) == (18, 33)  # the textbook 95% interval of a median from 50
    assert order_statistic_ranks(120, 0.99)[1] is None  # a p99 from 120 requests has no upper bound
    low, high = order_statistic_ranks(1000, 0.99)
    assert high is not None and low < 990 < high <= 1000


def test_order_statistic_interval_covers_the_true_quantile() -> None:
    rng = np.random.default_rng(1)
    truth = -np.log(1 - 0.9)  # p90 of Exp(1)
    hits = 0
    for _ in range(400):
        low, high = order_statistic_interval(rng.exponential(size=200), 0.9)
        hits += high is not None and low <= truth <= high
    assert hits / 400 >= 0.93


def test_a_tail_from_too_few_requests_is_widened_and_flagged() -> None:
    data = np.random.default_rng(0).exponential(size=120)
    tight = Interval(value=float(np.percentile(data, 99)), low=4.0, high=4.1)
    wide, bounded = widen_for_sample_size(tight, data, "p99")
    assert not bounded and wide.high == pytest.approx(data.max()) and wide.low <= tight.low
    same, ok = widen_for_sample_size(tight, data, "mean")
    assert ok and same == tight


def test_summarise_says_how_many_requests_each_estimate_rests_on() -> None:
    rng = np.random.default_rng(2)
    windows = [rng.exponential(size=60) + 1.0 for _ in range(3)]
    samples = [WindowSample(WindowResult(duration_s=1, requests=60, errors=0, throughput=60, p50_ms=float(np.median(w)),
                                         p90_ms=1, p99_ms=float(np.percentile(w, 99)), mean_ms=1), w) for w in windows]
    stats = summarise(LoadProfile(), samples, resamples=200)
    assert stats.requests == 180 and stats.unbounded == ["p99"]  # 180 requests cannot bound a p99
    assert stats.p99_ms is not None and stats.p99_ms.high == pytest.approx(max(w.max() for w in windows))
    pooled = np.concatenate(windows)
    low, high = order_statistic_interval(pooled, 0.5)
    assert stats.p50_ms is not None and high is not None
    assert stats.p50_ms.low <= low and stats.p50_ms.high >= high  # never tighter than the order statistics
