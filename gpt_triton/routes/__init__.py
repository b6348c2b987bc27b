"""Route families: one private module each, collected in the explicit :data:`FAMILIES` dict.

``onnxruntime`` and ``openvino`` are CPU compilers, ``tensorrt`` the GPU compiler (optional extra) and
``onnxruntime_gpu`` ONNX Runtime's CUDA / TensorRT execution providers in Triton's onnxruntime backend,
``graph`` rewrites ONNX before any compiler, ``serving`` holds Triton settings. See ``_base.py`` for the
contract and :mod:`gpt_triton.testing.conformance.families` for the suite every family passes.

This package imports nothing from the search: the search reads the families, never the other way round
(``gpt-triton routes``, which shows both, lives in :mod:`gpt_triton.routes.cli`).
"""

from __future__ import annotations

from gpt_triton.core.errors import GptTritonError
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._graph import GraphFamily
from gpt_triton.routes._onnxruntime import OnnxRuntimeFamily, OnnxRuntimeGpuFamily
from gpt_triton.routes._openvino import OpenVinoFamily
from gpt_triton.routes._serving import ServingFamily
from gpt_triton.routes._tensorrt import TensorRtFamily

FAMILIES: dict[str, RouteFamily] = {
    "onnxruntime": OnnxRuntimeFamily(),
    "openvino": OpenVinoFamily(),
    "tensorrt": TensorRtFamily(),
    "onnxruntime_gpu": OnnxRuntimeGpuFamily(),
    "graph": GraphFamily(),
    "serving": ServingFamily(),
}


def get_family(name: str) -> RouteFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise GptTritonError(f"unknown route family {name!r}; known families: {', '.join(FAMILIES)}") from None


__all__ = [
    "FAMILIES", "Artifact", "BuildContext", "GraphFamily", "Knob", "OnnxRuntimeFamily", "OnnxRuntimeGpuFamily",
    "OpenVinoFamily", "Route",
    "RouteFamily", "ServingFamily", "TensorRtFamily", "get_family",
]
