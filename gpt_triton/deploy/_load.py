"""The deploy stage: write each built candidate as a Triton model in the staging repository and load it.

A candidate this server cannot serve as asked (:class:`~gpt_triton.deploy.UnservableError`: a TensorRT plan
on a Triton without the tensorrt backend, a GPU serving knob its backend cannot apply, a plan that disagrees
with its config) and a load failure disqualify that candidate (``failed``, with the reason), not the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.outcomes import DeployOutcome
from gpt_triton.core.records import Candidate
from gpt_triton.deploy._config import UnservableError, choose_backend, write_model
from gpt_triton.server import ModelLoadError, TritonServer


def deploy_candidates(
    server: TritonServer, staging: Path, candidates: Sequence[Candidate], model: ModelInfo,
    shapes: dict[str, list[int]], suffix: str = "", advance: Callable[[str], None] | None = None,
) -> Iterator[DeployOutcome]:
    """Load every candidate that has an artifact and has not crashed or failed, as ``c_<id><suffix>``.

    A candidate loaded again (a measured one, on a fresh server for the re-measurement) keeps its
    status; a built one becomes ``deployed``.
    """
    for candidate in candidates:
        if candidate.artifact is None or candidate.status in ("crashed", "failed"):
            continue
        name = f"c_{candidate.id}{suffix}"
        try:
            backend = choose_backend(candidate.artifact, server.native_backends)
            info = write_model(staging, name, model, shapes, candidate.artifact, candidate.serving, backend)
        except UnservableError as exc:
            yield DeployOutcome(candidate_id=candidate.id, status="failed", reason=f"not servable here: {exc}")
            continue
        try:
            server.load(staging / name)
        except ModelLoadError as exc:
            yield DeployOutcome(candidate_id=candidate.id, status="failed", reason=f"load failed: {exc}")
            continue
        if advance is not None:
            advance(f"{name} loaded ({backend} backend)")
        status = "deployed" if candidate.status == "built" else candidate.status
        yield DeployOutcome(candidate_id=candidate.id, status=status, reason=candidate.reason, deploy=info)


def unload_candidates(server: TritonServer, candidates: Sequence[Candidate]) -> None:
    """Unload what :func:`deploy_candidates` loaded, all at once; a model already gone is no error."""
    names = [c.deploy.model_name for c in candidates if c.deploy is not None]
    try:
        server.unload_many(names)
    except Exception:  # unloading is tidying up; the server may be gone, or one model already unloaded
        for name in names:
            with contextlib.suppress(Exception):
                server.unload(name)
