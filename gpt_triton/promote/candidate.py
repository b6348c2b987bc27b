"""The promotion stage of a tuning run: a chosen candidate, with its provenance, as the next version.

Production serves with the backend production would use (``server.native_backends``, e.g. the NGC
image's onnxruntime/openvino); the embedded server has only python, so a run tuned there promotes the
python-backend adapter unless native backends are named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.deploy import choose_backend, model_config, write_version_files
from gpt_triton.promote.repository import PromotedVersion, promote


def provenance(report: RunReport, chosen: Candidate, backend: str) -> dict[str, Any]:
    """The facts a promoted version carries about how it was chosen (environment and file digests are
    added by :func:`gpt_triton.promote.repository.promote`)."""
    return {
        "run_id": report.run_id,
        "model_sha256": report.model.sha256,
        "model_path": report.model.path,
        "candidate_id": chosen.id,
        "route": chosen.route_text(),
        "is_baseline": chosen.is_baseline,
        "backend": backend,
        "triton_version": report.triton_version,
        "latency": [s.model_dump(mode="json", exclude={"windows"}) for s in chosen.latency],
        "gain": report.gain.model_dump(mode="json") if report.gain else None,
        "accuracy_tuning": chosen.accuracy.model_dump(mode="json") if chosen.accuracy else None,
        "accuracy_heldout": report.heldout.model_dump(mode="json") if report.heldout else None,
    }


def promote_candidate(
    repository: Path, name: str, report: RunReport, chosen: Candidate, native_backends: frozenset[str],
    keep_versions: int, signing_key: bytes | None,
) -> PromotedVersion:
    """Write ``chosen`` as the next version of ``name`` in ``repository`` (atomic, signed when a key is given)."""
    artifact = chosen.artifact
    assert artifact is not None, f"{chosen.id} has no artifact to promote"
    backend = choose_backend(artifact, native_backends)
    config = model_config(name, report.model, report.shapes, artifact, chosen.serving, backend)
    return promote(
        repository, name, config, lambda version_dir: write_version_files(version_dir, artifact, backend),
        provenance(report, chosen, backend), keep_versions=keep_versions, signing_key=signing_key,
    )
