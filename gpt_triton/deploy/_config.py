"""Render a candidate (artifact + serving route) as a Triton model: config.pbtxt and version files.

The config is built as a ``tritonclient.grpc.model_config_pb2.ModelConfig`` and written with protobuf's
text format, so every field name and enum is checked by protobuf rather than by string formatting.

Backend choice: a native backend (NGC image, remote mode) is used only when it exists on the server *and*
it can express every runtime option of the artifact; otherwise the python backend serves the artifact
through our runtime adapter (``adapter/model.py``), which applies the options exactly as the build
measured them. A native backend that silently dropped an option (e.g. ORT spinning, OpenVINO's f32
precision hint) would serve a different route from the one that was tuned.
"""

from __future__ import annotations

import json
import py_compile
import shutil
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, TensorInfo
from gpt_triton.core.records import DeployInfo
from gpt_triton.core.routes import Artifact, Route

ADAPTER_SOURCE = Path(__file__).parent / "adapter" / "model.py"
RUNTIME_FILE = "gpt_triton_runtime.json"
DEFAULT_BATCHED_MAX = 8

# Triton's ONNX Runtime backend: optimization.graph.level -1 = basic, 1 = extended, 2 = disable all;
# absent = ORT_ENABLE_ALL (onnxruntime.cc, ModelState::LoadModel).
_ORT_GRAPH_LEVEL = {"ORT_ENABLE_BASIC": -1, "ORT_ENABLE_EXTENDED": 1, "ORT_DISABLE_ALL": 2, "ORT_ENABLE_ALL": None}
_ORT_PARAMETER = {
    "intra_op_num_threads": "intra_op_thread_count",
    "inter_op_num_threads": "inter_op_thread_count",
    "enable_cpu_mem_arena": "enable_mem_arena",
    "enable_mem_pattern": "enable_mem_pattern",
}
# Session config entries the native backend forwards, and the values that equal ORT's defaults (so
# leaving them out of the native config changes nothing).
_ORT_DEFAULT_ENTRIES = {"session.intra_op.allow_spinning": "1", "session.inter_op.allow_spinning": "1"}
# The OpenVINO backend reads these parameters (ModelState::ParseParameters); INFERENCE_PRECISION_HINT
# is only expressible as HINT_BF16=YES.
_OV_PARAMETERS = {"PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"}
_NATIVE_BACKEND = {"onnxruntime": "onnxruntime", "openvino": "openvino", "tensorrt": "tensorrt"}


def default_max_batch_size(model: ModelInfo) -> int:
    """8 when every input and output has a dynamic batch axis (Triton may batch), else 0."""
    return DEFAULT_BATCHED_MAX if model.batch_dynamic else 0


def _ort_native_parameters(options: dict[str, Any]) -> tuple[dict[str, str], int | None] | None:
    """(parameters, graph level) for the native ONNX Runtime backend, None when it cannot express them."""
    session = dict(options.get("session_options") or {})
    params: dict[str, str] = {}
    level_name = session.pop("graph_optimization_level", "ORT_ENABLE_ALL")
    if level_name not in _ORT_GRAPH_LEVEL:
        return None
    mode = session.pop("execution_mode", None)
    if mode is not None:
        params["execution_mode"] = {"ORT_SEQUENTIAL": "0", "ORT_PARALLEL": "1"}[mode]
    for key, value in session.items():
        if key not in _ORT_PARAMETER:
            return None
        params[_ORT_PARAMETER[key]] = str(int(value))
    for key, value in (options.get("config_entries") or {}).items():
        if _ORT_DEFAULT_ENTRIES.get(key) != str(value):
            return None
    return params, _ORT_GRAPH_LEVEL[level_name]


def _ov_native_parameters(options: dict[str, Any]) -> dict[str, str] | None:
    """Parameters for the native OpenVINO backend, None when it cannot express the options."""
    if options.get("device", "CPU") != "CPU":
        return None
    params: dict[str, str] = {}
    for key, value in (options.get("config") or {}).items():
        if key in _OV_PARAMETERS:
            params[key] = str(value)
        elif key == "INFERENCE_PRECISION_HINT" and str(value) == "bf16":
            params["HINT_BF16"] = "YES"
        else:  # e.g. an f32 precision hint: the backend would fall back to the CPU's default (bf16 here)
            return None
    return params


def choose_backend(artifact: Artifact, native_backends: frozenset[str]) -> str:
    """The backend that serves ``artifact``: native where present and faithful, else "python"."""
    native = _NATIVE_BACKEND[artifact.runtime]
    if artifact.runtime == "tensorrt":
        if native not in native_backends:
            raise GptTritonError(
                "a TensorRT plan needs a Triton with the tensorrt backend and a GPU; "
                "point server.triton_url at one or disable the tensorrt family"
            )
        return native
    if native not in native_backends:
        return "python"
    if artifact.runtime == "onnxruntime" and _ort_native_parameters(artifact.runtime_options) is None:
        return "python"
    if artifact.runtime == "openvino" and _ov_native_parameters(artifact.runtime_options) is None:
        return "python"
    return native


def _data_type(tensor: TensorInfo) -> int:
    return int(mc.DataType.Value(f"TYPE_{tensor.triton_dtype}"))


def _config_dims(tensor: TensorInfo, batched: bool) -> list[int]:
    dims = tensor.dims[1:] if batched else tensor.dims
    return [d if isinstance(d, int) and d >= 0 else -1 for d in dims]


def _serving_knobs(serving: Route, model: ModelInfo, shapes: dict[str, list[int]]) -> dict[str, Any]:
    knobs = dict(serving.knobs)
    max_batch = knobs.get("max_batch_size")
    # The tuned request itself must fit: its batch axis is the first dim of each input shape.
    request_batch = max((shape[0] for shape in shapes.values() if shape), default=1) if model.batch_dynamic else 0
    if max_batch is None:
        knobs["max_batch_size"] = max(default_max_batch_size(model), request_batch)
    else:
        knobs["max_batch_size"] = int(max_batch)
        if 0 < knobs["max_batch_size"] < request_batch:
            raise GptTritonError(
                f"serving route sets max_batch_size={max_batch} but requests carry batch {request_batch}; "
                "raise max_batch_size or send smaller batches (--shape)"
            )
    knobs["instance_count"] = int(knobs.get("instance_count", 1))
    knobs["dynamic_batching"] = bool(knobs.get("dynamic_batching", False))
    knobs["max_queue_delay_us"] = int(knobs.get("max_queue_delay_us", 0))
    knobs["preferred_batch_sizes"] = [int(b) for b in knobs.get("preferred_batch_sizes") or []]
    if knobs["max_batch_size"] > 0 and not model.batch_dynamic:
        raise GptTritonError(
            f"serving route sets max_batch_size={knobs['max_batch_size']} but model {model.name!r} has no "
            "dynamic batch axis on every input and output; use max_batch_size 0"
        )
    if knobs["dynamic_batching"] and knobs["max_batch_size"] <= 0:
        raise GptTritonError("serving route enables dynamic_batching with max_batch_size 0; set max_batch_size > 0")
    too_big = [b for b in knobs["preferred_batch_sizes"] if b > knobs["max_batch_size"] or b <= 0]
    if too_big:
        raise GptTritonError(
            f"serving route has preferred_batch_sizes {too_big} outside 1..max_batch_size={knobs['max_batch_size']}"
        )
    if knobs["instance_count"] < 1:
        raise GptTritonError(f"serving route has instance_count={knobs['instance_count']}; use 1 or more")
    return knobs


def model_config(
    name: str,
    model: ModelInfo,
    shapes: dict[str, list[int]],
    artifact: Artifact,
    serving: Route,
    backend: str,
) -> mc.ModelConfig:
    """The Triton ModelConfig of one candidate. ``shapes`` are per-request shapes (batch included)."""
    knobs = _serving_knobs(serving, model, shapes)
    batched = knobs["max_batch_size"] > 0
    config = mc.ModelConfig(name=name, max_batch_size=knobs["max_batch_size"])
    if backend == "tensorrt":
        config.platform = "tensorrt_plan"
    else:
        config.backend = backend
    if backend != "python":
        config.default_model_filename = artifact.files[0]
    for tensor in model.inputs:
        config.input.add(name=tensor.name, data_type=_data_type(tensor), dims=_config_dims(tensor, batched))
    for tensor in model.outputs:
        config.output.add(name=tensor.name, data_type=_data_type(tensor), dims=_config_dims(tensor, batched))
    config.instance_group.add(
        count=knobs["instance_count"],
        kind=mc.ModelInstanceGroup.KIND_GPU if backend == "tensorrt" else mc.ModelInstanceGroup.KIND_CPU,
    )
    if knobs["dynamic_batching"]:
        config.dynamic_batching.max_queue_delay_microseconds = knobs["max_queue_delay_us"]
        config.dynamic_batching.preferred_batch_size.extend(knobs["preferred_batch_sizes"])
    if backend == "onnxruntime":
        native = _ort_native_parameters(artifact.runtime_options)
        assert native is not None, "choose_backend() picks python for options the native backend cannot express"
        params, level = native
        if level is not None:
            config.optimization.graph.level = level
        for key, value in params.items():
            config.parameters[key].string_value = value
    elif backend == "openvino":
        for key, value in (_ov_native_parameters(artifact.runtime_options) or {}).items():
            config.parameters[key].string_value = value
    _add_warmup(config, model, shapes, batched)
    return config


def _add_warmup(config: mc.ModelConfig, model: ModelInfo, shapes: dict[str, list[int]], batched: bool) -> None:
    """One zero-data request of the tuned shape at load time, so the first measured request is not the
    one that pays for lazy allocations (ORT arenas, OpenVINO shape inference, shm growth)."""
    if not all(t.name in shapes for t in model.inputs):
        return
    warmup = config.model_warmup.add(name="gpt_triton_warmup", count=1)
    batch = 1
    for tensor in model.inputs:
        shape = list(shapes[tensor.name])
        if batched:
            batch = max(1, shape[0])
            shape = shape[1:]
        warmup.inputs[tensor.name].data_type = _data_type(tensor)
        warmup.inputs[tensor.name].dims.extend(shape)
        warmup.inputs[tensor.name].zero_data = True
    warmup.batch_size = batch if batched else 1


def config_text(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)


def parse_config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def write_version_files(version_dir: Path, artifact: Artifact, backend: str) -> None:
    """Copy the artifact's files into ``version_dir``; for the python backend add the adapter and the
    runtime description it reads (per version, so versions of one model may use different runtimes)."""
    version_dir = Path(version_dir)
    source = Path(artifact.directory)
    if not artifact.files:
        raise GptTritonError(f"artifact in {source} lists no files; rebuild the candidate")
    version_dir.mkdir(parents=True, exist_ok=True)
    for rel in artifact.files:
        src = source / rel
        if not src.is_file():
            raise GptTritonError(f"artifact file {src} is missing; rebuild the candidate or clear the tuning cache")
        dst = version_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    if backend == "python":
        shutil.copy2(ADAPTER_SOURCE, version_dir / "model.py")
        # Triton's stub imports model.py and would write __pycache__ into the version directory (it
        # ignores PYTHONDONTWRITEBYTECODE): an unsigned file appearing in a signed version. Ship the
        # bytecode instead, hash-checked so it stays valid whatever the file times after a copy.
        py_compile.compile(
            str(version_dir / "model.py"), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
        )
        description = {"runtime": artifact.runtime, "entry": artifact.files[0], "runtime_options": artifact.runtime_options}
        (version_dir / RUNTIME_FILE).write_text(json.dumps(description, indent=2, sort_keys=True) + "\n")


def write_model(
    repository: Path,
    name: str,
    model: ModelInfo,
    shapes: dict[str, list[int]],
    artifact: Artifact,
    serving: Route,
    backend: str,
    version: int = 1,
) -> DeployInfo:
    """Write ``repository/name/{config.pbtxt, <version>/...}``, replacing any previous model of that name.

    Built in a temporary sibling and renamed into place, so Triton (or a crash) never sees half a model.
    """
    repository = Path(repository)
    repository.mkdir(parents=True, exist_ok=True)
    config = model_config(name, model, shapes, artifact, serving, backend)
    text = config_text(config)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=repository))
    try:
        (staging / name).mkdir()
        write_version_files(staging / name / str(version), artifact, backend)
        (staging / name / "config.pbtxt").write_text(text)
        target = repository / name
        if target.exists():
            shutil.rmtree(target)
        (staging / name).rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return DeployInfo(model_name=name, backend=backend, adapter=backend == "python", config_pbtxt=text)
