"""Route families: one private module each, collected in the explicit :data:`FAMILIES` dict.

``onnxruntime`` and ``openvino`` are CPU compilers, ``tensorrt`` the GPU compiler (optional extra),
``graph`` rewrites ONNX before any compiler, ``serving`` holds Triton settings. See ``_base.py`` for the
contract and ``tests/routes/conformance.py`` for the suite every family passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._graph import GraphFamily
from gpt_triton.routes._onnxruntime import OnnxRuntimeFamily
from gpt_triton.routes._openvino import OpenVinoFamily
from gpt_triton.routes._serving import ServingFamily
from gpt_triton.routes._tensorrt import TensorRtFamily

if TYPE_CHECKING:
    from gpt_triton.core.model_info import ModelInfo
    from gpt_triton.core.spec import TuneSpec

FAMILIES: dict[str, RouteFamily] = {
    "onnxruntime": OnnxRuntimeFamily(),
    "openvino": OpenVinoFamily(),
    "tensorrt": TensorRtFamily(),
    "graph": GraphFamily(),
    "serving": ServingFamily(),
}


def get_family(name: str) -> RouteFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise GptTritonError(f"unknown route family {name!r}; known families: {', '.join(FAMILIES)}") from None


def runtime_options(family: RouteFamily, route: Route, model: ModelInfo) -> dict[str, Any] | None:
    """The runtime options a route implies without building, for families that can say (else None)."""
    method = getattr(family, "runtime_options", None)
    return method(route, model) if method is not None else None


def family_table(model: ModelInfo, spec: TuneSpec) -> list[dict[str, Any]]:
    """One row per family for ``gpt-triton routes``: kind, availability, knobs, and routes per search mode."""
    from gpt_triton.search import CandidateSearch

    search = CandidateSearch(spec, model)
    counts = search.plan_counts()
    rows: list[dict[str, Any]] = []
    for name, family in FAMILIES.items():
        available, why = family.availability()
        family_spec = spec.families.get(name)
        rows.append({
            "name": name,
            "kind": family.kind,
            "runtime": family.runtime,
            "available": available,
            "reason": why,
            "enabled": family_spec.enabled if family_spec else True,
            "knobs": [k.model_dump() for k in family.knobs(model)],
            "counts": counts["families"].get(name, {}),
        })
    return rows


__all__ = [
    "FAMILIES", "Artifact", "BuildContext", "GraphFamily", "Knob", "OnnxRuntimeFamily", "OpenVinoFamily", "Route",
    "RouteFamily", "ServingFamily", "TensorRtFamily", "family_table", "get_family", "runtime_options",
]
