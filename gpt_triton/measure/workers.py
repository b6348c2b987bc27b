"""Where the load generator runs: spawned worker processes for high rates, and the cores it gets.

One asyncio loop in one Python process tops out at a few thousand requests/s on this kind of machine
(each request costs ~0.2-0.4 ms of client CPU). Beyond that (``benchmarks/loadgen.py``; ``rate_held``
turns false) a window is split across ``processes`` spawned workers: the schedule round-robin, the
closed-loop concurrency evenly. The workers connect and probe first, then start together on one
CLOCK_MONOTONIC instant, and their per-request figures are merged by the caller.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from queue import Empty
from typing import Any

import psutil

from gpt_triton.core.errors import GptTritonError
from gpt_triton.measure.sender import Job, Raw, drive

# A payload offset between workers (a prime, so cycles of any payload count rarely line up): closed-loop
# workers then do not all send the same request at the same moment.
_PAYLOAD_STRIDE = 7919


def split_job(job: Job, processes: int) -> list[Job]:
    """One job per worker: arrival k goes to worker k mod ``processes``; concurrency and
    ``min_requests`` are shared out evenly. A closed-loop worker left with no concurrency is dropped."""
    jobs = []
    for k in range(processes):
        share = job.offsets[k::processes] if job.offsets is not None else None
        share_idx = job.indices[k::processes] if job.indices is not None else None
        conc = job.concurrency // processes + (1 if k < job.concurrency % processes else 0)
        if share is None and conc == 0:
            continue
        jobs.append(replace(job, concurrency=conc, offsets=share, indices=share_idx,
                            min_requests=(job.min_requests + processes - 1) // processes,
                            payload_start=job.payload_start + k * _PAYLOAD_STRIDE))
    return jobs


def _worker_main(job: Job, ready: Any, go: Any, start_at: Any, results: Any) -> None:
    """Entry point of a spawned generator process: warm up, wait for the common start, run, report."""

    async def barrier() -> float:
        ready.put(os.getpid())
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        return float(start_at.value)

    try:
        raw = asyncio.run(drive(job, barrier))
        results.put(raw)
    except BaseException as exc:  # report instead of hanging the parent
        results.put(exc)
        ready.put(-1)


def run_processes(jobs: list[Job], before_start: Callable[[], None]) -> list[Raw]:
    """Run each job in its own spawned process; ``before_start`` runs once all are connected and probed,
    just before the common start. Every process is joined (or terminated) before this returns."""
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
