"""Render a candidate (artifact + serving route) as a Triton model: config.pbtxt and version files.

The config is built as a ``tritonclient.grpc.model_config_pb2.ModelConfig`` and written with protobuf's
text format, so every field name and enum is checked by protobuf rather than by string formatting.

Backend choice: a native backend (NGC image, remote mode) is used only when it exists on the server *and*
it can express every runtime option of the artifact; otherwise the python backend serves the artifact
through our runtime adapter (``adapter/model.py``), which applies the options exactly as the build
measured them. A native backend that silently dropped an option (e.g. ORT spinning, OpenVINO's f32
precision hint) would serve a different route from the one that was tuned. What each native backend can
express is the runtime's own knowledge: ``gpt_triton.runtimes`` ``Runtime.native_config``.

Nothing is left for Triton to auto-complete that changes what is served. Triton's onnxruntime, openvino
and tensorrt backends add ``dynamic_batching {}`` to a config with max_batch_size > 1 and no scheduler
(their ``AutoCompleteConfig``; for a plan, the engine's profile max batch counts), so the scheduler is
always written: a route asking ``dynamic_batching: false`` on such a backend is written as the
``dynamic_batching {}`` Triton would serve anyway, and ``DeployInfo.notes`` says so (the python backend
adds nothing: there it is served unbatched, as asked). GPU serving knobs (``gpus``, ``cuda_graphs``) that
the chosen backend cannot apply make the candidate unservable (:class:`UnservableError`), never ignored.
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

from gpt_triton import runtimes
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import (
    DEFAULT_MAX_BATCH,
    ModelInfo,
    TensorInfo,
    request_batch,
    serving_max_batch,
)
from gpt_triton.core.records import DeployInfo
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.deploy._plan import check_plan_config, plan_engine, plan_path
from gpt_triton.runtimes import NativeBackendConfig, get_runtime

ADAPTER_SOURCE = Path(__file__).parent / "adapter" / "model.py"
RUNTIME_FILE = "gpt_triton_runtime.json"
# The adapter imports the runtime layer from a copy beside it (production Triton has no gpt_triton).
RUNTIMES_SOURCE = Path(runtimes.__file__).parent
RUNTIMES_DIR = "gpt_triton_runtimes"
# Native backends whose auto-complete adds `dynamic_batching {}` when max_batch_size > 1 and no scheduler
# is configured (onnxruntime_backend, openvino_backend, tensorrt_backend: AutoCompleteConfig).
AUTOCOMPLETES_DYNAMIC_BATCHING = frozenset({"onnxruntime", "openvino", "tensorrt"})


class UnservableError(GptTritonError):
    """This candidate cannot be served as asked on this server (a backend or device it lacks, a serving
    knob its backend cannot apply, a plan that disagrees with its config): the candidate fails, the run
    goes on."""


def default_max_batch_size(model: ModelInfo) -> int:
    """8 when every input and output has a dynamic batch axis (Triton may batch), else 0."""
    return DEFAULT_MAX_BATCH if model.batch_dynamic else 0


def _native(artifact: Artifact) -> NativeBackendConfig | None:
    """How the runtime's native Triton backend would apply the artifact's options (None: it cannot)."""
    return get_runtime(artifact.runtime).native_config(artifact.runtime_options)


def unservable_runtimes(native_backends: frozenset[str]) -> dict[str, str]:
    """Runtimes this server cannot serve at all, with the reason: those without a python-backend path
    (a TensorRT plan) whose native backend the server lacks."""
    out = {}
    for name, runtime in runtimes.RUNTIMES.items():
        if not runtime.python_backend and runtime.backend not in native_backends:
            have = ", ".join(sorted(native_backends)) or "only python"
            out[name] = (f"the Triton server has no {runtime.backend} backend (it has {have}); point "
                         "server.triton_url at an NGC Triton on a GPU node")
    return out


def choose_backend(artifact: Artifact, native_backends: frozenset[str]) -> str:
    """The backend that serves ``artifact``: native where present and faithful, else "python".

    Raises :class:`UnservableError` for an artifact only its native backend runs when the server lacks it.
    """
    runtime = get_runtime(artifact.runtime)
    native = _native(artifact)
    if not runtime.python_backend:  # e.g. a TensorRT plan: only its native backend (and a GPU) runs it
        if native is None or native.backend not in native_backends:
            gpu = " and a GPU" if native is None or native.gpu else ""
            raise UnservableError(
                f"a {artifact.runtime} artifact needs a Triton with the {runtime.backend} backend{gpu}; "
                f"point server.triton_url at one or disable the {artifact.family} family"
            )
        return native.backend
    if native is None or native.backend not in native_backends:
        return "python"
    return native.backend


def _data_type(tensor: TensorInfo) -> int:
    return int(mc.DataType.Value(f"TYPE_{tensor.triton_dtype}"))


def _config_dims(tensor: TensorInfo, batched: bool) -> list[int]:
    dims = tensor.dims[1:] if batched else tensor.dims
    return [d if isinstance(d, int) and d >= 0 else -1 for d in dims]


def _serving_knobs(serving: Route, model: ModelInfo, shapes: dict[str, list[int]]) -> dict[str, Any]:
    knobs = dict(serving.knobs)
    max_batch = knobs.get("max_batch_size")
    # The tuned request itself must fit: its batch axis is the first dim of each input shape.
    batch = request_batch(shapes) if model.batch_dynamic else 0
    knobs["max_batch_size"] = serving_max_batch(model, None, batch) if max_batch is None else int(max_batch)
    if max_batch is not None and 0 < knobs["max_batch_size"] < batch:
        raise GptTritonError(
            f"serving route sets max_batch_size={max_batch} but requests carry batch {batch}; "
            "raise max_batch_size or send smaller batches (--shape)"
        )
    knobs["instance_count"] = int(knobs.get("instance_count", 1))
    knobs["dynamic_batching"] = bool(knobs.get("dynamic_batching", False))
    knobs["max_queue_delay_us"] = int(knobs.get("max_queue_delay_us", 0))
    knobs["preferred_batch_sizes"] = [int(b) for b in knobs.get("preferred_batch_sizes") or []]
    knobs["cuda_graphs"] = bool(knobs.get("cuda_graphs", False))
    gpus = knobs.get("gpus")
    knobs["gpus"] = None if gpus is None else [int(g) for g in gpus]
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
    native = None
    if backend != "python":
        native = _native(artifact)
        if native is None or native.backend != backend:
            raise GptTritonError(
                f"the {backend} backend cannot serve this {artifact.runtime} artifact with its runtime options "
                f"{artifact.runtime_options}; use choose_backend() (it picks the python adapter then)"
            )
    config = mc.ModelConfig(name=name, max_batch_size=knobs["max_batch_size"])
    if native is not None and native.platform:
        config.platform = native.platform
    else:
        config.backend = backend
    if backend != "python":
        config.default_model_filename = artifact.files[0]
    for tensor in model.inputs:
        config.input.add(name=tensor.name, data_type=_data_type(tensor), dims=_config_dims(tensor, batched))
    for tensor in model.outputs:
        config.output.add(name=tensor.name, data_type=_data_type(tensor), dims=_config_dims(tensor, batched))
    _add_instances(config, knobs, native, backend)
    _add_scheduler(config, knobs, backend)
    if native is not None:
        if native.graph_level is not None:
            config.optimization.graph.level = native.graph_level
        for key, value in native.parameters.items():
            config.parameters[key].string_value = value
        if native.gpu_accelerators and not native.gpu:
            raise GptTritonError(f"the {backend} backend applies GPU execution accelerators only on GPU instances")
        for name, parameters in native.gpu_accelerators.items():
            accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name=name)
            for key, value in parameters.items():
                accelerator.parameters[key] = value
    _add_warmup(config, model, shapes, batched)
    return config


def _add_instances(config: mc.ModelConfig, knobs: dict[str, Any], native: NativeBackendConfig | None,
                   backend: str) -> None:
    """One instance group: KIND_GPU where the native backend runs the artifact on a GPU (on the chosen
    GPUs when the route names them), else KIND_CPU; CUDA graphs only where the tensorrt backend runs."""
    gpu = native is not None and native.gpu
    group = config.instance_group.add(
        count=knobs["instance_count"], kind=mc.ModelInstanceGroup.KIND_GPU if gpu else mc.ModelInstanceGroup.KIND_CPU)
    if knobs["gpus"] is not None:
        if not gpu:
            raise UnservableError(
                f"serving route places instances on GPUs {knobs['gpus']} but the {backend} backend serves this "
                "artifact on CPU instances; leave serving knob gpus unset for CPU candidates")
        group.gpus.extend(knobs["gpus"])
    if knobs["cuda_graphs"]:
        if backend != "tensorrt":
            raise UnservableError(
                f"serving route asks for CUDA graphs, which only Triton's tensorrt backend runs (this candidate is "
                f"served by the {backend} backend); leave serving knob cuda_graphs false for it")
        config.optimization.cuda.graphs = True


def _add_scheduler(config: mc.ModelConfig, knobs: dict[str, Any], backend: str) -> None:
    """The scheduler, always explicit where Triton would otherwise add one (see the module docstring)."""
    autocompleted = backend in AUTOCOMPLETES_DYNAMIC_BATCHING and knobs["max_batch_size"] > 1
    if knobs["dynamic_batching"] or autocompleted:
        config.dynamic_batching.SetInParent()  # present even when every field keeps its default
    if knobs["dynamic_batching"]:
        config.dynamic_batching.max_queue_delay_microseconds = knobs["max_queue_delay_us"]
        config.dynamic_batching.preferred_batch_size.extend(knobs["preferred_batch_sizes"])


def serving_notes(config: mc.ModelConfig, serving: Route) -> list[str]:
    """Where the written config serves differently from what the serving route asked, and why."""
    notes = []
    if not serving.knobs.get("dynamic_batching") and config.HasField("dynamic_batching"):
        backend = config.backend or ("tensorrt" if config.platform == "tensorrt_plan" else config.platform)
        notes.append(
            f"dynamic_batching=false is served with dynamic_batching {{}}: Triton's {backend} backend adds the "
            f"dynamic batcher to every config with max_batch_size {config.max_batch_size} > 1 and no scheduler")
    return notes


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


def verify_plan(config: mc.ModelConfig, artifact: Artifact) -> None:
    """Raise :class:`UnservableError` when ``artifact`` is a TensorRT plan that disagrees with ``config``
    (see :func:`gpt_triton.deploy._plan.check_plan_config`), read from the build's record of the engine or
    else from the plan; nothing to check for other runtimes, or for a plan without a record where no
    ``tensorrt`` module can read it (Triton's load then has the last word)."""
    if artifact.runtime != "tensorrt":
        return
    try:
        engine = plan_engine(artifact)
    except (OSError, ValueError) as exc:
        raise UnservableError(str(exc)) from exc
    if engine is None:
        return
    problems = check_plan_config(config, engine)
    if problems:
        raise UnservableError(f"the plan {plan_path(artifact)} and its config disagree: {'; '.join(problems)}")


def config_text(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)


def parse_config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def write_version_files(version_dir: Path, artifact: Artifact, backend: str) -> None:
    """Copy the artifact's files into ``version_dir``; for the python backend add the adapter, the runtime
    modules it imports (``gpt_triton_runtimes/``) and the runtime description it reads (per version, so
    versions of one model may use different runtimes)."""
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
        # The same goes for the runtime modules the adapter imports from beside itself.
        runtimes_dir = version_dir / RUNTIMES_DIR
        shutil.rmtree(runtimes_dir, ignore_errors=True)  # no stale module from an earlier write
        runtimes_dir.mkdir()
        for module in sorted(RUNTIMES_SOURCE.glob("*.py")):
            shutil.copy2(module, runtimes_dir / module.name)
        for source in [version_dir / "model.py", *sorted(runtimes_dir.glob("*.py"))]:
            py_compile.compile(str(source), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
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
    verify_plan(config, artifact)
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
    return DeployInfo(model_name=name, backend=backend, adapter=backend == "python", config_pbtxt=text,
                      notes=serving_notes(config, serving))
