"""ONNX Runtime: an ``InferenceSession`` built from an artifact's ``runtime_options``.

Options (the schema the onnxruntime family writes)::

    {"providers": ["CPUExecutionProvider"],                      # default; each must exist in this build
     "provider_options": {"TensorrtExecutionProvider": {"trt_fp16_enable": "1"}},  # per provider, strings
     "session_options": {"graph_optimization_level": "ORT_ENABLE_ALL",   # enum name or int
                         "execution_mode": "ORT_SEQUENTIAL",              # enum name or int
                         "intra_op_num_threads": 0, ...},                 # any SessionOptions attribute
     "config_entries": {"session.intra_op.allow_spinning": "1"}}          # add_session_config_entry

Profiling (for the profiler's op-time sum): ``OnnxRuntime().open(entry, options, profile_dir=dir)``;
after ``deactivate()`` the runner's ``profile_path`` is the Chrome-trace JSON ORT wrote into ``dir``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._base import (
    Feeds,
    NativeBackendConfig,
    Outputs,
    Runner,
    RunnerError,
    RunnerStateError,
    Runtime,
    RuntimeOptionError,
    RuntimeUnavailableError,
    check_keys,
    mapping_option,
    require_file,
)

NAME = "onnxruntime"
_OPTIONS = {
    "providers": "a list of execution provider names, default ['CPUExecutionProvider']",
    "provider_options": "a mapping of provider name (one of providers) to its options (string values)",
    "session_options": "a mapping of onnxruntime.SessionOptions attributes to values",
    "config_entries": "a mapping of session config keys to string values",
}
# Enum options accept the enum's member name (what the family writes) or its integer value.
_ENUMS = {"graph_optimization_level": "GraphOptimizationLevel", "execution_mode": "ExecutionMode"}

# Triton's ONNX Runtime backend: optimization.graph.level -1 = basic, 1 = extended, 2 = disable all;
# absent = ORT_ENABLE_ALL (onnxruntime.cc, ModelState::LoadModel).
_ORT_GRAPH_LEVEL = {"ORT_ENABLE_BASIC": -1, "ORT_ENABLE_EXTENDED": 1, "ORT_DISABLE_ALL": 2, "ORT_ENABLE_ALL": None}
# onnxruntime's integer values of those levels, so an int-valued option maps the same way (ORT_ENABLE_LAYOUT
# = 3 has no backend code and stays with the adapter).
_LEVEL_BY_INT = {0: "ORT_DISABLE_ALL", 1: "ORT_ENABLE_BASIC", 2: "ORT_ENABLE_EXTENDED", 99: "ORT_ENABLE_ALL"}
_EXECUTION_MODE = {"ORT_SEQUENTIAL": "0", "ORT_PARALLEL": "1", 0: "0", 1: "1"}
_ORT_PARAMETER = {
    "intra_op_num_threads": "intra_op_thread_count",
    "inter_op_num_threads": "inter_op_thread_count",
    "enable_cpu_mem_arena": "enable_mem_arena",
    "enable_mem_pattern": "enable_mem_pattern",
}
# Session config entries the native backend forwards, and the values that equal ORT's defaults (so
# leaving them out of the native config changes nothing).
_ORT_DEFAULT_ENTRIES = {"session.intra_op.allow_spinning": "1", "session.inter_op.allow_spinning": "1"}


def _import_ort() -> Any:
    try:
        import onnxruntime
    except Exception as exc:  # any import failure: unavailable, with the reason
        raise RuntimeUnavailableError(
            f"onnxruntime cannot be imported ({type(exc).__name__}: {exc}); pip install onnxruntime"
        ) from exc
    return onnxruntime


def _enum_value(ort: Any, key: str, value: Any) -> Any:
    enum = getattr(ort, _ENUMS[key])
    members = enum.__members__
    if isinstance(value, enum):
        return value
    if isinstance(value, str) and value in members:
        return members[value]
    if isinstance(value, int) and not isinstance(value, bool):
        for member in members.values():
            if int(member) == value:
                return member
    choices = ", ".join(f"{n} ({int(m)})" for n, m in members.items())
    raise RuntimeOptionError(NAME, f"session_options.{key}", f"one of {choices}", value)


def session_options(ort: Any, options: Mapping[str, Any], profile_dir: str | Path | None = None) -> Any:
    """An ``onnxruntime.SessionOptions`` from ``runtime_options``; raises RuntimeOptionError on a bad one."""
    so = ort.SessionOptions()
    for key, value in mapping_option(NAME, options, "session_options").items():
        if key in _ENUMS:
            value = _enum_value(ort, key, value)
        if not isinstance(key, str) or key.startswith("_") or not hasattr(so, key) or callable(getattr(so, key)):
            raise RuntimeOptionError(
                NAME, f"session_options.{key}",
                "an onnxruntime.SessionOptions attribute such as graph_optimization_level, intra_op_num_threads, "
                "inter_op_num_threads, execution_mode, enable_cpu_mem_arena, enable_mem_pattern",
            )
        try:
            setattr(so, key, value)
        except (TypeError, ValueError) as exc:
            kind = type(getattr(so, key)).__name__
            raise RuntimeOptionError(NAME, f"session_options.{key}", f"a value of type {kind} (SessionOptions.{key})", value) from exc
    for key, value in mapping_option(NAME, options, "config_entries").items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise RuntimeOptionError(NAME, f"config_entries.{key}", "a string value such as '1' or '0'", value)
        so.add_session_config_entry(str(key), str(value))
    if profile_dir is not None:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(str(profile_dir), "ort_profile")
    return so


def _provider_names(options: Mapping[str, Any]) -> list[str]:
    providers = options.get("providers") or ["CPUExecutionProvider"]
    if isinstance(providers, str) or not isinstance(providers, Sequence) or not all(isinstance(p, str) for p in providers):
        raise RuntimeOptionError(NAME, "providers", "a list of execution provider names", providers)
    return list(providers)


def _provider_options(options: Mapping[str, Any], providers: Sequence[str]) -> dict[str, dict[str, str]]:
    """``provider_options`` checked against ``providers``, every value as the string ORT parses."""
    out: dict[str, dict[str, str]] = {}
    for provider, values in mapping_option(NAME, options, "provider_options").items():
        if provider not in providers:
            raise RuntimeOptionError(NAME, f"provider_options.{provider}", f"one of the providers {list(providers)}")
        if not isinstance(values, Mapping):
            raise RuntimeOptionError(NAME, f"provider_options.{provider}", "a mapping of option names to values", values)
        for key, value in values.items():
            if not isinstance(value, (str, int, float)):
                raise RuntimeOptionError(NAME, f"provider_options.{provider}.{key}", "a string, number or bool", value)
        out[provider] = {str(k): (str(int(v)) if isinstance(v, bool) else str(v)) for k, v in values.items()}
    return out


def _providers(ort: Any, options: Mapping[str, Any]) -> list[Any]:
    """What ``InferenceSession(providers=...)`` takes: names, or (name, options) where options are given."""
    providers = _provider_names(options)
    per_provider = _provider_options(options, providers)
    available = ort.get_available_providers()
    missing = [p for p in providers if p not in available]
    if missing:
        # ORT would warn and silently fall back to CPU: a different route from the one asked for.
        raise RuntimeOptionError(NAME, "providers", f"providers of this onnxruntime build: {available}", missing)
    return [(p, per_provider[p]) if p in per_provider else p for p in providers]


class OnnxRuntimeRunner(Runner):
    def __init__(self, entry: Path, so: Any, providers: list[Any], output_names: Sequence[str] | None,
                 profiling: bool) -> None:
        super().__init__(f"{NAME}:{entry}")
        self.entry = entry
        self._so, self._providers, self._wanted = so, providers, output_names
        self._profiling = profiling
        self._session: Any = None
        self._names: list[str] = []
        self.profile_path: Path | None = None  # set by deactivate() when opened with profile_dir

    @property
    def session(self) -> Any:
        """The live ``onnxruntime.InferenceSession`` (while active), e.g. to read the options it applied."""
        if self._session is None:
            raise RunnerStateError(f"{self.name} has no session until activate()")
        return self._session

    def _activate(self) -> Sequence[str]:
        ort = _import_ort()
        try:
            self._session = ort.InferenceSession(str(self.entry), sess_options=self._so, providers=self._providers)
        except Exception as exc:
            raise RunnerError(f"onnxruntime could not load {self.entry}: {exc}") from exc
        declared = [o.name for o in self._session.get_outputs()]
        if self._wanted is None:
            self._names = declared
        else:
            unknown = [n for n in self._wanted if n not in declared]
            if unknown:
                self._session = None
                raise RunnerError(f"{self.name}: no output named {unknown}; the model's outputs are {declared}")
            self._names = list(self._wanted)
        return self._names

    def _infer(self, feeds: Feeds) -> Outputs:
        # Fresh arrays per run (ORT allocates them): safe to keep, so reuse_outputs changes nothing here.
        return dict(zip(self._names, self._session.run(self._names, feeds), strict=True))

    def _deactivate(self) -> None:
        if self._profiling:
            self.profile_path = Path(self._session.end_profiling())
        self._session = None


class OnnxRuntime(Runtime):
    name = NAME
    backend = "onnxruntime"

    def availability(self) -> tuple[bool, str]:
        try:
            ort = _import_ort()
            if "CPUExecutionProvider" not in ort.get_available_providers():
                return False, "onnxruntime has no CPUExecutionProvider"
        except Exception as exc:  # never raises: any failure is a reason
            return False, str(exc)
        return True, ""

    def open(
        self, entry: Path, options: Mapping[str, Any], *, output_names: Sequence[str] | None = None,
        reuse_outputs: bool = False, profile_dir: str | Path | None = None,
    ) -> OnnxRuntimeRunner:
        check_keys(NAME, options, _OPTIONS)
        ort = _import_ort()
        so = session_options(ort, options, profile_dir)
        providers = _providers(ort, options)
        return OnnxRuntimeRunner(require_file(NAME, entry), so, providers, output_names, profile_dir is not None)

    def native_config(self, options: Mapping[str, Any]) -> NativeBackendConfig | None:
        """The onnxruntime backend's config for exactly these options, or None (the adapter serves them).

        Providers: ``["CPUExecutionProvider"]`` -> KIND_CPU instances; ``["CUDAExecutionProvider"]`` ->
        KIND_GPU instances (the backend's default GPU provider), its options as the ``cuda`` accelerator;
        ``["TensorrtExecutionProvider", "CUDAExecutionProvider"]`` -> KIND_GPU with the ``tensorrt``
        accelerator first (the backend keeps CUDA as TensorRT's fallback, as ORT does). A trailing
        ``"CPUExecutionProvider"`` is ORT's own last fallback in both and may be named. Any other list, or an
        option the backend's parameter table (onnxruntime_backend README) cannot say, gives None.
        """
        if not isinstance(options, Mapping) or set(options) - set(_OPTIONS):
            return None
        try:
            providers = _provider_names(options)
            provider_options = _provider_options(options, providers)
        except RuntimeOptionError:
            return None
        accelerators = _gpu_accelerators(providers, provider_options)
        if accelerators is None:
            return None
        gpu = providers != ["CPUExecutionProvider"]
        session = dict(options.get("session_options") or {})
        params: dict[str, str] = {}
        level_name = session.pop("graph_optimization_level", "ORT_ENABLE_ALL")
        if isinstance(level_name, int) and not isinstance(level_name, bool):
            level_name = _LEVEL_BY_INT.get(level_name)
        if not isinstance(level_name, str) or level_name not in _ORT_GRAPH_LEVEL:
            return None
        mode = session.pop("execution_mode", None)
        if mode is not None:
            if not isinstance(mode, (str, int)) or isinstance(mode, bool) or mode not in _EXECUTION_MODE:
                return None
            params["execution_mode"] = _EXECUTION_MODE[mode]
        for key, value in session.items():
            if key not in _ORT_PARAMETER or not isinstance(value, (int, bool)):
                return None
            params[_ORT_PARAMETER[key]] = str(int(value))
        for key, value in (options.get("config_entries") or {}).items():
            if _ORT_DEFAULT_ENTRIES.get(key) != str(value):
                return None
        return NativeBackendConfig(backend=self.backend, parameters=params, graph_level=_ORT_GRAPH_LEVEL[level_name],
                                   gpu=gpu, gpu_accelerators=accelerators)


# Provider lists the backend can express (a trailing CPUExecutionProvider is ORT's implicit fallback).
_CPU, _CUDA, _TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"
# TensorRT EP options (ORT names) the backend takes under the same name (onnxruntime_backend README,
# "Parameter mapping between ONNX Runtime and Triton ONNXRuntime Backend").
_TRT_SAME_NAME = frozenset({
    "trt_max_partition_iterations", "trt_min_subgraph_size", "trt_engine_cache_enable", "trt_engine_cache_path",
    "trt_engine_cache_prefix", "trt_force_sequential_engine_build", "trt_context_memory_sharing_enable",
    "trt_layer_norm_fp32_fallback", "trt_timing_cache_enable", "trt_timing_cache_path", "trt_force_timing_cache",
    "trt_build_heuristics_enable", "trt_sparsity_enable", "trt_builder_optimization_level", "trt_auxiliary_streams",
    "trt_tactic_sources", "trt_cuda_graph_enable", "trt_dump_subgraphs", "trt_detailed_build_log",
})
# precision_mode is one value: FP32 (no flag), FP16, BF16 or INT8.
_TRT_PRECISION_FLAGS = {"trt_fp16_enable": "FP16", "trt_bf16_enable": "BF16", "trt_int8_enable": "INT8"}
_TRUE, _FALSE = frozenset({"1", "true", "True"}), frozenset({"0", "false", "False"})


def _trt_parameters(values: Mapping[str, str]) -> dict[str, str] | None:
    """TensorRT EP options -> the backend's ``tensorrt`` accelerator parameters; None if one has no mapping."""
    params: dict[str, str] = {}
    precisions = []
    for key, value in values.items():
        if key in _TRT_PRECISION_FLAGS:
            if value in _TRUE:
                precisions.append(_TRT_PRECISION_FLAGS[key])
            elif value not in _FALSE:
                return None
        elif key == "trt_max_workspace_size":
            params["max_workspace_size_bytes"] = value
        elif key in _TRT_SAME_NAME:
            params[key] = value
        else:
            return None
    if len(precisions) > 1:
        return None  # the backend takes one precision_mode
    params["precision_mode"] = precisions[0] if precisions else "FP32"
    return params


def _gpu_accelerators(providers: list[str], provider_options: dict[str, dict[str, str]]) -> dict[str, dict[str, str]] | None:
    """The ``gpu_execution_accelerator`` list for ``providers`` ({} for CPU or plain CUDA); None if inexpressible."""
    named = providers[:-1] if len(providers) > 1 and providers[-1] == _CPU else providers
    if named == [_CPU]:
        return {} if not provider_options else None
    if named not in ([_CUDA], [_TRT, _CUDA]):
        return None
    accelerators: dict[str, dict[str, str]] = {}
    if _TRT in named:
        trt = _trt_parameters(provider_options.get(_TRT, {}))
        if trt is None:
            return None
        accelerators["tensorrt"] = trt
    cuda = dict(provider_options.get(_CUDA, {}))
    if "device_id" in cuda:
        return None  # the backend places each instance on its instance group's GPU
    if cuda:
        accelerators["cuda"] = cuda
    if _CPU in provider_options:
        return None
    return accelerators
