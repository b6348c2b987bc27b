"""The promotion stage of a tuning run: a chosen candidate, with its provenance, as the next version.

What was measured is what ships: the candidate is promoted with the backend it was served with when it was
measured (``candidate.deploy.backend``) and the config deploy wrote for it then (same serving route, same
backend, same scheduler). On the embedded server, which has only python, that is the python-backend
adapter, as before. When the measured server had native backends (an NGC Triton, remote mode), deploy chose
the native one wherever it applies the artifact's options faithfully (a TensorRT plan always; ORT/OpenVINO
when their options are expressible), so that native backend is promoted: production must then serve with
the image the run was measured on (``spec.server.image``, recorded in provenance; ``gpt-triton verify``
refuses a plan on another TensorRT or GPU). A candidate never deployed in this run (its measurement reused
from the tuning cache by ``--resume``) is promoted with the backend deploy picks on a server without native
backends: the adapter, or an error for a plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.core.routes import Artifact
from gpt_triton.deploy import choose_backend, model_config, plan_engine, verify_plan, write_version_files
from gpt_triton.environment import tensorrt_fingerprint
from gpt_triton.promote.repository import PromotedVersion, promote
from gpt_triton.tensorrt_support import builder_version, serving_tensorrt


def promoted_backend(chosen: Candidate) -> str:
    """The backend ``chosen`` was measured with (see the module docstring for a candidate never deployed)."""
    if chosen.deploy is not None:
        return chosen.deploy.backend
    assert chosen.artifact is not None, f"{chosen.id} has no artifact to promote"
    try:
        return choose_backend(chosen.artifact, frozenset())
    except GptTritonError as exc:
        raise GptTritonError(f"{chosen.id} was not deployed in this run, so the backend it was measured with is "
                             f"unknown ({exc}); re-run without --resume to promote it") from exc


def tensorrt_provenance(report: RunReport, artifact: Artifact) -> dict[str, Any]:
    """What a plan is tied to: the TensorRT that built it, the GPU (model, compute capability, driver) and
    the serving image with the TensorRT it ships, as the run knew them. The build's record of the engine
    (``Artifact.engine``) wins over what this machine says now; the driver comes from nvidia-smi."""
    record = artifact.engine
    engine = plan_engine(artifact) or {}
    facts = tensorrt_fingerprint(record.get("tensorrt_version") or engine.get("tensorrt_version") or builder_version())
    built_on = {"name": record.get("gpu_name"), "compute_capability": record.get("compute_capability")}
    if any(built_on.values()):
        facts["gpu"] = {**(facts["gpu"] or {}), **{k: v for k, v in built_on.items() if v}}
    server = report.spec.server
    return {**facts, "serving_image": server.image,
            "serving_tensorrt": serving_tensorrt(server.image, server.tensorrt_version)}


def provenance(report: RunReport, chosen: Candidate, backend: str) -> dict[str, Any]:
    """The facts a promoted version carries about how it was chosen (environment and file digests are
    added by :func:`gpt_triton.promote.repository.promote`)."""
    facts: dict[str, Any] = {
        "run_id": report.run_id,
        "model_sha256": report.model.sha256,
        "model_path": report.model.path,
        "candidate_id": chosen.id,
        "route": chosen.route_text(),
        "is_baseline": chosen.is_baseline,
        "runtime": chosen.artifact.runtime if chosen.artifact else None,
        "backend": backend,
        "triton_version": report.triton_version,
        "triton_mode": report.triton_mode,
        "latency": [s.model_dump(mode="json", exclude={"windows"}) for s in chosen.latency],
        "gain": report.gain.model_dump(mode="json") if report.gain else None,
        "accuracy_tuning": chosen.accuracy.model_dump(mode="json") if chosen.accuracy else None,
        "accuracy_heldout": report.heldout.model_dump(mode="json") if report.heldout else None,
    }
    if chosen.artifact is not None and chosen.artifact.runtime == "tensorrt":
        facts["tensorrt"] = tensorrt_provenance(report, chosen.artifact)
    return facts


def promote_candidate(
    repository: Path, name: str, report: RunReport, chosen: Candidate, keep_versions: int, signing_key: bytes | None,
) -> PromotedVersion:
    """Write ``chosen`` as the next version of ``name`` in ``repository`` (atomic, signed when a key is
    given), served by the backend it was measured with."""
    artifact = chosen.artifact
    assert artifact is not None, f"{chosen.id} has no artifact to promote"
    backend = promoted_backend(chosen)
    config = model_config(name, report.model, report.shapes, artifact, chosen.serving, backend)
    verify_plan(config, artifact)
    return promote(
        repository, name, config, lambda version_dir: write_version_files(version_dir, artifact, backend),
        provenance(report, chosen, backend), keep_versions=keep_versions, signing_key=signing_key,
    )
