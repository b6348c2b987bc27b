"""TensorRT: a serialized engine (``model.plan``) run through an execution context on one CUDA stream.

Written against NVIDIA's Python API as TensorRT 10.x and 11.x both expose it (NVIDIA/TensorRT
``python/src/infer/pyCore.cpp``, tags v10.5.0 ... v11.1: ``Runtime.deserialize_cuda_engine``, named I/O tensors
``num_io_tensors`` / ``get_tensor_name`` / ``get_tensor_mode`` / ``get_tensor_dtype`` / ``get_tensor_shape``,
``IExecutionContext.set_input_shape`` and ``execute_async_v3``), with ``cuda-python`` for device memory and the
stream. Tensor types are mapped here by ``DataType`` member name rather than through ``tensorrt.nptype``, so the
mapping does not depend on the release (11.x adds types numpy cannot hold; those are refused by name). The
tensorrt family writes no runtime options, and this runtime accepts none: an engine's choices are baked in at
build time.

A plan deserializes only on the TensorRT version (build number included) and GPU architecture that built it;
TensorRT then returns None and says why to its logger ("expecting library version X got Y"). The runner keeps
what was logged and raises it with the fix. :meth:`TensorRt.inspect` deserializes without CUDA streams or
buffers (no cuda-python), to read a plan's I/O where nothing can run.

Seams: ``TensorRt(tensorrt=..., cudart=...)`` take the two modules (defaults: import them); tests pass
gpt_triton.testing.fake_tensorrt's module and no cudart.

Triton serves plans with its native ``tensorrt`` backend (platform ``tensorrt_plan``, GPU instances);
the python-backend adapter never serves them. Outputs whose shape depends on the data (NonZero and
friends) need an output allocator and are refused with a clear error.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._base import (
    Feeds,
    NativeBackendConfig,
    Outputs,
    Runner,
    RunnerError,
    Runtime,
    RuntimeUnavailableError,
    check_keys,
    require_file,
)

NAME = "tensorrt"
_INSTALL = "pip install 'gpt-triton[tensorrt]' cuda-python on a machine with an NVIDIA GPU"


# DataType member -> numpy dtype, for the types numpy holds (BF16, FP8, INT4, FP4, E8M0 have no numpy dtype)
_NUMPY = {"FLOAT": "float32", "HALF": "float16", "INT8": "int8", "INT32": "int32", "INT64": "int64", "BOOL": "bool",
          "UINT8": "uint8"}
_SPELLING = {**_NUMPY, "BF16": "bfloat16"}  # as the tensorrt family records Artifact.engine


def _import_tensorrt() -> Any:
    import tensorrt

    return tensorrt


def _import_cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        from cuda import cudart  # older cuda-python layout
    return cudart


def _collecting_logger(trt: Any, errors: list[str]) -> Any:
    """A ``trt.ILogger`` that keeps ERROR and INTERNAL_ERROR messages (a failed deserialization says why only there)."""

    class _Collecting(trt.ILogger):  # type: ignore[name-defined, misc]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)  # pybind trampolines need the base constructor called

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.Severity.ERROR):
                errors.append(str(msg))

    return _Collecting()


def _deserialize(trt: Any, entry: Path) -> tuple[Any, Any]:
    """(runtime, engine) for the plan at ``entry``, or RunnerError with TensorRT's reason and the fix."""
    errors: list[str] = []
    runtime = trt.Runtime(_collecting_logger(trt, errors))
    engine = runtime.deserialize_cuda_engine(entry.read_bytes())
    if engine is None:
        said = "; ".join(errors) or "TensorRT logged no reason"
        raise RunnerError(
            f"TensorRT {trt.__version__} could not deserialize {entry}: {said}. A plan runs only on the TensorRT "
            f"version and GPU architecture that built it: rebuild the candidate with TensorRT {trt.__version__} on "
            "this GPU, or serve it where its builder's TensorRT runs (Artifact.engine says which)"
        )
    return runtime, engine


def _io(trt: Any, engine: Any) -> tuple[dict[str, tuple[str, list[int]]], dict[str, tuple[str, list[int]]]]:
    """({input: (DataType name, dims)}, {output: ...}) in the engine's order (-1: dynamic)."""
    inputs: dict[str, tuple[str, list[int]]] = {}
    outputs: dict[str, tuple[str, list[int]]] = {}
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        found = (engine.get_tensor_dtype(name).name, [int(d) for d in engine.get_tensor_shape(name)])
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs)[name] = found
    return inputs, outputs


def _cuda(cudart: Any, result: Any) -> Any:
    """Unwrap a cuda-python call's (error, *values) tuple; raise RunnerError on a CUDA error."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != cudart.cudaError_t.cudaSuccess:
        raise RunnerError(f"CUDA error {error}")
    return values[0] if len(values) == 1 else values


class TensorRtRunner(Runner):
    def __init__(self, entry: Path, output_names: Sequence[str] | None, runtime: TensorRt | None = None) -> None:
        super().__init__(f"{NAME}:{entry}")
        self.entry = entry
        self._wanted = output_names
        self._modules = runtime or TensorRt()
        self._trt: Any = None
        self._cudart: Any = None
        self._runtime: Any = None
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._dtypes: dict[str, np.dtype[Any]] = {}
        self._device: dict[str, tuple[int, int]] = {}  # tensor name -> (device pointer, bytes), grown on demand

    def _activate(self) -> Sequence[str]:
        trt = self._trt = self._modules.tensorrt()
        runtime, engine = _deserialize(trt, self.entry)
        inputs, outputs = _io(trt, engine)
        strangers = {n: kind for n, (kind, _) in {**inputs, **outputs}.items() if kind not in _NUMPY}
        if strangers:
            raise RunnerError(f"{self.name}: tensor(s) {strangers} have TensorRT types numpy cannot hold; build the "
                              "engine with float32 or float16 I/O (the tensorrt family keeps the model's I/O types)")
        declared = list(outputs)
        unknown = [n for n in self._wanted or () if n not in declared]
        if unknown:
            raise RunnerError(f"{self.name}: no output named {unknown}; the engine's outputs are {declared}")
        dtypes = {n: np.dtype(_NUMPY[kind]) for n, (kind, _) in {**inputs, **outputs}.items()}
        # Everything above needs only TensorRT; from here on, CUDA.
        cudart = self._cudart = self._modules.cudart()
        self._runtime, self._engine = runtime, engine
        self._context = engine.create_execution_context()
        self._inputs, self._dtypes = list(inputs), dtypes
        self._outputs = list(self._wanted) if self._wanted is not None else declared
        self._stream = _cuda(cudart, cudart.cudaStreamCreate())
        return self._outputs

    def _buffer(self, name: str, nbytes: int) -> int:
        pointer, size = self._device.get(name, (0, 0))
        if size < nbytes:
            if pointer:
                _cuda(self._cudart, self._cudart.cudaFree(pointer))
            pointer, size = int(_cuda(self._cudart, self._cudart.cudaMalloc(max(nbytes, 1)))), nbytes
            self._device[name] = (pointer, size)
        return pointer

    def _infer(self, feeds: Feeds) -> Outputs:
        cudart, context, stream = self._cudart, self._context, self._stream
        to_device, to_host = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        staged = []  # keep host arrays alive until the stream has read them
        for name in self._inputs:
            if name not in feeds:
                raise RunnerError(f"{self.name}: input {name!r} missing from the request (got {sorted(feeds)})")
            array = np.ascontiguousarray(feeds[name], dtype=self._dtypes[name])
            staged.append(array)
            if not context.set_input_shape(name, array.shape):
                raise RunnerError(f"{self.name}: input {name!r} shape {array.shape} is outside the engine's profile")
            pointer = self._buffer(name, array.nbytes)
            _cuda(cudart, cudart.cudaMemcpyAsync(pointer, array.ctypes.data, array.nbytes, to_device, stream))
            context.set_tensor_address(name, pointer)
        # Every output's address must be set, even those the caller does not want.
        every = [n for n in self._dtypes if n not in self._inputs]
        hosts: dict[str, np.ndarray] = {}
        for name in every:
            shape = tuple(context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise RunnerError(f"{self.name}: output {name!r} has a data-dependent shape {shape}; not supported here")
            hosts[name] = np.empty(shape, dtype=self._dtypes[name])
            context.set_tensor_address(name, self._buffer(name, hosts[name].nbytes))
        if not context.execute_async_v3(stream):
            raise RunnerError(f"{self.name}: execute_async_v3 failed (see TensorRT's log)")
        for name in self._outputs:
            host = hosts[name]
            _cuda(cudart, cudart.cudaMemcpyAsync(host.ctypes.data, self._device[name][0], host.nbytes, to_host, stream))
        _cuda(cudart, cudart.cudaStreamSynchronize(stream))
        return {name: hosts[name] for name in self._outputs}

    def _deactivate(self) -> None:
        try:
            for pointer, _size in self._device.values():
                _cuda(self._cudart, self._cudart.cudaFree(pointer))
            if self._stream is not None:
                _cuda(self._cudart, self._cudart.cudaStreamDestroy(self._stream))
        finally:
            self._device, self._stream = {}, None
            # Context before engine before runtime: TensorRT requires that destruction order.
            self._context = None
            self._engine = None
            self._runtime = None


class TensorRt(Runtime):
    name = NAME
    backend = "tensorrt"
    python_backend = False  # plans are served by Triton's tensorrt backend on GPU instances

    def __init__(self, tensorrt: Callable[[], Any] | None = None, cudart: Callable[[], Any] | None = None) -> None:
        self._load_tensorrt = tensorrt or _import_tensorrt
        self._load_cudart = cudart or _import_cudart

    def tensorrt(self) -> Any:
        """The tensorrt module, or RuntimeUnavailableError saying how to get it."""
        try:
            return self._load_tensorrt()
        except Exception as exc:
            raise RuntimeUnavailableError(f"tensorrt cannot be imported ({type(exc).__name__}: {exc}); {_INSTALL}") from exc

    def cudart(self) -> Any:
        """cuda-python's runtime module, or RuntimeUnavailableError saying how to get it."""
        try:
            return self._load_cudart()
        except Exception as exc:
            raise RuntimeUnavailableError(f"cuda-python cannot be imported ({type(exc).__name__}: {exc}); {_INSTALL}") from exc

    def inspect(self, entry: Path) -> dict[str, Any]:
        """What a plan declares, read by deserializing it (no CUDA stream, buffer or cuda-python):
        ``{"tensorrt_version", "inputs": {name: {"dtype", "shape"}}, "outputs": {...}, "profiles": [{input: {"min",
        "opt", "max"}}]}``, dtypes spelled as Artifact.engine spells them. RunnerError when it does not deserialize."""
        trt = self.tensorrt()
        _runtime, engine = _deserialize(trt, require_file(NAME, entry))
        inputs, outputs = _io(trt, engine)

        def spelled(found: dict[str, tuple[str, list[int]]]) -> dict[str, dict[str, Any]]:
            return {n: {"dtype": _SPELLING.get(kind, kind.lower()), "shape": dims} for n, (kind, dims) in found.items()}

        profiles = [
            {name: dict(zip(("min", "opt", "max"), ([int(d) for d in dims] for dims in
                                                    engine.get_tensor_profile_shape(name, index)), strict=True))
             for name in inputs}
            for index in range(engine.num_optimization_profiles)
        ]
        return {"tensorrt_version": str(trt.__version__), "inputs": spelled(inputs), "outputs": spelled(outputs),
                "profiles": profiles}

    def availability(self) -> tuple[bool, str]:
        try:
            self.tensorrt()
            cudart = self.cudart()
        except RuntimeUnavailableError as exc:
            return False, str(exc)
        except Exception as exc:  # never raises
            return False, f"{type(exc).__name__}: {exc}"
        try:
            count = _cuda(cudart, cudart.cudaGetDeviceCount())
        except Exception as exc:
            return False, f"CUDA is not usable here ({exc})"
        if not count:
            hint = "" if shutil.which("nvidia-smi") else " (no nvidia-smi either)"
            return False, f"no NVIDIA GPU visible to CUDA{hint}"
        return True, ""

    def open(
        self, entry: Path, options: Mapping[str, Any], *, output_names: Sequence[str] | None = None,
        reuse_outputs: bool = False,
    ) -> TensorRtRunner:
        check_keys(NAME, options, {})
        self.tensorrt()  # fail here, with the reason, rather than at activate
        return TensorRtRunner(require_file(NAME, entry), output_names, self)

    def native_config(self, options: Mapping[str, Any]) -> NativeBackendConfig | None:
        if options:
            return None  # no options exist for an engine; anything here was not built into it
        return NativeBackendConfig(backend=self.backend, platform="tensorrt_plan", gpu=True)
