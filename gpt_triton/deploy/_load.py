"""The deploy stage: write each built candidate as a Triton model in the staging repository and load it.

A candidate this server cannot serve as asked (:class:`~gpt_triton.deploy.UnservableError`: a TensorRT plan
on a Triton without the tensorrt backend, a GPU serving knob its backend cannot apply, a plan that disagrees
with its config) and a load failure disqualify that candidate (``failed``, with the reason), not the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.outcomes import DeployOutcome
from gpt_triton.core.records import Candidate, DeployInfo
from gpt_triton.deploy._config import UnservableError, choose_backend, write_model
from gpt_triton.server import ModelLoadError, TritonServer


def deploy_candidates(
    server: TritonServer, staging: Path, candidates: Sequence[Candidate], model: ModelInfo,
    shapes: dict[str, list[int]], suffix: str = "", advance: Callable[[str], None] | None = None,
) -> Iterator[DeployOutcome]:
    """Load every candidate that has an artifact and has not crashed or failed, as ``c_<id><suffix>``.

    Every model is written first, then up to ``server.parallel_loads`` load requests are in flight at once:
    much of a load is waiting (a python stub starting, a session or engine being created), and Triton loads
    on threads of its own. Eight conv_attention candidates loaded in 1.64 s so, 2.97 s one at a time
    (benchmarks/deploy_loads.py). Outcomes come in the candidates' order, each as its load ends. A candidate
    loaded again (a measured one, on a fresh server for the re-measurement) keeps its status; a built one
    becomes ``deployed``.
    """
    written: list[tuple[Candidate, str, str, DeployInfo] | DeployOutcome] = []
    for candidate in candidates:
        if candidate.artifact is None or candidate.status in ("crashed", "failed"):
            continue
        name = f"c_{candidate.id}{suffix}"
        try:
            backend = choose_backend(candidate.artifact, server.native_backends)
            info = write_model(staging, name, model, shapes, candidate.artifact, candidate.serving, backend)
        except UnservableError as exc:
            written.append(DeployOutcome(candidate_id=candidate.id, status="failed", reason=f"not servable here: {exc}"))
            continue
        written.append((candidate, name, backend, info))
    loads = [entry for entry in written if not isinstance(entry, DeployOutcome)]
    pool = ThreadPoolExecutor(max_workers=max(1, min(server.parallel_loads, len(loads))), thread_name_prefix="triton-load")
    unreported = {entry[1]: pool.submit(server.load, staging / entry[1]) for entry in loads}
    try:
        for entry in written:
            if isinstance(entry, DeployOutcome):
                yield entry
                continue
            candidate, name, backend, info = entry
            try:
                unreported[name].result()  # an interrupt here leaves it unreported, for _drop_unreported
                failure = None
            except ModelLoadError as exc:
                failure = exc
            del unreported[name]
            if failure is not None:
                yield DeployOutcome(candidate_id=candidate.id, status="failed", reason=f"load failed: {failure}")
                continue
            if advance is not None:
                advance(f"{name} loaded ({backend} backend)")
            status = "deployed" if candidate.status == "built" else candidate.status
            yield DeployOutcome(candidate_id=candidate.id, status=status, reason=candidate.reason, deploy=info)
    finally:
        _drop_unreported(server, unreported)
        pool.shutdown(wait=False, cancel_futures=True)


def _drop_unreported(server: TritonServer, unreported: dict[str, Future[None]]) -> None:
    """After an interrupt (or an abandoned generator), the loads whose outcome nobody received: those not
    sent are cancelled. On the user's server one already sent is waited for and unloaded, as nobody
    will unload it otherwise; this run's own server is stopped next, so nothing waits for it."""
    for name, load in unreported.items():
        if load.cancel() or server.mode != "remote":
            continue
        with contextlib.suppress(Exception):
            load.result()
            server.unload(name)


def unload_candidates(server: TritonServer, candidates: Sequence[Candidate]) -> None:
    """Unload what :func:`deploy_candidates` loaded, all at once; a model already gone is no error."""
    names = [c.deploy.model_name for c in candidates if c.deploy is not None]
    try:
        server.unload_many(names)
    except Exception:  # unloading is tidying up; the server may be gone, or one model already unloaded
        for name in names:
            with contextlib.suppress(Exception):
                server.unload(name)
