"""A real reduced-precision route: ONNX Runtime fp32 vs OpenVINO bf16 on the conv+attention model.

A tight element-wise tolerance must reject bf16 (while accepting another fp32 execution of the same
graph), and a task-level tolerance (top-1 class, cosine) must keep it: that is the case for per-output
and task metrics instead of one global threshold.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from gpt_triton.accuracy import compare_requests, eligible, synthesize_reference
from gpt_triton.core.model_info import resolve_shapes
from gpt_triton.core.spec import AccuracySpec, ToleranceSpec

OUTPUTS = ("logits", "embedding")


def _ort_outputs(path, requests, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [dict(zip(OUTPUTS, session.run(list(OUTPUTS), r), strict=True)) for r in requests]


@pytest.fixture(scope="module")
def runs(conv_attention, conv_info):
    import openvino as ov

    core = ov.Core()
    if "BF16" not in [c.upper() for c in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")]:
        pytest.skip("this CPU has no bf16 support")
    ref = synthesize_reference(conv_info, resolve_shapes(conv_info, {"images": [2, 3, 64, 64]}), 24, seed=0)
    fp32 = _ort_outputs(conv_attention, ref.inputs, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    fp32_plain = _ort_outputs(conv_attention, ref.inputs, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    compiled = core.compile_model(str(conv_attention), "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
    assert "bfloat16" in str(compiled.get_property("INFERENCE_PRECISION_HINT")).lower()
    bf16 = []
    for request in ref.inputs:
        result = compiled(request)
        bf16.append({name: np.asarray(result[port]) for port in compiled.outputs for name in port.get_names() if name in OUTPUTS})
    return ref, fp32, fp32_plain, bf16


def test_tight_tolerance_rejects_bf16_but_not_fp32(runs):
    ref, fp32, fp32_plain, bf16 = runs
    tight = AccuracySpec(default=ToleranceSpec(max_abs=1e-4))
    other_fp32 = compare_requests(fp32, fp32_plain, tight, "tuning", inputs=ref.inputs)
    assert other_fp32.passed and other_fp32.exceedances == 0 and eligible(other_fp32, tight)[0]
    rejected = compare_requests(fp32, bf16, tight, "tuning", inputs=ref.inputs)
    assert not rejected.passed and rejected.exceedances > len(ref) // 2
    worst = max(o.worst for o in rejected.outputs)
    assert 1e-4 < worst < 0.5  # bf16 changes outputs by a little, not by garbage
    assert not eligible(rejected, tight)[0]
    default = AccuracySpec()  # max_abs 1e-3 OR max_rel 1e-2 element-wise
    assert not compare_requests(fp32, bf16, default, "tuning").passed


@pytest.mark.parametrize("tolerance", [ToleranceSpec(topk=1), ToleranceSpec(cosine_min=0.999), ToleranceSpec(max_abs=0.1)])
def test_task_level_tolerance_keeps_bf16(runs, tolerance):
    ref, fp32, _, bf16 = runs
    spec = AccuracySpec(default=ToleranceSpec(), outputs={"logits": tolerance},
                        max_exceedance_bound=0.2)
    kept = compare_requests(fp32, bf16, spec, "tuning", inputs=ref.inputs)
    assert kept.passed and kept.exceedances == 0, kept.reason
    assert kept.exceedance_upper_bound == pytest.approx(1 - 0.05 ** (1 / len(ref)))
    assert kept.min_margin > 0
    ok, why = eligible(kept, spec)
    assert ok, why
    assert why == (f"0/{len(ref)} exceedances, bound {kept.exceedance_upper_bound:.3g}, "
                   f"min margin {kept.min_margin:.3g}")
    # The same result under a bound tighter than zero exceedances in len(ref) requests can show: not
    # eligible, and the reason says more reference requests would tighten it.
    strict = spec.model_copy(update={"max_exceedance_bound": kept.exceedance_upper_bound / 2})
    ok, why = eligible(kept, strict)
    assert not ok and f"exceedance bound {kept.exceedance_upper_bound:.3g}" in why and "add reference requests" in why
