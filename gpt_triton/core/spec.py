"""The tuning spec: a YAML file validated by pydantic. Every field has a default, so no spec is needed.

Each stage owns one section; keep sections small and give every field a comment-worthy name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KnobSpec(_Strict):
    """A knob either fixed (``value``) or swept (``values``)."""

    value: Any = None
    values: list[Any] | None = None


class FamilySpec(_Strict):
    enabled: bool = True
    # knob name -> fixed value, list of values, or {value: ...} / {values: [...]}
    knobs: dict[str, Any] = Field(default_factory=dict)

    def knob_specs(self) -> dict[str, KnobSpec]:
        out: dict[str, KnobSpec] = {}
        for name, raw in self.knobs.items():
            if isinstance(raw, dict):
                out[name] = KnobSpec.model_validate(raw)
            elif isinstance(raw, list):
                out[name] = KnobSpec(values=raw)
            else:
                out[name] = KnobSpec(value=raw)
        return out


class SearchSpec(_Strict):
    mode: Literal["fast", "full", "mixed", "random"] = "mixed"
    random_routes: int = 16  # for mode=random
    seed: int = 0
    max_builds: int = 64
    build_timeout_s: float = 300.0
    build_memory_mb: int = 8192


class MeasureSpec(_Strict):
    loads: list[LoadProfile] = Field(default_factory=lambda: [LoadProfile(kind="concurrency", concurrency=1)])
    warmup_s: float = 1.0
    window_s: float = 2.0
    window_min_requests: int = 50
    min_windows: int = 3
    max_windows: int = 10
    stability: float = 0.10  # last 3 windows within this fraction (perf_analyzer's rule)
    racing: bool = True
    remeasure_windows: int = 8  # per candidate in the separate, interleaved A/B(/C) run
    confidence: float = 0.95
    bootstrap_resamples: int = 2000
    client_processes: int = 1  # load-generator processes, for open-loop rates one core cannot hold


class ObjectiveSpec(_Strict):
    metric: Literal["p99", "p90", "p50", "mean", "throughput"] = "p99"
    load_index: int = 0  # which of measure.loads the objective is read at
    slo_p99_ms: float | None = None  # for metric=throughput: only candidates with p99 under it


class ToleranceSpec(_Strict):
    max_abs: float | None = None
    max_rel: float | None = None
    rel_epsilon: float = 1e-6
    mean_abs: float | None = None
    rmse: float | None = None
    cosine_min: float | None = None
    topk: int | None = None  # top-k agreement: the reference's top-1 must be in the candidate's top-k
    iou_threshold: float | None = None  # binarise maps at this value, then compare IoU
    iou_min: float | None = None


class AccuracySpec(_Strict):
    default: ToleranceSpec = Field(default_factory=lambda: ToleranceSpec(max_abs=1e-3, max_rel=1e-2))
    outputs: dict[str, ToleranceSpec] = Field(default_factory=dict)
    task_metric: str | None = None  # "module:function"
    heldout_fraction: float = 0.3
    split_seed: int = 0
    synthetic_requests: int = 64  # when no --reference is given
    confidence: float = 0.95
    max_exceedance_rate: float = 0.0  # per-request exceedance rate allowed on the tuning split
    min_margin: float = 0.0  # relative margin to the tolerance a candidate needs to be eligible
    max_exceedance_bound: float | None = None  # eligible only when the Clopper-Pearson bound is below


class PromotionSpec(_Strict):
    repository: str = "model_repository"
    model_name: str | None = None  # default: the ONNX file's stem
    keep_versions: int = 3
    require_gain: bool = True  # promote the baseline unless the re-measured interval excludes 1.0


# The NGC Triton image production serves with: the chart's sidecar (gpt_triton.k8s.render.TRITON_IMAGE; a
# test keeps the two equal). core imports no stage, so the default is written here too.
DEFAULT_TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
_TENSORRT_VERSION = re.compile(r"^\d+\.\d+\.\d+(\.\d+)?$")


class ServerSpec(_Strict):
    triton_url: str | None = None  # HOST:PORT (gRPC) of an existing server; None starts an embedded one
    # Backends the server has besides python (the NGC image has onnxruntime, openvino, tensorrt).
    native_backends: list[str] | None = None  # None: embedded -> [], remote -> probe
    # The Triton image that serves the promoted model. A TensorRT plan runs only on the TensorRT that built
    # it: the tensorrt family is planned only when the builder's TensorRT is the one this image ships
    # (gpt_triton/data/tensorrt_support.json says which, for the images it has a source for).
    image: str = DEFAULT_TRITON_IMAGE
    # The TensorRT version ``image`` ships (major.minor.patch[.build]), for an image the table does not
    # list: read it in the image (dpkg -l | grep libnvinfer). None: from the table, or unknown.
    tensorrt_version: str | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("give the serving Triton image, e.g. nvcr.io/nvidia/tritonserver:24.10-py3")
        return value.strip()

    @field_validator("tensorrt_version")
    @classmethod
    def _tensorrt_version(cls, value: str | None) -> str | None:
        if value is not None and not _TENSORRT_VERSION.match(value.strip()):
            raise ValueError(f"{value!r} is not a TensorRT version: give major.minor.patch[.build], e.g. 10.5.0.18")
        return value.strip() if value is not None else None


class TuneSpec(_Strict):
    search: SearchSpec = Field(default_factory=SearchSpec)
    families: dict[str, FamilySpec] = Field(default_factory=dict)
    measure: MeasureSpec = Field(default_factory=MeasureSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    accuracy: AccuracySpec = Field(default_factory=AccuracySpec)
    promotion: PromotionSpec = Field(default_factory=PromotionSpec)
    server: ServerSpec = Field(default_factory=ServerSpec)
    time_budget_s: float | None = None

    @field_validator("time_budget_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h`` -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise GptTritonError(f"bad duration {text!r}: use a number with s, m or h, e.g. 10m")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
    return float(match.group(1)) * scale


def load_spec(path: str | Path | None) -> TuneSpec:
    """Read and validate a YAML spec; None gives the defaults. Errors are one line naming the field."""
    if path is None:
        return TuneSpec()
    path = Path(path)
    if not path.is_file():
        raise GptTritonError(f"spec file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise GptTritonError(f"spec {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise GptTritonError(f"spec {path} must be a YAML mapping at the top level")
    try:
        return TuneSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GptTritonError(f"spec {path}: {where}: {first['msg']}") from exc
