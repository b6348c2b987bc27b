"""Measurement windows: the stability rule and the per-load summary of a candidate's windows.

Stability follows perf_analyzer: the last 3 windows each lie within ``stability`` (10%) of their
mean, for throughput and for latency. Which latency: p50 always; p99 too once every window holds at
least ``P99_MIN_REQUESTS`` requests. A window of 50 requests has a "p99" that is its maximum, which
jumps with any single scheduler hiccup on a shared 2-core box and would never settle; the pooled p99
over all windows (with its bootstrap interval) is what selection uses anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpt_triton.core.measurements import LatencyStats, LoadProfile, ServerBreakdown, WindowResult
from gpt_triton.measure.loadgen import WindowSample
from gpt_triton.measure.quantiles import widen_for_sample_size
from gpt_triton.measure.stats import throughput_interval, window_bootstrap_intervals

P99_MIN_REQUESTS = 200
STABLE_LAST = 3


def _within(values: Sequence[float], tolerance: float) -> bool:
    mean = float(np.mean(values))
    if mean == 0.0:
        return all(v == 0.0 for v in values)
    return all(abs(v - mean) <= tolerance * mean for v in values)


def is_stable(windows: Sequence[WindowResult], stability: float = 0.10, last: int = STABLE_LAST) -> bool:
    """perf_analyzer's rule over the last ``last`` windows (see the module docstring)."""
    if len(windows) < last:
        return False
    tail = list(windows)[-last:]
    if any(w.requests - w.errors == 0 for w in tail):
        return False
    ok = _within([w.throughput for w in tail], stability) and _within([w.p50_ms for w in tail], stability)
    if ok and all(w.requests >= P99_MIN_REQUESTS for w in tail):
        ok = _within([w.p99_ms for w in tail], stability)
    return ok


def merge_breakdowns(breakdowns: Sequence[ServerBreakdown | None]) -> ServerBreakdown | None:
    """Success-weighted mean of per-window server breakdowns."""
    items = [b for b in breakdowns if b is not None and b.success_count > 0]
    if not items:
        return None
    total = sum(b.success_count for b in items)

    def mean(attr: str) -> float:
        return sum(getattr(b, attr) * b.success_count for b in items) / total

    return ServerBreakdown(
        queue_ms=mean("queue_ms"), compute_input_ms=mean("compute_input_ms"),
        compute_infer_ms=mean("compute_infer_ms"), compute_output_ms=mean("compute_output_ms"),
        success_count=total, execution_count=sum(b.execution_count for b in items),
    )


def summarise(
    load: LoadProfile,
    samples: Sequence[WindowSample],
    stability: float = 0.10,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> LatencyStats:
    """LatencyStats from a candidate's windows at one load: point estimates over the pooled latencies
    with two-stage bootstrap intervals, throughput interval over the windows, the windows kept."""
    windows = [s.result for s in samples]
    out = LatencyStats(load=load, windows=windows, stable=is_stable(windows, stability))
    if not samples:
        return out
    pooled = pooled_latencies(samples)
    out.errors = sum(w.errors for w in windows)
    out.server = merge_breakdowns([w.server for w in windows])
    held = [w.rate_held for w in windows if w.rate_held is not None]
    out.rate_held = all(held) if held else None
    out.throughput = throughput_interval([w.throughput for w in windows], level, resamples, seed)
    if pooled.size:
        # Two-stage (windows, then requests) so between-window drift widens the intervals; with fewer
        # than 3 windows this is the plain bootstrap over the pooled latencies.
        ivs = window_bootstrap_intervals([s.latencies_ms for s in samples], ("p50", "p90", "p99", "mean"),
                                         level, resamples, seed)
        # A quantile's interval is never tighter than its order-statistic interval over the requests it
        # rests on; one with no upper order statistic at all is flagged (selection refuses it).
        out.requests = int(pooled.size)
        for name in ("p50", "p90", "p99"):
            ivs[name], bounded = widen_for_sample_size(ivs[name], pooled, name)
            if not bounded:
                out.unbounded.append(name)
        out.p50_ms, out.p90_ms, out.p99_ms, out.mean_ms = ivs["p50"], ivs["p90"], ivs["p99"], ivs["mean"]
    return out


def pooled_latencies(samples: Sequence[WindowSample]) -> np.ndarray:
    arrays = [s.latencies_ms for s in samples if s.latencies_ms.size]
    return np.concatenate(arrays) if arrays else np.zeros(0)
