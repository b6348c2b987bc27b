"""The stability rule and the per-load summary."""

from __future__ import annotations

import numpy as np

from gpt_triton.core.measurements import LoadProfile, ServerBreakdown, WindowResult
from gpt_triton.measure.loadgen import WindowSample
from gpt_triton.measure.windows import P99_MIN_REQUESTS, is_stable, merge_breakdowns, summarise


def window(tp: float, p50: float, p99: float, requests: int = 100, errors: int = 0) -> WindowResult:
    return WindowResult(duration_s=1.0, requests=requests, errors=errors, throughput=tp, p50_ms=p50,
                        p90_ms=p50, p99_ms=p99, mean_ms=p50)


def test_stable_needs_three_windows_within_tolerance() -> None:
    assert not is_stable([window(100, 1, 2), window(100, 1, 2)])
    assert is_stable([window(300, 9, 9), window(100, 1.0, 2), window(104, 1.05, 9), window(97, 0.97, 2)])
    assert not is_stable([window(100, 1, 2), window(130, 1, 2), window(100, 1, 2)])  # throughput
    assert not is_stable([window(100, 1, 2), window(100, 1.3, 2), window(100, 1, 2)])  # p50


def test_p99_only_counts_with_enough_requests() -> None:
    few = [window(100, 1, 2), window(100, 1, 5), window(100, 1, 3)]
    assert is_stable(few)  # p99 of a 100-request window is its max: ignored
    n = P99_MIN_REQUESTS
    many = [window(100, 1, 2, n), window(100, 1, 5, n), window(100, 1, 3, n)]
    assert not is_stable(many)


def test_window_with_only_errors_is_not_stable() -> None:
    assert not is_stable([window(0, 0, 0, 10, 10)] * 3)


def test_summarise_pools_latencies_and_merges_server() -> None:
    rng = np.random.default_rng(0)
    samples = []
    for i in range(4):
        lat = rng.exponential(2.0, 300)
        res = window(300, float(np.median(lat)), float(np.percentile(lat, 99)), 300)
        res.server = ServerBreakdown(queue_ms=i, compute_infer_ms=1.0, success_count=100 * (i + 1), execution_count=10)
        res.rate_held = i != 2
        samples.append(WindowSample(res, lat))
    stats = summarise(LoadProfile(kind="rate", rate=300), samples, resamples=300)
    pooled = np.concatenate([s.latencies_ms for s in samples])
    assert stats.p99_ms is not None and stats.p50_ms is not None and stats.mean_ms is not None
    assert stats.p99_ms.value == np.percentile(pooled, 99)
    assert stats.p50_ms.low < stats.p50_ms.value < stats.p50_ms.high
    assert stats.rate_held is False  # one window did not hold the rate
    assert len(stats.windows) == 4
    assert stats.server is not None and stats.server.success_count == 1000
    assert abs(stats.server.queue_ms - (0 * 100 + 1 * 200 + 2 * 300 + 3 * 400) / 1000) < 1e-9
    assert merge_breakdowns([None]) is None
