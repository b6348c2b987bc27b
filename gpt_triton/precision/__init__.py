"""Precision searched per layer group under the task tolerance.

A reduced-precision route (ONNX Runtime int8 static QDQ or fp16, NNCF int8 in OpenVINO) lowers the whole
graph, and is all or nothing: one sensitive block makes it infeasible. This stage finds, on the **tuning**
split only and in-process (accuracy only: cheap), which layer groups (:mod:`gpt_triton.routes._precision_groups`)
must stay in fp32, and proposes each mix that holds the task tolerance as a candidate route of its family (the
``fp32_groups`` knob), which the run then builds, screens, measures and races like any other.

``_sensitivity`` is the search (pure over a probe); ``_step`` holds the in-process probe and
:class:`PrecisionSearch`, the run's candidate search with the mixes added to its first batch.
"""

from __future__ import annotations

from gpt_triton.precision._sensitivity import ProbeBudget, ProbeResult, SensitivityResult, sensitivity_search
from gpt_triton.precision._step import LOWERINGS, InProcessProbe, PrecisionSearch, tightened

__all__ = [
    "LOWERINGS", "InProcessProbe", "PrecisionSearch", "ProbeBudget", "ProbeResult", "SensitivityResult",
    "sensitivity_search", "tightened",
]
