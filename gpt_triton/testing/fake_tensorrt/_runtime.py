"""``tensorrt.Runtime``, ``ICudaEngine`` and ``IExecutionContext`` over the fake builder's plans.

Bindings followed: pyCore.cpp ``Runtime`` (``deserialize_cuda_engine(serialized_engine)``), ``ICudaEngine``
(``num_io_tensors``, ``get_tensor_name``, ``get_tensor_shape``, ``get_tensor_dtype``, ``get_tensor_mode``,
``get_tensor_profile_shape(name, profile_index)`` -> [min, opt, max], ``num_optimization_profiles``,
``num_layers``, ``name``, ``refittable``, ``serialize``, ``create_execution_context``, ``__getitem__``) and
``IExecutionContext`` (``set_input_shape``, ``get_tensor_shape``, ``set_optimization_profile_async``,
``active_optimization_profile``, ``all_binding_shapes_specified``, ``set_tensor_address``/``get_tensor_address``).

``deserialize_cuda_engine`` returns None (error logged) for bytes that are not a fake plan, for a plan built by
another TensorRT version ("The engine plan file is not compatible with this version of TensorRT, expecting
library version X got Y, please rebuild." - the wording real TensorRT logs, as quoted in
triton-inference-server/server#5975 and NVIDIA/TensorRT#3071; the check compares the full version, build number
included) and for a plan built for another compute capability. Version-compatible and hardware-compatible plans
are NOT modelled: the fake refuses them like any other mismatch.

NO GPU EXECUTION: ``IExecutionContext.execute_async_v3`` and ``execute_v2`` exist (as in the real bindings) and
raise ``NotImplementedError``; nothing is ever computed. Input shapes are checked against the active profile.
"""

from __future__ import annotations

import json
from typing import Any

from gpt_triton.testing.fake_tensorrt._builder import PLAN_MAGIC
from gpt_triton.testing.fake_tensorrt._types import Context, Dims, IHostMemory, as_buffer, check_int, to_dims


def describe_engine(blob: Any) -> dict[str, Any]:
    """The JSON header the fake builder wrote into a plan (ValueError if ``blob`` is not a fake plan)."""
    data = bytes(blob)
    if not data.startswith(PLAN_MAGIC):
        raise ValueError("not a plan built by the fake TensorRT")
    header: dict[str, Any] = json.loads(data[len(PLAN_MAGIC):])
    return header


class RuntimeBase:
    __slots__ = ("_logger",)
    _ctx: Context

    def __init__(self, logger: Any) -> None:
        if not isinstance(logger, self._ctx.classes["ILogger"]):
            raise TypeError(f"__init__(): incompatible constructor arguments. Invoked with: {logger!r}")
        self._logger = logger

    @property
    def logger(self) -> Any:
        return self._logger

    def deserialize_cuda_engine(self, serialized_engine: Any) -> Any:
        data = as_buffer(serialized_engine, "deserialize_cuda_engine")
        ctx, state = self._ctx, self._ctx.state
        try:
            header = describe_engine(data)
        except ValueError:
            ctx.emit(self._logger, "ERROR", "1: [stdArchiveReader.cpp] Error Code 1: Serialization "
                     "(Serialization assertion failed: Magic tag does not match)")
            return None
        if header["tensorrt_version"] != state.release.version:
            ctx.emit(self._logger, "ERROR", "6: The engine plan file is not compatible with this version of "
                     f"TensorRT, expecting library version {state.release.version} got "
                     f"{header['tensorrt_version']}, please rebuild.")
            return None
        built_on = tuple(header["compute_capability"])
        if built_on != state.compute_capability:
            have = ".".join(map(str, state.compute_capability))
            ctx.emit(self._logger, "ERROR", "6: The engine plan file is generated on an incompatible device, "
                     f"expecting compute {have} got compute {'.'.join(map(str, built_on))}, please rebuild.")
            return None
        return ctx.classes["ICudaEngine"](header, data, self._logger)


class ICudaEngineBase:
    __slots__ = ("_header", "_blob", "_io", "_logger")
    _ctx: Context

    def __init__(self, header: dict[str, Any], blob: bytes, logger: Any) -> None:
        self._header, self._blob, self._logger = header, blob, logger
        net = header["network"]
        self._io = [(t, "INPUT") for t in net["inputs"]] + [(t, "OUTPUT") for t in net["outputs"]
                                                              if t["name"] not in {i["name"] for i in net["inputs"]}]

    def _find(self, name: str) -> tuple[dict[str, Any], str] | None:
        return next(((t, mode) for t, mode in self._io if t["name"] == name), None)

    @property
    def num_io_tensors(self) -> int:
        return len(self._io)

    @property
    def num_layers(self) -> int:
        return len(self._header["network"]["layers"])

    @property
    def num_optimization_profiles(self) -> int:
        return len(self._header["profiles"])

    @property
    def name(self) -> str:
        return str(self._header["network"]["name"])

    @property
    def refittable(self) -> bool:
        return "REFIT" in self._header["config"]["flags"]

    def get_tensor_name(self, index: int) -> str | None:
        return self._io[index][0]["name"] if 0 <= index < len(self._io) else None

    def __getitem__(self, index: int) -> str:
        if not -len(self._io) <= index < len(self._io):
            raise IndexError(index)
        return str(self._io[index][0]["name"])

    def get_tensor_mode(self, name: str) -> Any:
        found = self._find(name)
        return self._ctx.member("TensorIOMode", found[1] if found else "NONE")

    def get_tensor_shape(self, name: str) -> Dims:
        found = self._find(name)
        return Dims(found[0]["shape"]) if found else Dims.invalid()

    def get_tensor_dtype(self, name: str) -> Any:
        found = self._find(name)
        return self._ctx.member("DataType", found[0]["dtype"] if found else "FLOAT")

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[Dims]:
        profiles = self._header["profiles"]
        if not 0 <= profile_index < len(profiles) or name not in profiles[profile_index]:
            return [Dims.invalid()] * 3
        shapes = profiles[profile_index][name]
        return [Dims(shapes[s]) for s in ("min", "opt", "max")]

    def serialize(self) -> IHostMemory:
        return IHostMemory(self._blob)

    def create_execution_context(self, strategy: Any = None) -> Any:
        return self._ctx.classes["IExecutionContext"](self)


class IExecutionContextBase:
    __slots__ = ("_engine", "_profile", "_shapes", "_addresses", "_name")
    _ctx: Context

    def __init__(self, engine: Any) -> None:
        self._engine, self._profile, self._name = engine, 0, ""
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._addresses: dict[str, int] = {}

    @property
    def engine(self) -> Any:
        return self._engine

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = str(value)

    @property
    def active_optimization_profile(self) -> int:
        return self._profile

    def set_optimization_profile_async(self, profile_index: int, stream_handle: int) -> bool:
        if not 0 <= check_int(profile_index, "set_optimization_profile_async") < self._engine.num_optimization_profiles:
            raise RuntimeError("Error in set optimization profile async.")
        self._profile, self._shapes = profile_index, {}
        return True

    def set_input_shape(self, name: str, shape: Any) -> bool:
        dims = to_dims(shape, "set_input_shape")
        engine = self._engine
        if engine.get_tensor_mode(name).name != "INPUT":
            self._error(f"setInputShape: {name!r} is not an input tensor")
            return False
        low, _, high = (tuple(d) for d in engine.get_tensor_profile_shape(name, self._profile))
        if len(dims) != len(low) or any(not lo <= d <= hi for lo, d, hi in zip(low, dims, high, strict=False)):
            self._error(f"setInputShape: {name!r} {list(dims)} is outside profile {self._profile} "
                        f"[{list(low)}, {list(high)}]")
            return False
        self._shapes[name] = dims
        return True

    def get_tensor_shape(self, name: str) -> Dims:
        return Dims(self._shapes[name]) if name in self._shapes else self._engine.get_tensor_shape(name)

    @property
    def all_binding_shapes_specified(self) -> bool:
        engine = self._engine
        inputs = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        return all(n in self._shapes or all(d >= 0 for d in engine.get_tensor_shape(n)) for n in inputs
                   if engine.get_tensor_mode(n).name == "INPUT")

    def set_tensor_address(self, name: str, memory: int) -> bool:
        if self._engine.get_tensor_mode(name).name == "NONE":
            return False
        self._addresses[name] = check_int(memory, "set_tensor_address")
        return True

    def get_tensor_address(self, name: str) -> int:
        return self._addresses.get(name, 0)

    def execute_async_v3(self, stream_handle: int) -> bool:
        raise NotImplementedError("fake TensorRT: no GPU execution (execute_async_v3 is not modelled)")

    def execute_v2(self, bindings: Any) -> bool:
        raise NotImplementedError("fake TensorRT: no GPU execution (execute_v2 is not modelled)")

    def _error(self, message: str) -> None:
        self._ctx.emit(self._engine._logger, "ERROR", message)
