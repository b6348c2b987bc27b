"""Load generator on tritonclient's asyncio gRPC client: closed loop, open loop, replay.

* Closed loop (``kind="concurrency"``): ``concurrency`` workers each send, await, send again.
* Open loop (``kind="rate"``): the arrival times are drawn *before* the window starts (Poisson or
  constant, seeded) and each request's latency is measured from its **scheduled** send time, so a
  generator or server that falls behind shows up as latency instead of silently lowering the rate
  (no coordinated omission). The lag between scheduled and actual send is recorded; the window is
  flagged ``rate_held=False`` when fewer than 98% of the scheduled requests went out within the
  schedule's span, the p99 send lag exceeds 20 ms, or the send lag grew during the window (the
  generator, not the server, is the limit).
* Replay (``kind="replay"``): a JSONL trace ``{"t": s, "inputs": {name: {shape, dtype, data}}}`` with
  its timestamps honoured, or perf_analyzer's input-data JSON ``{"data": [...]}`` (payloads only,
  sent at ``rate`` if given, else closed loop at ``concurrency``).

One asyncio loop in one Python process tops out at a few thousand requests/s on this kind of machine
(each request costs ~0.2-0.4 ms of client CPU). For open-loop rates beyond what one process holds (see
``benchmarks/loadgen.py``; ``rate_held`` turns false), pass ``processes=2`` or more: the schedule is
split round-robin across spawned worker processes that start together, and latencies are merged.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile, ServerBreakdown, WindowResult

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


@dataclass
class _Job:
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


@dataclass
class _Raw:
    latencies_ms: list[float] = field(default_factory=list)
    send_lags_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    sent: int = 0
    start: float = 0.0
    end: float = 0.0
    last_send: float = 0.0


# ---------------------------------------------------------------- schedules and replay files


def schedule(load: LoadProfile, duration_s: float, min_requests: int = 0, seed: int = 0) -> np.ndarray:
    """Arrival offsets (s) for an open-loop window, drawn before the window starts.

    Poisson arrivals are drawn as the Poisson process *conditioned on its count* n = rate x duration
    (sorted uniform times; the same law as exponential gaps given n), so the requested rate is exactly
    the scheduled rate and "achieved < 98% of target" measures the generator, not sampling noise.
    """
    if load.rate <= 0:
        raise GptTritonError(f"load {load.label()}: rate must be > 0 requests/s for an open-loop load")
    n = max(int(round(load.rate * duration_s)), min_requests, 1)
    span = n / load.rate
    if load.arrivals == "constant":
        return np.arange(n) / load.rate
    rng = np.random.default_rng(seed)
    return np.sort(rng.uniform(0.0, span, size=n))


def _array(spec: Any, name: str, dtype: str | None, where: str) -> np.ndarray:
    if isinstance(spec, dict):
        data = spec.get("data", spec.get("content"))
        shape = spec.get("shape")
        dtype = spec.get("dtype", dtype)
    else:
        data, shape = spec, None
    if data is None:
        raise GptTritonError(f"{where}: input {name!r} has no data/content; give {{\"shape\", \"data\"}}")
    np_dtype = np.dtype(triton_to_np_dtype(dtype) if dtype and dtype.isupper() else (dtype or "float32"))
    arr = np.asarray(data, dtype=np_dtype)
    if shape is not None:
        try:
            arr = arr.reshape(shape)
        except ValueError as exc:
            raise GptTritonError(f"{where}: input {name!r} has {arr.size} values, not shape {shape}") from exc
    return arr


def load_replay(path: str | Path, dtypes: dict[str, str] | None = None) -> tuple[np.ndarray | None, list[dict[str, np.ndarray]]]:
    """Read a replay file -> (arrival offsets in s or None when it has no timestamps, payloads).

    ``dtypes`` (input name -> Triton or numpy dtype) fills in what perf_analyzer JSON leaves out.
    """
    path = Path(path)
    if not path.is_file():
        raise GptTritonError(f"replay file not found: {path}")
    text = path.read_text()
    dtypes = dtypes or {}
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and "data" in whole:  # perf_analyzer input-data JSON
        payloads = [
            {name: _array(spec, name, dtypes.get(name), str(path)) for name, spec in entry.items()}
            for entry in whole["data"]
        ]
        if not payloads:
            raise GptTritonError(f"replay file {path} has an empty \"data\" list")
        return None, payloads
    times: list[float] = []
    payloads = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
            times.append(float(row["t"]))
            inputs = row["inputs"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise GptTritonError(f"{where}: expected {{\"t\": seconds, \"inputs\": {{...}}}} per line ({exc})") from exc
        payloads.append({name: _array(spec, name, dtypes.get(name), where) for name, spec in inputs.items()})
    if not payloads:
        raise GptTritonError(f"replay file {path} has no requests")
    offsets = np.asarray(times) - min(times)
    order = np.argsort(offsets, kind="stable")
    return offsets[order], [payloads[i] for i in order]


def _replay_offsets(offsets: np.ndarray, duration_s: float, min_requests: int) -> np.ndarray:
    """Cycle the trace until it covers ``duration_s`` (and ``min_requests``); indices map mod len."""
    gap = float(np.mean(np.diff(offsets))) if len(offsets) > 1 else 0.01
    period = float(offsets[-1]) + max(gap, 1e-3)
    out: list[np.ndarray] = []
    count, k = 0, 0
    while True:
        part = offsets + k * period
        part = part[part < duration_s] if count >= min_requests else part
        out.append(part)
        count += len(part)
        k += 1
        if (k * period >= duration_s and count >= min_requests) or len(part) == 0:
            break
    return np.concatenate(out)


# ---------------------------------------------------------------- server-side figures


def _stats_json(stats: dict[str, Any]) -> dict[str, int]:
    """Sum Triton's cumulative statistics over the model's versions (JSON int64s arrive as strings)."""
    total: dict[str, int] = {}
    for model in stats.get("model_stats", []):
        total["execution_count"] = total.get("execution_count", 0) + int(model.get("execution_count", 0))
        for key, value in model.get("inference_stats", {}).items():
            total[f"{key}_count"] = total.get(f"{key}_count", 0) + int(value.get("count", 0))
            total[f"{key}_ns"] = total.get(f"{key}_ns", 0) + int(value.get("ns", 0))
    return total


def scrape_metrics(metrics_url: str, model_name: str) -> dict[str, float]:
    """The model's ``nv_inference_*`` series from Triton's Prometheus endpoint, summed over labels."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError as exc:
        raise GptTritonError(f"cannot scrape Triton metrics at {metrics_url}: {exc}; check the metrics URL") from exc
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("nv_inference_"):
            continue
        for sample in family.samples:
            if sample.labels.get("model") == model_name:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def _breakdown(before: dict[str, int], after: dict[str, int]) -> ServerBreakdown:
    def delta(key: str) -> int:
        return after.get(key, 0) - before.get(key, 0)

    success = delta("success_count")
    per = 1e6 * max(success, 1)  # ns per request -> ms
    return ServerBreakdown(
        queue_ms=delta("queue_ns") / per,
        compute_input_ms=delta("compute_input_ns") / per,
        compute_infer_ms=delta("compute_infer_ns") / per,
        compute_output_ms=delta("compute_output_ns") / per,
        success_count=success,
        execution_count=delta("execution_count"),
    )


# ---------------------------------------------------------------- the asyncio driver


def _inputs(payload: dict[str, np.ndarray]) -> list[aioclient.InferInput]:
    out = []
    for name, array in payload.items():
        item = aioclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        item.set_data_from_numpy(np.ascontiguousarray(array))
        out.append(item)
    return out


async def _drive(job: _Job, before_start: Any = None) -> _Raw:
    """Run one generator's share of a window. ``before_start`` (async callable) runs after the
    channel is warm and before the clock starts: snapshots, or the multi-process start barrier."""
    client = aioclient.InferenceServerClient(job.grpc_url)
    raw = _Raw()
    try:
        prepared = [_inputs(p) for p in job.payloads]
        outputs = [aioclient.InferRequestedOutput(n) for n in job.outputs] if job.outputs else None
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
            hard_stop = raw.start + max(10 * job.duration_s, job.duration_s + 60.0)

            async def worker() -> None:
                while True:
                    now = time.monotonic()
                    done = len(raw.latencies_ms) + raw.errors
                    if (now - raw.start >= job.duration_s and done >= job.min_requests) or now >= hard_stop:
                        return
                    await send(None)

            await asyncio.gather(*(worker() for _ in range(job.concurrency)))
        else:
            tasks = []
            indices = job.indices if job.indices is not None else np.arange(job.payload_start, job.payload_start + len(job.offsets))
            for offset, index in zip(job.offsets, indices, strict=True):
                target = raw.start + float(offset)
                delay = target - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(send(target, int(index))))
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=job.drain_timeout_s)
                for task in pending:
                    task.cancel()
                raw.errors += len(pending)
                if pending:
                    raw.first_error = raw.first_error or f"{len(pending)} requests still pending after the drain timeout"
        raw.end = max(raw.end, raw.last_send, raw.start)
        return raw
    finally:
        await client.close()


def _worker_main(job: _Job, ready: Any, go: Any, start_at: Any, results: Any) -> None:
    """Entry point of a spawned generator process: warm up, wait for the common start, run, report."""

    async def barrier() -> float:
        ready.put(os.getpid())
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        return float(start_at.value)

    try:
        raw = asyncio.run(_drive(job, barrier))
        results.put(raw)
    except BaseException as exc:  # report instead of hanging the parent
        results.put(exc)
        ready.put(-1)


def _run_processes(jobs: list[_Job], before_start: Callable[[], None]) -> list[_Raw]:
    ctx = mp.get_context("spawn")  # gRPC is not fork-safe
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    start_at = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_worker_main, args=(job, ready, go, start_at, results), daemon=True) for job in jobs]
    for proc in procs:
        proc.start()

    def get(queue: Any, timeout_s: float) -> Any:
        # Poll so that a child that died (e.g. a script without the __main__ guard) fails fast.
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return queue.get(timeout=0.2)
            except Empty:
                if not all(proc.is_alive() for proc in procs) and queue.empty():
                    raise GptTritonError(
                        "a load generator process exited early; scripts using processes>1 need an "
                        "`if __name__ == \"__main__\":` guard (multiprocessing spawn)") from None
                if time.monotonic() > deadline:
                    raise GptTritonError("load generator processes did not answer in time") from None

    try:
        for _ in procs:
            if get(ready, 120) == -1:
                break
        before_start()  # every worker is connected and probed: take the "before" snapshot now
        start_at.value = time.monotonic() + 0.05  # CLOCK_MONOTONIC is shared by all processes
        go.set()
        raws = []
        for _ in procs:
            item = get(results, max(job.duration_s for job in jobs) * 10 + 120)
            if isinstance(item, BaseException):
                raise GptTritonError(f"load generator process failed: {item}")
            raws.append(item)
        return raws
    finally:
        go.set()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()


# ---------------------------------------------------------------- one window


def _model_dtypes(grpc_url: str, model_name: str) -> dict[str, str]:
    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        meta = client.get_model_metadata(model_name, as_json=True)
    except InferenceServerException as exc:
        raise GptTritonError(f"model {model_name!r} is not available at {grpc_url}: {exc}") from exc
    finally:
        client.close()
    return {item["name"]: item["datatype"] for item in meta.get("inputs", [])}


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
) -> WindowSample:
    """Drive ``model_name`` with ``load`` for ``duration_s`` (and at least ``min_requests``).

    Payloads cycle through ``requests`` (from ``payload_start``) so shapes and batch sizes are the
    reference data's. ``seed`` draws the Poisson schedule; vary it between windows.
    """
    payloads = list(requests)
    offsets: np.ndarray | None = None
    indices: np.ndarray | None = None
    if load.kind == "replay":
        if not load.replay_file:
            raise GptTritonError("load kind=replay needs replay_file: a JSONL trace or perf_analyzer JSON")
        trace, payloads = load_replay(load.replay_file, _model_dtypes(grpc_url, model_name))
        if trace is not None:
            offsets = _replay_offsets(trace, duration_s, min_requests)
            indices = np.arange(len(offsets)) % len(trace)  # entry i of the trace carries payload i
        elif load.rate > 0:
            offsets = schedule(load, duration_s, min_requests, seed)
    elif load.kind == "rate":
        offsets = schedule(load, duration_s, min_requests, seed)
    if not payloads:
        raise GptTritonError("no requests to send: the tuning split is empty")
    processes = max(1, int(processes))
    base = _Job(grpc_url, model_name, payloads, list(outputs) if outputs else None, max(1, load.concurrency),
                offsets, duration_s, min_requests, payload_start)
    if offsets is not None:
        base.indices = indices if indices is not None else (payload_start + np.arange(len(offsets))) % len(payloads)

    stats_client = grpcclient.InferenceServerClient(grpc_url)
    try:
        snap: dict[str, Any] = {}

        def read() -> dict[str, int]:
            return _stats_json(stats_client.get_inference_statistics(model_name, as_json=True))

        def snapshot(tag: str, expect_success: int | None = None) -> None:
            # Triton counts a request slightly after its response reaches the client: poll until the
            # counters settle (start: the probes) or cover every success we saw (end), with a deadline.
            deadline = time.monotonic() + 2.0
            current = read()
            while time.monotonic() < deadline:
                if expect_success is not None:
                    if current.get("success_count", 0) - snap["before"].get("success_count", 0) >= expect_success:
                        break
                    time.sleep(0.005)
                    current = read()
                else:
                    time.sleep(0.005)
                    again = read()
                    if again == current:
                        break
                    current = again
            snap[tag] = current
            if metrics_url:
                snap[tag + "_metrics"] = scrape_metrics(metrics_url, model_name)

        if processes == 1:

            async def before() -> None:
                snapshot("before")

            raws = [asyncio.run(_drive(base, before))]
        else:
            jobs = []
            for k in range(processes):
                share = base.offsets[k::processes] if base.offsets is not None else None
                share_idx = base.indices[k::processes] if base.indices is not None else None
                conc = base.concurrency // processes + (1 if k < base.concurrency % processes else 0)
                if share is None and conc == 0:
                    continue
                jobs.append(_Job(grpc_url, model_name, payloads, base.outputs, conc, share, duration_s,
                                 (min_requests + processes - 1) // processes, payload_start + k * 7919,
                                 share_idx))
            raws = _run_processes(jobs, lambda: snapshot("before"))
        snapshot("after", sum(len(raw.latencies_ms) for raw in raws))
    except InferenceServerException as exc:
        raise GptTritonError(f"Triton at {grpc_url} failed for model {model_name!r}: {exc}") from exc
    finally:
        stats_client.close()
    return _summarise(load, raws, offsets, duration_s, snap)


def _summarise(load: LoadProfile, raws: list[_Raw], offsets: np.ndarray | None, duration_s: float,
               snap: dict[str, Any]) -> WindowSample:
    lat = np.asarray([x for raw in raws for x in raw.latencies_ms], dtype=np.float64)
    lags = np.asarray([x for raw in raws for x in raw.send_lags_ms], dtype=np.float64)
    start = min(raw.start for raw in raws)
    elapsed = max(max(raw.end for raw in raws) - start, 1e-9)
    errors = sum(raw.errors for raw in raws)
    server = _breakdown(snap["before"], snap["after"])
    if "after_metrics" in snap:
        before_m = snap.get("before_metrics", {})
        server.metrics_delta = {k: v - before_m.get(k, 0.0) for k, v in snap["after_metrics"].items()}

    def pct(q: float) -> float:
        return float(np.percentile(lat, q)) if lat.size else 0.0

    result = WindowResult(
        duration_s=elapsed, requests=int(lat.size) + errors, errors=errors, throughput=lat.size / elapsed,
        p50_ms=pct(50), p90_ms=pct(90), p99_ms=pct(99), mean_ms=float(lat.mean()) if lat.size else 0.0,
        server=server,
    )
    if offsets is not None and len(offsets):
        span = max(float(offsets[-1]), duration_s if load.kind == "rate" else 0.0, 1e-9)
        target = len(offsets) / span
        sent = sum(raw.sent for raw in raws)
        last_send = max(raw.last_send for raw in raws) - start
        result.rate_target = load.rate if load.kind == "rate" else target
        result.rate_achieved = sent / max(span, last_send)
        result.send_lag_p99_ms = float(np.percentile(lags, 99)) if lags.size else 0.0
        result.rate_held = bool(
            result.rate_achieved >= RATE_HELD_FRACTION * target
            and result.send_lag_p99_ms <= SEND_LAG_P99_LIMIT_MS
            and not _lag_grew(lags, target)
        )
    first_error = next((raw.first_error for raw in raws if raw.first_error), None)
    return WindowSample(result, lat, lags, first_error)


def _lag_grew(lags_ms: np.ndarray, rate: float) -> bool:
    """The generator fell behind: the last third's median send lag exceeds the first third's by more
    than max(5 ms, two mean inter-arrival gaps). Jitter spikes leave the medians alone; falling behind
    accumulates and shifts them."""
    if lags_ms.size < 30:
        return False
    third = lags_ms.size // 3
    first, last = np.median(lags_ms[:third]), np.median(lags_ms[-third:])
    return bool(last - first > max(5.0, 2000.0 / max(rate, 1e-9)))


# ---------------------------------------------------------------- sharing the machine


@contextmanager
def pinned(server_pid: int | None = None) -> Iterator[dict[str, Any]]:
    """Pin the generator apart from the server when the machine has spare cores; yield how it is shared.

    On 2 cores or fewer there is nothing to spare: both share every core and the dict says so (the
    report shows it, since a shared box inflates tail latency for every candidate alike).
    """
    cores = sorted(os.sched_getaffinity(0))
    info: dict[str, Any] = {"cores": len(cores), "pinned": False}
    if len(cores) <= 2:
        info.update(shared=True, note=f"{len(cores)} cores: load generator and Triton share all cores, no pinning")
        yield info
        return
    n_gen = max(1, len(cores) // 4)
    gen, srv = cores[-n_gen:], cores[:-n_gen]
    server_procs: list[psutil.Process] = []
    if server_pid is not None:
        try:
            parent = psutil.Process(server_pid)
            server_procs = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            server_procs = []
    old = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, gen)
        for proc in server_procs:
            with suppress(psutil.Error):
                proc.cpu_affinity(srv)
        info.update(shared=False, pinned=True, generator_cores=gen,
                    server_cores=srv if server_procs else None,
                    note=f"generator pinned to cores {gen}" + (f", Triton to {srv}" if server_procs else
                                                               " (server not local: not pinned)"))
        yield info
    finally:
        os.sched_setaffinity(0, old)
        for proc in server_procs:
            with suppress(psutil.Error):
                proc.cpu_affinity(cores)
