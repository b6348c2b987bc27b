"""Route records: knobs, routes, the build context and built artifacts (shared by every stage).

A *knob* is one option of a compiler family; a *route* is one value per knob; the *default route* keeps
every knob at its default. The families that enumerate and build them live in :mod:`gpt_triton.routes`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from gpt_triton.core.model_info import ModelInfo

Runtime = Literal["onnxruntime", "openvino", "tensorrt"]


class Knob(BaseModel):
    name: str
    values: list[Any]
    default: Any
    help: str = ""


class Route(BaseModel):
    """One value per knob of one family. Knobs left out take the family's defaults."""

    family: str
    knobs: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> str:
        """Canonical text, like TensorRT's build-route string: ``family: -a=1 -b=x``."""
        parts = " ".join(f"-{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(self.knobs.items()))
        return f"{self.family}: {parts}".rstrip()

    def digest(self) -> str:
        return hashlib.sha256(self.key().encode()).hexdigest()[:12]


class BuildContext(BaseModel):
    """Everything a build may read. Builds never see the held-out reference split."""

    model: ModelInfo
    shapes: dict[str, list[int]]  # concrete request shapes, batch axis included
    max_batch_size: int = 0  # 0: the model is served without Triton batching
    calibration_npz: str | None = None  # tuning split inputs (npz of name -> stacked array), for int8 calibration
    source_model: str | None = None  # the ONNX file to start from (a graph rewrite's output), default model.path
    # The batch an engine is tuned for (TensorRT's profile "opt"), set by the build stage with max_batch_size for
    # families whose files depend on the serving batch (RouteFamily.batch_in_build); None: the request batch.
    opt_batch_size: int | None = None
    # Where the builds of one run share caches (TensorRT's timing cache); None: the build directory's parent.
    cache_dir: str | None = None


class Artifact(BaseModel):
    """A built engine: files in a directory plus how a runtime should open them."""

    family: str
    runtime: Runtime
    route: Route
    directory: str
    files: list[str]  # relative to ``directory``; files[0] is the entry point (e.g. model.onnx)
    runtime_options: dict[str, Any] = Field(default_factory=dict)  # session options the runtime applies at load
    sha256: str = ""  # over the files' bytes, in order
    size_bytes: int = 0
    notes: list[str] = Field(default_factory=list)  # e.g. "fp16: kept Resize in fp32"
    # What a device-specific engine was built with, for deploy/verify to compare with the server; {} for portable
    # artifacts. TensorRT's keys are listed in gpt_triton.routes._tensorrt (ENGINE_KEYS).
    engine: dict[str, Any] = Field(default_factory=dict)
