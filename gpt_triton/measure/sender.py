"""One generator's share of a window on tritonclient's asyncio gRPC client.

A :class:`Job` says what to send (picklable: the multi-process mode ships it to spawned workers); a
:class:`Raw` collects what happened, per request. Open loop: each request's latency is measured from
its **scheduled** send time and the lag between scheduled and actual send is recorded, so a generator
that falls behind is visible instead of silently lowering the rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.grpc.aio as aioclient
import tritonclient.http.aio as httpaio
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, serialize_byte_tensor

from gpt_triton.measure.grpc_lean import GrpcConnection, GrpcRequestFailed

HTTP_ENDPOINT_UNKNOWN = ("measure.protocol is http but the server's HTTP endpoint is unknown (a --triton-url on gRPC "
                         "port 8001 implies HTTP on 8000): use measure.protocol grpc")


@dataclass
class Job:
    """What one generator process runs (picklable, for the multi-process mode)."""

    grpc_url: str
    model_name: str
    payloads: list[dict[str, np.ndarray]]
    outputs: list[str] | None
    concurrency: int  # closed loop when offsets is None
    offsets: np.ndarray | None  # open loop: seconds after the start
    duration_s: float
    min_requests: int
    payload_start: int = 0  # closed loop: where this generator starts cycling through the payloads
    indices: np.ndarray | None = None  # open loop: the payload of each arrival (a replay trace's own)
    drain_timeout_s: float = 30.0
    protocol: str = "grpc"  # measure.protocol: how the load reaches Triton (statistics always come over gRPC)
    http_url: str | None = None  # the server's HTTP endpoint, for protocol http
    settle_s: float = 0.0  # lean loop: requests sent for this long after the probe are not counted


@dataclass
class Raw:
    """Per-request figures of one generator, merged across processes by the window's summary."""

    latencies_ms: list[float] = field(default_factory=list)
    send_lags_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    sent: int = 0
    start: float = 0.0  # time.monotonic(): CLOCK_MONOTONIC, shared by every process of the machine
    end: float = 0.0
    last_send: float = 0.0


def _inputs(payload: dict[str, np.ndarray], module: Any = aioclient) -> list[Any]:
    out = []
    for name, array in payload.items():
        item = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        item.set_data_from_numpy(np.ascontiguousarray(array))
        out.append(item)
    return out


def serialised_request(model_name: str, payload: dict[str, np.ndarray], outputs: list[str] | None) -> bytes:
    """The wire bytes of one ModelInferRequest, built once: the lean loop sends them as they are."""
    request = service_pb2.ModelInferRequest(model_name=model_name)
    for name, array in payload.items():
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, np_to_triton_dtype(array.dtype)
        tensor.shape.extend(array.shape)
        if tensor.datatype == "BYTES":
            packed = serialize_byte_tensor(array)
            request.raw_input_contents.append(packed.item() if packed.size else b"")
        else:
            request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    for name in outputs or []:
        request.outputs.add().name = name
    return request.SerializeToString()


def drive_lean(job: Job, before_start: Callable[[], float | None] | None = None) -> Raw:
    """Closed loop at concurrency 1, as lean as perf_analyzer's synchronous mode: one unary gRPC call at a
    time on a plain HTTP/2 connection (:mod:`gpt_triton.measure.grpc_lean`), every request serialised
    before the window and the response left unparsed (a failure arrives as the call's status). No event
    loop, no per-request allocation beyond the frames: at concurrency 1 the asyncio client's scheduling
    and InferInput/numpy copies cost more client time than a small model's inference (issue 16: 15.3 ms
    against perf_analyzer's 13.6 ms), and grpcio's blocking call still 7-11% of a 1 ms model's p50."""
    if job.offsets is not None or job.concurrency != 1:
        raise ValueError("drive_lean runs a closed loop at concurrency 1 only")
    connection = GrpcConnection(job.grpc_url)
    try:
        wire = [serialised_request(job.model_name, p, job.outputs) for p in job.payloads]
        return lean_loop(job, lambda index: connection.call(wire[index % len(wire)]), (GrpcRequestFailed, OSError),
                         str, before_start)
    finally:
        connection.close()


def lean_loop(job: Job, call: Callable[[int], object], failures: tuple[type[BaseException], ...],
              describe: Callable[[Any], str], before_start: Callable[[], float | None] | None = None) -> Raw:
    """The timed loop of the lean clients: ``call(index)`` sends payload ``index`` and blocks until its
    response; an exception in ``failures`` is a failed request (``describe`` words it). One untimed
    probe first opens the connection, so the first timed request does not pay for it; then requests
    go uncounted for ``job.settle_s`` (the previous model's carry-over), before the window's clock and
    the server-side snapshot (``before_start``) start."""
    raw = Raw()
    index = job.payload_start
    settled = time.monotonic() + job.settle_s
    while True:
        try:
            call(index)
        except failures as exc:
            raw.first_error = raw.first_error or describe(exc)
        index += 1
        if time.monotonic() >= settled:
            break
    start = before_start() if before_start is not None else None
    raw.start = start if start is not None else time.monotonic()
    hard_stop = raw.start + max(10 * job.duration_s, job.duration_s + 60.0)
    latencies, clock = raw.latencies_ms, time.monotonic
    index = job.payload_start
    while True:
        sent = clock()
        if (sent - raw.start >= job.duration_s and len(latencies) + raw.errors >= job.min_requests) \
                or sent >= hard_stop:
            break
        try:
            call(index)
        except failures as exc:
            raw.errors += 1
            raw.first_error = raw.first_error or describe(exc)
        else:
            latencies.append((clock() - sent) * 1e3)
        index += 1
    raw.sent = len(latencies) + raw.errors
    raw.end = raw.last_send = clock()
    return raw


async def drive(job: Job, before_start: Callable[[], Awaitable[float | None]] | None = None) -> Raw:
    """Run one generator's share of a window. ``before_start`` runs after the channel is warm and
    before the clock starts (snapshots, or the multi-process start barrier); a float it returns is the
    common start time."""
    http = job.protocol == "http"  # run_window checked that http_url is set
    module: Any = httpaio if http else aioclient
    client = module.InferenceServerClient(job.http_url if http else job.grpc_url)
    raw = Raw()
    try:
        # Converted once: building InferInputs per send would cost client CPU inside the timed window.
        # (HTTP inputs go binary by default, and with no outputs named the client asks for binary ones.)
        prepared = [_inputs(p, module) for p in job.payloads]
        outputs = [module.InferRequestedOutput(n) for n in job.outputs] if job.outputs else None
        try:  # untimed probe: opens the HTTP/2 channel so the first timed request does not pay for it
            await client.infer(job.model_name, prepared[job.payload_start % len(prepared)], outputs=outputs)
        except InferenceServerException as exc:
            raw.first_error = str(exc)
        start = await before_start() if before_start is not None else None
        raw.start = start if start is not None else time.monotonic()
        counter = iter(range(job.payload_start, 1 << 62))

        async def send(scheduled: float | None, index: int | None = None) -> None:
            index = (next(counter) if index is None else index) % len(prepared)
            sent = time.monotonic()
            raw.sent += 1
            raw.last_send = max(raw.last_send, sent)
            if scheduled is not None:
                raw.send_lags_ms.append((sent - scheduled) * 1e3)
            try:
                await client.infer(job.model_name, prepared[index], outputs=outputs)
            except InferenceServerException as exc:
                raw.errors += 1
                raw.first_error = raw.first_error or str(exc)
                return
            done = time.monotonic()
            raw.end = max(raw.end, done)
            raw.latencies_ms.append((done - (scheduled if scheduled is not None else sent)) * 1e3)

        if job.offsets is None:
            await _closed_loop(job, raw, send)
        else:
            await _open_loop(job, job.offsets, raw, send)
        raw.end = max(raw.end, raw.last_send, raw.start)
        return raw
    finally:
        await client.close()


async def _closed_loop(job: Job, raw: Raw, send: Callable[[float | None], Awaitable[None]]) -> None:
    # A server that stalls must not hold the window forever: min_requests yields to a hard stop.
    hard_stop = raw.start + max(10 * job.duration_s, job.duration_s + 60.0)

    async def worker() -> None:
        while True:
            now = time.monotonic()
            done = len(raw.latencies_ms) + raw.errors
            if (now - raw.start >= job.duration_s and done >= job.min_requests) or now >= hard_stop:
                return
            await send(None)

    await asyncio.gather(*(worker() for _ in range(job.concurrency)))


async def _open_loop(job: Job, offsets: np.ndarray, raw: Raw,
                     send: Callable[[float | None, int | None], Coroutine[Any, Any, None]]) -> None:
    tasks: list[asyncio.Task[None]] = []
    indices = job.indices if job.indices is not None else np.arange(job.payload_start, job.payload_start + len(offsets))
    for offset, index in zip(offsets, indices, strict=True):
        target = raw.start + float(offset)
        delay = target - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing to the schedule, not synchronisation
        # A task per request: a slow response must not delay the next scheduled send.
        tasks.append(asyncio.create_task(send(target, int(index))))
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=job.drain_timeout_s)
        for task in pending:
            task.cancel()
        raw.errors += len(pending)
        if pending:
            raw.first_error = raw.first_error or f"{len(pending)} requests still pending after the drain timeout"
