"""TensorRT: a serialized engine (``model.plan``) run through an execution context on one CUDA stream.

Written against NVIDIA's Python API (TensorRT 10: named I/O tensors, ``execute_async_v3``) with
``cuda-python`` for device memory and the stream. The tensorrt family writes no runtime options, and
this runtime accepts none: an engine's choices are baked in at build time.

Triton serves plans with its native ``tensorrt`` backend (platform ``tensorrt_plan``, GPU instances);
the python-backend adapter never serves them. Outputs whose shape depends on the data (NonZero and
friends) need an output allocator and are refused with a clear error.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
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


def _import_trt() -> tuple[Any, Any]:
    """(tensorrt, cudart) or RuntimeUnavailableError saying which is missing."""
    try:
        import tensorrt
    except Exception as exc:
        raise RuntimeUnavailableError(f"tensorrt cannot be imported ({type(exc).__name__}: {exc}); {_INSTALL}") from exc
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except Exception:
        try:
            from cuda import cudart  # older cuda-python layout
        except Exception as exc:
            raise RuntimeUnavailableError(f"cuda-python cannot be imported ({type(exc).__name__}: {exc}); {_INSTALL}") from exc
    return tensorrt, cudart


def _cuda(cudart: Any, result: Any) -> Any:
    """Unwrap a cuda-python call's (error, *values) tuple; raise RunnerError on a CUDA error."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != cudart.cudaError_t.cudaSuccess:
        raise RunnerError(f"CUDA error {error}")
    return values[0] if len(values) == 1 else values


class TensorRtRunner(Runner):
    def __init__(self, entry: Path, output_names: Sequence[str] | None) -> None:
        super().__init__(f"{NAME}:{entry}")
        self.entry = entry
        self._wanted = output_names
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
        trt, cudart = self._trt, self._cudart = _import_trt()
        self._runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self._engine = self._runtime.deserialize_cuda_engine(self.entry.read_bytes())
        if self._engine is None:
            raise RunnerError(
                f"TensorRT could not deserialize {self.entry}: it was built by another TensorRT version or for "
                "another GPU; rebuild the candidate on this machine"
            )
        self._context = self._engine.create_execution_context()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        self._inputs = [n for n in names if self._engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        declared = [n for n in names if n not in self._inputs]
        self._dtypes = {n: np.dtype(trt.nptype(self._engine.get_tensor_dtype(n))) for n in names}
        unknown = [n for n in self._wanted or () if n not in declared]
        if unknown:
            raise RunnerError(f"{self.name}: no output named {unknown}; the engine's outputs are {declared}")
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

    def availability(self) -> tuple[bool, str]:
        try:
            _trt, cudart = _import_trt()
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
        _import_trt()  # fail here, with the reason, rather than at activate
        return TensorRtRunner(require_file(NAME, entry), output_names)

    def native_config(self, options: Mapping[str, Any]) -> NativeBackendConfig | None:
        if options:
            return None  # no options exist for an engine; anything here was not built into it
        return NativeBackendConfig(backend=self.backend, platform="tensorrt_plan", gpu=True)
