"""One measurement window: the arrival process's schedule, driven by one or more generators, summarised.

The window is flagged ``rate_held=False`` when fewer than 98% of the scheduled requests went out within
the schedule's span, the p99 send lag exceeds 20 ms, or the send lag grew during the window: the
generator, not the server, was the limit, and the window does not measure the load it was asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tritonclient.utils import InferenceServerException

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile, ServerBreakdown, WindowResult
from gpt_triton.measure.arrivals import ArrivalProcess, arrival_process
from gpt_triton.measure.http_lean import drive_lean_http
from gpt_triton.measure.sender import HTTP_ENDPOINT_UNKNOWN, Job, Raw, drive, drive_lean
from gpt_triton.measure.server_stats import StatsSnapshots, model_dtypes
from gpt_triton.measure.workers import run_processes, split_job

RATE_HELD_FRACTION = 0.98
# Sends later than this at p99 bunch the arrivals: the offered load is no longer the profile asked for.
SEND_LAG_P99_LIMIT_MS = 20.0


@dataclass
class WindowSample:
    """One window: the summary record plus the raw per-request figures it was computed from."""

    result: WindowResult
    latencies_ms: np.ndarray  # per successful request; open loop: from the scheduled send time
    send_lags_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))  # open loop only
    first_error: str | None = None
    # Windows measured before this one in its place and not counted (gpt_triton/measure/crowding.py)
    set_aside: list[WindowResult] = field(default_factory=list)


def run_window(
    grpc_url: str,
    model_name: str,
    requests: Sequence[dict[str, np.ndarray]],
    load: LoadProfile,
    duration_s: float,
    min_requests: int = 0,
    *,
    outputs: Sequence[str] | None = None,
    metrics_url: str | None = None,
    processes: int = 1,
    seed: int = 0,
    payload_start: int = 0,
    protocol: str = "grpc",
    http_url: str | None = None,
    settle_s: float = 0.0,
) -> WindowSample:
    """Drive ``model_name`` with ``load`` for ``duration_s`` (and at least ``min_requests``).

    Payloads cycle through ``requests`` (from ``payload_start``) so shapes and batch sizes are the
    reference data's. ``seed`` draws the Poisson schedule; vary it between windows. ``processes`` > 1
    splits the window across spawned generator processes (see :mod:`gpt_triton.measure.workers`).
    ``settle_s``: the concurrency-1 loop first sends requests for this long without counting them.
    """
    process = arrival_process(load, lambda: model_dtypes(grpc_url, model_name))
    payloads = process.payloads(requests)
    offsets = process.offsets(duration_s, min_requests, np.random.default_rng(seed))
    if not payloads:
        raise GptTritonError("no requests to send: the tuning split is empty")
    processes = max(1, int(processes))
    if protocol == "http" and not http_url:
        raise GptTritonError(HTTP_ENDPOINT_UNKNOWN)
    job = Job(grpc_url, model_name, payloads, list(outputs) if outputs else None, max(1, load.concurrency),
              offsets, duration_s, min_requests, payload_start, protocol=protocol, http_url=http_url,
              settle_s=settle_s)
    if offsets is not None:
        job.indices = process.payload_indices(len(offsets), payload_start, len(payloads))

    try:
        with StatsSnapshots(grpc_url, model_name, metrics_url) as snapshots:
            if processes == 1 and offsets is None and job.concurrency == 1:
                # The lean synchronous loop: the client's own cost stays out of the latency it reports.
                lean = drive_lean_http if protocol == "http" else drive_lean
                raws = [lean(job, lambda: snapshots.take("before"))]
            elif processes == 1:

                async def before() -> None:
                    snapshots.take("before")

                raws = [asyncio.run(drive(job, before))]
            else:
                raws = run_processes(split_job(job, processes), lambda: snapshots.take("before"))
            snapshots.take("after", sum(len(raw.latencies_ms) for raw in raws))
            server = snapshots.server_breakdown()
    except InferenceServerException as exc:
        raise GptTritonError(f"Triton at {grpc_url} failed for model {model_name!r}: {exc}") from exc
    return summarise(process, raws, offsets, duration_s, server)


def summarise(process: ArrivalProcess, raws: list[Raw], offsets: np.ndarray | None, duration_s: float,
              server: ServerBreakdown) -> WindowSample:
    """Merge the generators' figures into one window record (latency percentiles, rate held or not)."""
    lat = np.asarray([x for raw in raws for x in raw.latencies_ms], dtype=np.float64)
    lags = np.asarray([x for raw in raws for x in raw.send_lags_ms], dtype=np.float64)
    start = min(raw.start for raw in raws)
    elapsed = max(max(raw.end for raw in raws) - start, 1e-9)
    errors = sum(raw.errors for raw in raws)

    def pct(q: float) -> float:
        return float(np.percentile(lat, q)) if lat.size else 0.0

    result = WindowResult(
        duration_s=elapsed, requests=int(lat.size) + errors, errors=errors, throughput=lat.size / elapsed,
        p50_ms=pct(50), p90_ms=pct(90), p99_ms=pct(99), mean_ms=float(lat.mean()) if lat.size else 0.0,
        server=server,
    )
    if offsets is not None and len(offsets):
        requested = process.requested_rate()
        # A requested rate is judged over the whole window; a trace over its own span.
        span = max(float(offsets[-1]), duration_s if requested is not None else 0.0, 1e-9)
        target = len(offsets) / span
        sent = sum(raw.sent for raw in raws)
        last_send = max(raw.last_send for raw in raws) - start
        result.rate_target = requested if requested is not None else target
        result.rate_achieved = sent / max(span, last_send)
        result.send_lag_p99_ms = float(np.percentile(lags, 99)) if lags.size else 0.0
        result.rate_held = bool(
            result.rate_achieved >= RATE_HELD_FRACTION * target
            and result.send_lag_p99_ms <= SEND_LAG_P99_LIMIT_MS
            and not lag_grew(lags, target)
        )
    first_error = next((raw.first_error for raw in raws if raw.first_error), None)
    return WindowSample(result, lat, lags, first_error)


def lag_grew(lags_ms: np.ndarray, rate: float) -> bool:
    """The generator fell behind: the last third's median send lag exceeds the first third's by more
    than max(5 ms, two mean inter-arrival gaps). Jitter spikes leave the medians alone; falling behind
    accumulates and shifts them."""
    if lags_ms.size < 30:
        return False
    third = lags_ms.size // 3
    first, last = np.median(lags_ms[:third]), np.median(lags_ms[-third:])
    return bool(last - first > max(5.0, 2000.0 / max(rate, 1e-9)))
