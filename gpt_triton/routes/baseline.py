"""The production config of a served model as the tuning baseline: a compiler route plus serving knobs.

When gpt-triton tunes a model that a Triton already serves (``tune --model-repository REPO --model NAME``),
every gain must be claimed against what production really serves, not against ONNX Runtime's defaults
with one instance. This module maps a model's config.pbtxt (Triton's ``ModelConfig``) and, for a version
gpt-triton promoted through its python-backend adapter, the runtime options the adapter applies, onto
the knobs of the route families: the compiler family and its knobs (ORT graph level, threads, execution
mode, arenas; OpenVINO precision, hint, streams) and the serving knobs (instance count, max batch size,
dynamic batching with its delay and preferred sizes). The search then plans this route as the baseline
and starts its serving and compiler spaces from it (``gpt_triton.search.build_space``).

What a family cannot express (a backend parameter without a knob, GPU instances on a CPU-only tuner) is
said in ``notes``, which the run logs, rather than silently dropped. Reading the repository (files,
versions, protobuf parsing) is ``gpt_triton.deploy.existing``'s job; this module only maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.routes._onnxruntime import _LEVELS, _MODES

# Triton's onnxruntime backend: ``optimization { graph { level } }`` -> ORT level (the inverse of the table
# gpt_triton.runtimes uses to write it: -1 basic, 1 extended, 2 disable; unset or 0: ORT_ENABLE_ALL).
_NATIVE_GRAPH_LEVEL = {-1: "basic", 1: "extended", 2: "disable", 0: "all"}
_LEVEL_KNOB = {ort: knob for knob, ort in _LEVELS.items()}
_MODE_KNOB = {ort: knob for knob, ort in _MODES.items()}
# The onnxruntime backend's parameters (onnxruntime_backend README) and the knobs they set.
_ORT_INT_PARAMETERS = {"intra_op_thread_count": "intra_op_threads", "inter_op_thread_count": "inter_op_threads"}
_ORT_BOOL_PARAMETERS = {"enable_mem_arena": "enable_mem_arena", "enable_mem_pattern": "enable_mem_pattern"}
_ORT_SESSION_OPTIONS = {
    "intra_op_num_threads": "intra_op_threads", "inter_op_num_threads": "inter_op_threads",
    "enable_cpu_mem_arena": "enable_mem_arena", "enable_mem_pattern": "enable_mem_pattern",
}
_OPENVINO_CONFIG = {"INFERENCE_PRECISION_HINT": "inference_precision", "PERFORMANCE_HINT": "performance_hint",
                    "NUM_STREAMS": "num_streams"}
# Parameters gpt-triton itself writes into a promoted config (signing), not serving settings.
_OWN_PARAMETERS = frozenset({"gpt_triton_signed", "gpt_triton_signing_key_id"})


@dataclass(frozen=True)
class BaselineRoute:
    """What production serves, as route knobs: the baseline a tuning run measures every candidate against."""

    family: str  # the compiler family that serves it today ("onnxruntime" or "openvino")
    knobs: dict[str, Any]  # compiler knobs it sets (the family's defaults fill the rest)
    serving: dict[str, Any]  # serving knobs (the serving family's defaults fill the rest)
    source: str  # where it came from, for the decision log: "REPO/NAME version 3 (onnxruntime backend)"
    notes: tuple[str, ...] = field(default_factory=tuple)  # production settings no knob reproduces

    def describe(self) -> str:
        knobs = " ".join(f"{k}={v}" for k, v in {**self.knobs, **self.serving}.items())
        return f"the production config of {self.source}: {self.family} {knobs}".rstrip()


def _bool(text: str, what: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise GptTritonError(f"{what} is {text!r}; expected true/false or 1/0")


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise GptTritonError(f"{what} is {text!r}; expected an integer") from None


def native_onnxruntime_knobs(config: mc.ModelConfig, notes: list[str]) -> dict[str, Any]:
    """ONNX Runtime knobs from an onnxruntime-backend config: graph level, threads, mode, arena, pattern."""
    knobs: dict[str, Any] = {"precision": "fp32"}  # the served file itself is the source: nothing converted
    level = config.optimization.graph.level if config.optimization.HasField("graph") else 0
    if level not in _NATIVE_GRAPH_LEVEL:
        raise GptTritonError(f"config.pbtxt optimization.graph.level is {level}; the onnxruntime backend knows -1, 0, 1, 2")
    knobs["graph_optimization_level"] = _NATIVE_GRAPH_LEVEL[level]
    for key, param in config.parameters.items():
        value = param.string_value
        what = f"config.pbtxt parameter {key}"
        if key in _ORT_INT_PARAMETERS:
            knobs[_ORT_INT_PARAMETERS[key]] = _int(value, what)
        elif key in _ORT_BOOL_PARAMETERS:
            knobs[_ORT_BOOL_PARAMETERS[key]] = _bool(value, what)
        elif key == "execution_mode":
            knobs["execution_mode"] = "parallel" if _int(value, what) == 1 else "sequential"
        elif key not in _OWN_PARAMETERS:
            notes.append(f"backend parameter {key}={value!r} has no onnxruntime knob; the baseline runs without it")
    if config.optimization.execution_accelerators.gpu_execution_accelerator:
        notes.append("GPU execution accelerators are not reproduced: the baseline runs on the CPU provider here")
    return knobs


def adapter_knobs(runtime: str, options: Mapping[str, Any], file_knobs: Mapping[str, Any],
                  notes: list[str]) -> tuple[str, dict[str, Any]]:
    """(family, knobs) from the runtime options a gpt-triton python-backend adapter applies
    (``gpt_triton_runtime.json``), plus the file knobs the promotion's provenance names."""
    if runtime == "onnxruntime":
        session = dict(options.get("session_options") or {})
        knobs: dict[str, Any] = {"precision": "fp32"}  # the served model.onnx is the source: already converted
        level = session.pop("graph_optimization_level", "ORT_ENABLE_ALL")
        if level not in _LEVEL_KNOB:
            raise GptTritonError(f"the promoted runtime options set graph_optimization_level {level!r}, which no knob has")
        knobs["graph_optimization_level"] = _LEVEL_KNOB[level]
        mode = session.pop("execution_mode", "ORT_SEQUENTIAL")
        knobs["execution_mode"] = _MODE_KNOB.get(str(mode), "sequential")
        for key, value in session.items():
            if key in _ORT_SESSION_OPTIONS:
                knobs[_ORT_SESSION_OPTIONS[key]] = value
            else:
                notes.append(f"session option {key}={value!r} has no onnxruntime knob; the baseline runs without it")
        entries = options.get("config_entries") or {}
        if "session.intra_op.allow_spinning" in entries:
            knobs["allow_spinning"] = str(entries["session.intra_op.allow_spinning"]) != "0"
        if options.get("providers") not in (None, ["CPUExecutionProvider"]):
            notes.append(f"execution providers {options.get('providers')} are not reproduced: the baseline runs on CPU")
        return "onnxruntime", knobs
    if runtime == "openvino":
        knobs = {}
        for key, value in (options.get("config") or {}).items():
            if key in _OPENVINO_CONFIG:
                knob = _OPENVINO_CONFIG[key]
                knobs[knob] = int(value) if knob == "num_streams" else str(value)
            else:
                notes.append(f"OpenVINO property {key}={value!r} has no openvino knob; the baseline runs without it")
        for key in ("static_shape", "quantization"):
            if key in file_knobs:
                knobs[key] = file_knobs[key]
        return "openvino", knobs
    raise GptTritonError(f"the promoted version runs on {runtime!r}; only onnxruntime and openvino versions can be re-tuned here")


def serving_knobs(config: mc.ModelConfig, model: ModelInfo, notes: list[str], native: bool = True) -> dict[str, Any]:
    """Serving knobs: instances, max batch size, dynamic batching with its delay and preferred sizes.
    ``native``: a native backend serves the config (it auto-completes a dynamic batcher, see below)."""
    count = 0
    for group in config.instance_group:
        count += group.count or 1  # Triton's default count is 1
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            notes.append(f"instance group {group.name or '(unnamed)'} is KIND_GPU; the baseline serves its "
                         f"{group.count or 1} instance(s) on CPU here")
    knobs: dict[str, Any] = {"instance_count": max(count, 1)}
    if config.max_batch_size > 0 and not model.batch_dynamic:
        raise GptTritonError(f"config.pbtxt sets max_batch_size {config.max_batch_size} but the model file has no "
                             "dynamic batch axis on every input and output")
    knobs["max_batch_size"] = int(config.max_batch_size)
    batching = config.HasField("dynamic_batching")
    scheduler = config.WhichOneof("scheduling_choice")
    if native and not batching and scheduler is None and config.max_batch_size > 1:
        # Triton's native backends add `dynamic_batching {}` to such a config (AutoCompleteConfig), so
        # production batches: the baseline must too.
        batching = True
        notes.append(f"no scheduler with max_batch_size {config.max_batch_size}: Triton's backend serves it with "
                     "dynamic_batching {}, and so does the baseline")
    knobs["dynamic_batching"] = batching and config.max_batch_size > 0
    if knobs["dynamic_batching"]:
        knobs["max_queue_delay_us"] = int(config.dynamic_batching.max_queue_delay_microseconds)
        knobs["preferred_batch_sizes"] = [int(b) for b in config.dynamic_batching.preferred_batch_size]
    unreproduced = [scheduler] if scheduler not in (None, "dynamic_batching") else []
    unreproduced += ["response_cache"] if config.HasField("response_cache") else []
    unreproduced += ["rate_limiter"] if any(g.HasField("rate_limiter") for g in config.instance_group) else []
    notes += [f"{what} is not reproduced by any serving knob; the baseline runs without it" for what in unreproduced]
    return knobs


def production_baseline(config: mc.ModelConfig, model: ModelInfo, source: str, *, runtime: str | None = None,
                        runtime_options: Mapping[str, Any] | None = None,
                        file_knobs: Mapping[str, Any] | None = None) -> BaselineRoute:
    """The baseline route of a served model: ``runtime``/``runtime_options`` for a gpt-triton adapter version
    (python backend), else the native onnxruntime backend's settings in ``config``."""
    notes: list[str] = []
    if runtime is not None:
        family, knobs = adapter_knobs(runtime, runtime_options or {}, file_knobs or {}, notes)
    else:
        family, knobs = "onnxruntime", native_onnxruntime_knobs(config, notes)
    return BaselineRoute(family=family, knobs=knobs, serving=serving_knobs(config, model, notes, native=runtime is None), source=source,
                         notes=tuple(notes))
