"""Stage 1: inspect an ONNX model (inputs, outputs, dtypes, dynamic axes, fingerprint)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from gpt_triton.core.errors import GptTritonError

Dim = int | str  # int >= 0 is fixed; -1 or a symbolic name is dynamic


class TensorInfo(BaseModel):
    name: str
    dtype: str  # numpy dtype name, e.g. "float32"
    dims: list[Dim]

    @property
    def dynamic_axes(self) -> list[int]:
        return [i for i, d in enumerate(self.dims) if not (isinstance(d, int) and d >= 0)]

    @property
    def triton_dtype(self) -> str:
        return NUMPY_TO_TRITON[self.dtype]


class ModelInfo(BaseModel):
    path: str
    name: str
    sha256: str
    size_bytes: int
    opset: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]

    @property
    def batch_dynamic(self) -> bool:
        """True when axis 0 of every input and output is dynamic, so Triton may batch requests."""
        tensors = self.inputs + self.outputs
        return bool(tensors) and all(t.dims and 0 in t.dynamic_axes for t in tensors)


NUMPY_TO_TRITON = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
    "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16",
    "float32": "FP32", "float64": "FP64", "object": "BYTES",
}


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tensor_info(value_info) -> TensorInfo:  # type: ignore[no-untyped-def]
    import onnx

    tensor_type = value_info.type.tensor_type
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name
    dims: list[Dim] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value > 0:
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or -1)
    return TensorInfo(name=value_info.name, dtype=dtype, dims=dims)


def inspect_model(path: str | Path) -> ModelInfo:
    """Read an ONNX model's interface. Raises GptTritonError for a missing or non-ONNX file."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise GptTritonError(f"model file not found: {path}")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and others for corrupt files
        raise GptTritonError(f"{path} is not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    if not model.graph.input and not model.graph.node:
        raise GptTritonError(f"{path} is not a readable ONNX model (empty graph)")
    _check_external_data(path, model)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [_tensor_info(v) for v in model.graph.input if v.name not in initializers]
    outputs = [_tensor_info(v) for v in model.graph.output]
    if not inputs or not outputs:
        raise GptTritonError(f"{path} has no graph inputs or outputs; export the model with named inputs")
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return ModelInfo(
        path=str(path.resolve()), name=path.stem, sha256=sha256_file(path), size_bytes=path.stat().st_size,
        opset=opset, inputs=inputs, outputs=outputs,
    )


def _check_external_data(path: Path, model) -> None:  # type: ignore[no-untyped-def]
    """Weights stored beside the model (ONNX external data) must all be there: name the first missing file
    now, not as a default route that "did not build or load" after the whole build stage."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
        target = path.parent / location
        if not location or not target.is_file():
            raise GptTritonError(
                f"{path} keeps tensor {tensor.name!r} in external-data file {location!r}, which is missing "
                f"from {path.parent}; copy it beside the model"
            )


def parse_shape_hint(text: str) -> tuple[str, list[int]]:
    """Parse ``NAME=1x3x320x320`` into ``("NAME", [1, 3, 320, 320])``."""
    name, sep, dims = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = [int(d) for d in dims.lower().split("x")]
        if any(d <= 0 for d in shape):
            raise ValueError
    except ValueError:
        raise GptTritonError(f"bad --shape {text!r}: expected NAME=DIMxDIMx..., e.g. images=1x3x224x224") from None
    return name, shape


def resolve_shapes(info: ModelInfo, hints: dict[str, list[int]]) -> dict[str, list[int]]:
    """Concrete per-request input shapes (batch included). Dynamic dims need a hint.

    A dynamic batch axis (axis 0 when the model is batch-dynamic) defaults to 1; every other dynamic
    dim without a hint is an error naming the input and its dims.
    """
    unknown = set(hints) - {t.name for t in info.inputs}
    if unknown:
        names = ", ".join(t.name for t in info.inputs)
        raise GptTritonError(f"--shape names unknown input(s) {sorted(unknown)}; the model's inputs are: {names}")
    shapes: dict[str, list[int]] = {}
    for tensor in info.inputs:
        if tensor.name in hints:
            hint = hints[tensor.name]
            if len(hint) != len(tensor.dims):
                raise GptTritonError(
                    f"--shape {tensor.name} has rank {len(hint)} but the model's input has dims {tensor.dims}"
                )
            for axis, (want, have) in enumerate(zip(tensor.dims, hint, strict=True)):
                if isinstance(want, int) and want >= 0 and want != have:
                    raise GptTritonError(
                        f"--shape {tensor.name} sets axis {axis} to {have} but the model fixes it at {want}"
                    )
            shapes[tensor.name] = list(hint)
            continue
        dynamic = tensor.dynamic_axes
        if info.batch_dynamic:
            dynamic = [a for a in dynamic if a != 0]
        if dynamic:
            raise GptTritonError(
                f"input {tensor.name!r} has dynamic dims {tensor.dims}; give a concrete shape with "
                f"--shape {tensor.name}=" + "x".join(str(d) if isinstance(d, int) and d >= 0 else "N" for d in tensor.dims)
            )
        shapes[tensor.name] = [1 if (isinstance(d, str) or d < 0) else d for d in tensor.dims]
    return shapes


# Triton batching, one rule for the config deploy writes and the engines a build makes for it.
DEFAULT_MAX_BATCH = 8


def request_batch(shapes: dict[str, list[int]]) -> int:
    """The tuned requests' own batch: the first dim of the input shapes (batch axis included)."""
    return max((shape[0] for shape in shapes.values() if shape), default=1)


def serving_max_batch(model: ModelInfo, requested: int | None, batch: int = 1) -> int:
    """The config's max_batch_size for a serving route asking ``requested`` (None: unset) with requests of
    ``batch``: 0 for a model without a dynamic batch axis; unset means DEFAULT_MAX_BATCH raised to the
    requests' batch so they fit."""
    if not model.batch_dynamic:
        return 0
    return max(DEFAULT_MAX_BATCH, batch) if requested is None else int(requested)
