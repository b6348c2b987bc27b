"""Comparisons on constructed arrays: each metric, NaN/Inf, mismatches, task metric, margins, policy."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.accuracy.compare import (
    abs_or_rel_error,
    compare_requests,
    cosine_similarity,
    eligible,
    iou,
    load_task_metric,
    max_abs_error,
    max_rel_error,
    mean_abs_error,
    pareto_front,
    rmse,
    topk_agreement,
)
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.spec import AccuracySpec, ToleranceSpec


def _spec(**tol) -> AccuracySpec:
    return AccuracySpec(default=ToleranceSpec(**tol))


def _reqs(arrays):
    return [{"y": np.asarray(a, dtype=np.float32)} for a in arrays]


def test_elementwise_metrics_on_constructed_arrays():
    r = np.array([[1.0, -2.0, 0.0, 4.0]], np.float32)
    c = np.array([[1.5, -2.0, 0.0, 3.0]], np.float32)
    assert max_abs_error(r, c) == pytest.approx(1.0)
    assert max_rel_error(r, c, 1e-6) == pytest.approx(0.5, rel=1e-5)  # 0.5 / 1.0 beats 1.0 / 4.0
    assert mean_abs_error(r, c) == pytest.approx(1.5 / 4)
    assert rmse(r, c) == pytest.approx(np.sqrt((0.25 + 1.0) / 4))
    assert cosine_similarity(r, r * 3) == pytest.approx(1.0)
    assert cosine_similarity(r, -r) == pytest.approx(-1.0)
    assert cosine_similarity(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(0.0)
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0 and cosine_similarity(np.zeros(3), np.ones(3)) == 0.0
    # near zero: tiny absolute change, huge relative change; abs_or_rel lets the element pass on abs
    rz, cz = np.array([1e-7, 100.0]), np.array([2e-7, 100.5])
    assert max_rel_error(rz, cz, 1e-9) > 0.9
    assert abs_or_rel_error(rz, cz, atol=1e-3, rtol=1e-2) == pytest.approx(0.5 / 1.0, rel=1e-4)
    assert abs_or_rel_error(rz, cz, atol=1e-3, rtol=1e-3) == pytest.approx(0.5 / 0.1, rel=1e-4)


def test_topk_and_iou():
    ref = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1]])
    swapped = np.array([[0.9, 0.1, 0.0], [0.8, 0.1, 0.1]])
    assert topk_agreement(ref, ref, 1) == 1.0
    assert topk_agreement(ref, swapped, 1) == 0.5
    assert topk_agreement(ref, swapped, 2) == 1.0
    a = np.zeros((8, 8))
    b = np.zeros((8, 8))
    a[:4, :] = 0.9  # 32 pixels
    b[2:6, :] = 0.9  # 32 pixels, 16 shared
    assert iou(a, b, 0.5) == pytest.approx(16 / 48)
    assert iou(a, a, 0.5) == 1.0 and iou(np.zeros(4), np.zeros(4), 0.5) == 1.0


def test_max_abs_passes_but_topk_fails_and_the_reverse():
    ref = _reqs([[[0.5000, 0.5001, 0.0]]])
    close_but_flipped = _reqs([[[0.5001, 0.5000, 0.0]]])
    far_but_same_class = _reqs([[[0.0, 5.0, 0.0]]])
    assert compare_requests(ref, close_but_flipped, _spec(max_abs=1e-3), "tuning").passed
    flipped = compare_requests(ref, close_but_flipped, _spec(topk=1), "tuning")
    assert not flipped.passed and flipped.exceedances == 1 and "top1" in (flipped.reason or "")
    assert compare_requests(ref, far_but_same_class, _spec(topk=1), "tuning").passed
    far = compare_requests(ref, far_but_same_class, _spec(max_abs=1e-3), "tuning")
    assert not far.passed and far.outputs[0].worst == pytest.approx(4.4999, rel=1e-4)


@pytest.mark.parametrize(("bad", "word"), [(np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")])
def test_non_finite_candidate_fails_naming_output_and_request(bad, word):
    ref = _reqs([[1.0, 2.0]] * 4)
    cand = _reqs([[1.0, 2.0]] * 4)
    cand[2]["y"][0] = bad
    result = compare_requests(ref, cand, _spec(max_abs=1e9), "tuning")
    assert not result.passed and result.reason == f"output y has {word} in request 2"
    assert result.exceedance_upper_bound == 1.0
    assert eligible(result, _spec(max_abs=1e9)) == (False, f"output y has {word} in request 2")


def test_shape_dtype_and_missing_output_fail_with_reason():
    ref = _reqs([[1.0, 2.0]])
    assert "has shape [3]" in (compare_requests(ref, _reqs([[1.0, 2.0, 3.0]]), _spec(max_abs=1), "tuning").reason or "")
    cand64 = [{"y": np.array([1.0, 2.0], np.float64)}]
    assert "dtype float64" in (compare_requests(ref, cand64, _spec(max_abs=1), "tuning").reason or "")
    missing = compare_requests(ref, [{"z": np.zeros(2, np.float32)}], _spec(max_abs=1), "tuning")
    assert missing.reason == "output y is missing from the answer to request 0" and not missing.passed
    with pytest.raises(GptTritonError, match="reference output y has NaN or Inf in request 0"):
        compare_requests(_reqs([[np.nan]]), _reqs([[1.0]]), _spec(max_abs=1), "tuning")
    with pytest.raises(GptTritonError, match="accuracy.outputs names unknown output 'logits'"):
        compare_requests(ref, ref, AccuracySpec(outputs={"logits": ToleranceSpec(max_abs=1)}), "tuning")


def test_statistics_margins_and_per_output_tolerances():
    ref = [{"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)} for _ in range(10)]
    cand = [{"a": np.full(4, 0.01 * i, np.float32), "b": np.ones(4, np.float32)} for i in range(10)]
    spec = AccuracySpec(default=ToleranceSpec(max_abs=1.0), outputs={"a": ToleranceSpec(max_abs=0.055)})
    result = compare_requests(ref, cand, spec, "tuning")
    a = next(o for o in result.outputs if o.output == "a")
    b = next(o for o in result.outputs if o.output == "b")
    assert a.tolerance == 0.055 and a.metric == "max_abs"
    assert a.worst == pytest.approx(0.09, rel=1e-6) and a.exceedances == 4  # 0.06 .. 0.09
    assert a.quantile == pytest.approx(np.quantile([0.01 * i for i in range(10)], 0.99), rel=1e-5)
    assert a.margin == pytest.approx((0.055 - 0.09) / 0.055, rel=1e-4) and a.margin < 0
    assert b.margin == pytest.approx(1.0) and b.exceedances == 0
    assert result.exceedances == 4 and not result.passed and result.min_margin == a.margin
    assert result.reason is not None and "output a max_abs 0.09 > 0.055 in request 9" in result.reason
    # passing direction for a similarity: headroom on 1 - cosine
    cos = compare_requests(_reqs([[1.0, 0.0]]), _reqs([[1.0, 0.1]]), _spec(cosine_min=0.99), "tuning")
    cosine = 1 / np.sqrt(1.01)
    assert cos.passed and cos.outputs[0].margin == pytest.approx((0.01 - (1 - cosine)) / 0.01, rel=1e-4)
    assert cos.outputs[0].margin > 0
    bad_cos = compare_requests(_reqs([[1.0, 0.0]]), _reqs([[1.0, 0.5]]), _spec(cosine_min=0.99), "tuning")
    assert bad_cos.outputs[0].margin < 0 and not bad_cos.passed


def test_task_metric_via_a_module(tmp_path, monkeypatch):
    (tmp_path / "acc_task_mod.py").write_text(
        "import numpy as np\n"
        "def agree(inputs, ref, cand):\n"
        "    score = float(np.mean(np.argmax(ref['y'], -1) == np.argmax(cand['y'], -1)))\n"
        "    return score + inputs['offset'], score == 1.0\n"
        "def broken(inputs, ref, cand):\n"
        "    raise ValueError('boom')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = _reqs([[[0.0, 1.0]], [[1.0, 0.0]], [[0.0, 1.0]]])
    cand = _reqs([[[0.0, 1.0]], [[0.0, 1.0]], [[0.0, 1.0]]])
    inputs = [{"offset": np.zeros(())}] * 3
    spec = AccuracySpec(default=ToleranceSpec(), task_metric="acc_task_mod:agree")
    result = compare_requests(ref, cand, spec, "heldout", inputs=inputs)
    task = result.outputs[0]
    assert task.metric == "task:acc_task_mod:agree" and task.exceedances == 1 and task.worst == 0.0
    assert result.split == "heldout" and result.exceedances == 1 and not result.passed
    assert "task metric acc_task_mod:agree failed request 1" in (result.reason or "")
    with pytest.raises(GptTritonError, match="failed on request 0 .ValueError: boom"):
        compare_requests(ref, cand, AccuracySpec(default=ToleranceSpec(), task_metric="acc_task_mod:broken"), "tuning")
    for bad, message in [("nocolon", "must be module:function"), ("no_such_mod_xyz:f", "cannot import no_such_mod_xyz"),
                         ("acc_task_mod:missing", "has no function missing")]:
        with pytest.raises(GptTritonError, match=message):
            load_task_metric(bad)


def test_eligibility_policy():
    ref = _reqs([[0.0]] * 20)
    cand = _reqs([[0.0]] * 19 + [[1.0]])
    strict = _spec(max_abs=0.5)
    one_bad = compare_requests(ref, cand, strict, "tuning")
    ok, why = eligible(one_bad, strict)
    assert not ok and "exceedance rate 0.05 > allowed 0" in why
    lenient = AccuracySpec(default=ToleranceSpec(max_abs=0.5), max_exceedance_rate=0.1)
    allowed = compare_requests(ref, cand, lenient, "tuning")
    assert allowed.passed and eligible(allowed, lenient)[0]
    bounded = lenient.model_copy(update={"max_exceedance_bound": 0.1})
    ok, why = eligible(compare_requests(ref, cand, bounded, "tuning"), bounded)
    assert not ok and "exceedance bound 0.216" in why  # Clopper-Pearson upper bound of 1/20 at 95%
    clean = compare_requests(ref, _reqs([[0.3]] * 20), strict, "tuning")
    assert eligible(clean, strict)[0]
    demanding = strict.model_copy(update={"min_margin": 0.5})
    ok, why = eligible(clean, demanding)
    assert not ok and "margin 0.4 to the tolerance < required 0.5" in why


def test_pareto_front():
    points = [("a", 10.0, 0.01), ("b", 5.0, 0.02), ("c", 6.0, 0.03), ("d", 20.0, 0.0), ("e", 5.0, 0.05),
              ("f", float("nan"), 0.0)]
    assert pareto_front(points) == ["b", "a", "d"]
    assert pareto_front([]) == []
