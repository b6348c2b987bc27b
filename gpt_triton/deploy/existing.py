"""Read a model that a Triton model repository already serves: its config.pbtxt and the model file to tune.

``gpt-triton tune --model-repository REPO --model NAME`` starts where Model Analyzer starts: from
``REPO/NAME/config.pbtxt`` (parsed with Triton's own ``model_config_pb2`` and protobuf's text format, so a
config Triton would reject is rejected here, with protobuf's line and column) and the version Triton would
serve (the newest under the model's version policy). Two layouts are understood:

* a native ONNX Runtime model, as teams write them by hand: ``platform: "onnxruntime_onnx"`` or
  ``backend: "onnxruntime"``, with ``<version>/model.onnx`` (or ``default_model_filename``);
* a version gpt-triton promoted through its python-backend adapter: ``backend: "python"`` with
  ``<version>/gpt_triton_runtime.json`` naming the runtime, the entry file and the runtime options. An
  ONNX Runtime version is tuned from its own ``model.onnx`` (the file production serves); an OpenVINO IR
  version from the original ONNX its ``provenance.json`` names (``model_path``, checked against
  ``model_sha256``), since the route families start from ONNX.

Anything else (a TensorRT plan, TorchScript, an ensemble, a python model gpt-triton did not write) is a
one-line :class:`GptTritonError` naming what is missing: gpt-triton cannot rebuild what it cannot read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import sha256_file

CONFIG_FILE = "config.pbtxt"
RUNTIME_FILE = "gpt_triton_runtime.json"  # deploy._config.RUNTIME_FILE: what the adapter reads
PROVENANCE_FILE = "provenance.json"  # promote.repository.PROVENANCE_FILE
ONNXRUNTIME_PLATFORM = "onnxruntime_onnx"
# Knobs that change an OpenVINO version's files; the promotion's route text is where they are recorded.
_OPENVINO_FILE_KNOBS = ("static_shape", "quantization")


@dataclass(frozen=True)
class ExistingModel:
    """A served model, read: what to tune (``model_path``) and what production serves (config + options)."""

    repository: Path
    name: str
    version: int  # the version tuned against (Triton's newest under the version policy, or the one asked)
    config: mc.ModelConfig
    layout: str  # "onnxruntime" (native backend) or "gpt-triton" (promoted python-backend adapter)
    model_path: Path  # the ONNX file the route families start from
    runtime: str | None = None  # the adapter's runtime ("onnxruntime" / "openvino"); None: native backend
    runtime_options: dict[str, Any] = field(default_factory=dict)  # what the adapter applies at load
    file_knobs: dict[str, Any] = field(default_factory=dict)  # an OpenVINO version's file knobs (provenance)
    notes: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        backend = f"{self.runtime} via gpt-triton's python adapter" if self.runtime else "onnxruntime backend"
        return f"{self.repository / self.name} version {self.version} ({backend})"

    @property
    def versions(self) -> list[int]:
        return _versions(self.repository / self.name)


def _versions(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0)


def parse_config_file(path: Path) -> mc.ModelConfig:
    """config.pbtxt through Triton's protobuf; unreadable or invalid text is one line naming the file."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise GptTritonError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        raise GptTritonError(f"{path} is not a valid Triton model config: {exc}") from None


def served_version(config: mc.ModelConfig, versions: list[int], model_dir: Path) -> int:
    """The newest version Triton would load under the config's version policy."""
    if not versions:
        raise GptTritonError(f"{model_dir} has no numeric version folder (e.g. 1/model.onnx); nothing is served")
    policy = config.version_policy.WhichOneof("policy_choice")
    if policy == "specific":
        wanted = [v for v in config.version_policy.specific.versions if v in versions]
        if not wanted:
            raise GptTritonError(f"{model_dir / CONFIG_FILE} serves versions "
                                 f"{list(config.version_policy.specific.versions)}, none of which is in {model_dir}")
        return max(wanted)
    return versions[-1]  # latest (Triton's default) and all: the newest


def _backend(config: mc.ModelConfig) -> str:
    if config.backend:
        return config.backend
    return {ONNXRUNTIME_PLATFORM: "onnxruntime"}.get(config.platform, config.platform or "(none)")


def _unsupported(backend: str, model_dir: Path) -> GptTritonError:
    if backend in ("tensorrt", "tensorrt_plan"):
        why = ("a TensorRT plan cannot be rebuilt or re-tuned without the ONNX it was built from; tune that ONNX "
               "with `gpt-triton tune MODEL.onnx --repository REPO --model-name NAME`")
    else:
        why = ("gpt-triton tunes ONNX models served by the onnxruntime backend (platform onnxruntime_onnx) or "
               "versions it promoted itself; tune the model's ONNX export with `gpt-triton tune MODEL.onnx`")
    return GptTritonError(f"{model_dir / CONFIG_FILE} is served by {backend!r}, which gpt-triton cannot re-tune: {why}")


def read_existing(repository: Path, name: str, version: int | None = None) -> ExistingModel:
    """Read ``repository/name`` (see the module docstring); ``version``: tune against this one instead of the
    newest the version policy serves."""
    repository, model_dir = Path(repository), Path(repository) / name
    if not repository.is_dir():
        raise GptTritonError(f"model repository not found: {repository}")
    if not model_dir.is_dir():
        have = sorted(p.name for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))
        raise GptTritonError(f"no model {name!r} in {repository} (it has: {', '.join(have) or 'nothing'})")
    config_path = model_dir / CONFIG_FILE
    if not config_path.is_file():
        raise GptTritonError(f"no {CONFIG_FILE} in {model_dir}; write one (Triton's model configuration) or tune "
                             "the ONNX file directly with `gpt-triton tune MODEL.onnx`")
    config = parse_config_file(config_path)
    versions = _versions(model_dir)
    if version is not None:
        if version not in versions:
            raise GptTritonError(f"version {version} of {name} not found in {model_dir} (versions: {versions or 'none'})")
        chosen = version
    else:
        chosen = served_version(config, versions, model_dir)
    version_dir = model_dir / str(chosen)
    backend = _backend(config)
    if backend == "onnxruntime":
        filename = config.default_model_filename or "model.onnx"
        model_path = version_dir / filename
        if not model_path.is_file():
            raise GptTritonError(f"model file missing: {model_path} (config.pbtxt serves version {chosen} "
                                 f"with default_model_filename {filename!r})")
        return ExistingModel(repository=repository, name=name, version=chosen, config=config, layout="onnxruntime",
                             model_path=model_path)
    if backend == "python" and (version_dir / RUNTIME_FILE).is_file():
        return _read_promoted(repository, name, chosen, config, version_dir)
    if backend == "python":
        raise GptTritonError(f"{version_dir} is a python-backend model without {RUNTIME_FILE}: not one gpt-triton "
                             "promoted, so there is no model file it can re-tune; tune its ONNX export instead")
    raise _unsupported(backend, model_dir)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GptTritonError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise GptTritonError(f"{path} is not a JSON object")
    return data


def _route_knobs(route_text: str, names: tuple[str, ...]) -> dict[str, Any]:
    """Knob values a promotion's route text (``Candidate.route_text``: ``family: -k=v ... | serving: ...``)
    records for ``names``."""
    out: dict[str, Any] = {}
    compiler = route_text.split(" | ", 1)[0]
    for knob in names:
        match = re.search(rf"(?:^|\s)-{re.escape(knob)}=(\S+)", compiler)
        if match:
            raw = match.group(1)
            try:
                out[knob] = json.loads(raw)
            except ValueError:
                out[knob] = raw
    return out


def _read_promoted(repository: Path, name: str, version: int, config: mc.ModelConfig, version_dir: Path) -> ExistingModel:
    description = _json(version_dir / RUNTIME_FILE)
    runtime, entry = description.get("runtime"), description.get("entry")
    options = description.get("runtime_options") or {}
    if not isinstance(runtime, str) or not isinstance(entry, str) or not isinstance(options, dict):
        raise GptTritonError(f"{version_dir / RUNTIME_FILE} lacks runtime, entry or runtime_options")
    provenance = _json(version_dir / PROVENANCE_FILE) if (version_dir / PROVENANCE_FILE).is_file() else {}
    common = {"repository": repository, "name": name, "version": version, "config": config, "layout": "gpt-triton",
              "runtime": runtime, "runtime_options": options}
    if runtime == "onnxruntime":
        model_path = version_dir / entry
        if not model_path.is_file():
            raise GptTritonError(f"model file missing: {model_path} (named by {version_dir / RUNTIME_FILE})")
        return ExistingModel(model_path=model_path, **common)
    if runtime != "openvino":
        raise _unsupported(runtime, repository / name)
    # An OpenVINO IR cannot be the families' source: go back to the ONNX the promotion was tuned from.
    original = provenance.get("model_path")
    if not original or not Path(original).is_file():
        raise GptTritonError(
            f"version {version} of {name} is an OpenVINO IR; re-tuning needs the ONNX it was built from, which its "
            f"provenance names as {original or '(nothing)'} and is not there; put that file back or tune it directly")
    if provenance.get("model_sha256") and sha256_file(Path(original)) != provenance["model_sha256"]:
        raise GptTritonError(f"{original} changed since version {version} of {name} was built from it (sha256 differs "
                             "from its provenance); tune the new file directly with `gpt-triton tune`")
    file_knobs = _route_knobs(str(provenance.get("route", "")), _OPENVINO_FILE_KNOBS)
    return ExistingModel(model_path=Path(original), file_knobs=file_knobs,
                         notes=(f"tuned from {original}, the ONNX version {version} was built from",), **common)
