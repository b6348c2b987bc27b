"""Check a production repository: every version's signatures, and whether its engine is valid here.

A TensorRT plan is checked against the serving environment, not only the machine: the TensorRT that serves
here (``serving_tensorrt``: given by the caller from the serving image or a pinned version, else this
machine's ``tensorrt``) and this machine's GPU. A plan on another TensorRT, GPU model or compute
capability is ``incompatible``: it cannot (or may not) load, and ``gpt-triton verify`` refuses it whatever
``--allow-drift`` says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.environment import (
    EnvVerdict,
    compare_environment,
    environment_fingerprint,
    plan_verdict,
    tensorrt_fingerprint,
)
from gpt_triton.promote.repository import CONFIG_FILE, PROMOTED_CONFIG_FILE, PROVENANCE_FILE, list_versions
from gpt_triton.promote.signing import SIGNATURES_FILE, verify_version_dir
from gpt_triton.tensorrt_support import builder_version

RUNTIME_FILE = "gpt_triton_runtime.json"  # written by the deploy module next to the adapter


@dataclass
class VersionCheck:
    model: str
    version: int
    path: Path
    runtime: str
    verdict: EnvVerdict
    signature_error: str | None = None  # None: every file matches its signature
    notes: list[str] = field(default_factory=list)

    @property
    def signed_ok(self) -> bool:
        return self.signature_error is None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _runtime_of(version_dir: Path, provenance: dict[str, Any]) -> str:
    """The engine's runtime: from provenance, else from the adapter's runtime file; "unknown" otherwise."""
    artifact = provenance.get("artifact")
    candidates = [
        provenance.get("runtime"),
        artifact.get("runtime") if isinstance(artifact, dict) else None,
        _read_json(version_dir / RUNTIME_FILE).get("runtime"),
    ]
    for value in candidates:
        if isinstance(value, str) and value:
            return value
    return "unknown"


def _models(repository: Path, model: str | None) -> list[Path]:
    if not repository.is_dir():
        raise GptTritonError(f"repository {repository} does not exist: pass the production model repository")
    if model is not None:
        model_dir = repository / model
        if not model_dir.is_dir():
            raise GptTritonError(f"model {model} not found in {repository}")
        return [model_dir]
    return sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))


def _plan_record(provenance: dict[str, Any]) -> dict[str, Any]:
    """The plan's TensorRT and GPU: its ``tensorrt`` provenance, else what the environment recorded."""
    recorded = provenance.get("tensorrt")
    if isinstance(recorded, dict):
        return recorded
    environment = provenance.get("environment") or {}
    gpus = (environment.get("device") or {}).get("gpus") or []
    return tensorrt_fingerprint((environment.get("runtime_versions") or {}).get("tensorrt"), gpus)


def check_version(model: str, version_dir: Path, key: bytes, current: dict[str, Any],
                  serving_tensorrt: str | None = None) -> VersionCheck:
    """``serving_tensorrt``: the TensorRT that serves here, for a plan (default: this machine's)."""
    provenance = _read_json(version_dir / PROVENANCE_FILE)
    runtime = _runtime_of(version_dir, provenance)
    if runtime == "tensorrt":
        here = serving_tensorrt or (current.get("runtime_versions") or {}).get("tensorrt")
        verdict = plan_verdict(_plan_record(provenance), here, (current.get("device") or {}).get("gpus") or [])
    else:
        verdict = compare_environment(provenance.get("environment") or {}, current, runtime)
    check = VersionCheck(model=model, version=int(version_dir.name), path=version_dir, runtime=runtime, verdict=verdict)
    try:
        verified = verify_version_dir(version_dir, key)
    except GptTritonError as exc:
        check.signature_error = str(exc)
    else:
        if not verified.bound:
            check.notes.append(
                "unbound: signed by an older gpt-triton without its model name and version, so a copy of it "
                "under another number would verify too; re-promote to bind it"
            )
    return check


def unsigned_versions(repository: Path, model: str | None) -> tuple[list[str], int]:
    """(``model/version`` of every version without signatures.json, number of versions): what verify
    says when no key is set."""
    unsigned, total = [], 0
    for model_dir in _models(Path(repository), model):
        for version in list_versions(model_dir):
            total += 1
            if not (model_dir / str(version) / SIGNATURES_FILE).exists():
                unsigned.append(f"{model_dir.name}/{version}")
    return unsigned, total


def _operational(text: str) -> Any:
    """The config without its version_policy, which may legitimately change (a canary pins versions)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    config.ClearField("version_policy")
    return config


def check_model_config(newest: VersionCheck) -> None:
    """Compare the model-level config.pbtxt with the signed copy promoted with the newest version."""
    model_dir = newest.path.parent
    promoted = newest.path / PROMOTED_CONFIG_FILE
    if not newest.signed_ok or not promoted.is_file():
        return
    live = model_dir / CONFIG_FILE
    try:
        same = _operational(live.read_text()) == _operational(promoted.read_text())
    except (OSError, ValueError) as exc:  # text_format.ParseError is a ValueError
        newest.signature_error = f"tampered file {live}: unreadable ({exc})"
        return
    if not same:
        newest.signature_error = (
            f"tampered file {live}: differs from the config signed with version {newest.version} "
            f"(beyond version_policy); restore {promoted.name} from that version or re-promote"
        )


def verify_repository(repository: Path, model: str | None, key: bytes,
                      serving_tensorrt: str | None = None) -> list[VersionCheck]:
    """One check per version of every model (or of ``model``) in ``repository``; raises when none exist.

    ``serving_tensorrt``: the TensorRT of the Triton that serves this repository (default: the
    ``tensorrt`` of this machine), against which TensorRT plans are checked."""
    repository = Path(repository)
    current = environment_fingerprint()
    if serving_tensorrt is None:
        serving_tensorrt = builder_version()
    checks: list[VersionCheck] = []
    for model_dir in _models(repository, model):
        model_checks = [check_version(model_dir.name, model_dir / str(v), key, current, serving_tensorrt)
                        for v in list_versions(model_dir)]
        if model_checks:
            check_model_config(model_checks[-1])
        checks += model_checks
    if not checks:
        where = f"model {model} in {repository}" if model else str(repository)
        raise GptTritonError(f"no model versions found in {where}: nothing to verify")
    return checks
