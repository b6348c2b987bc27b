"""Task metrics (examples/task_metrics.py) and the issue evidence: real reduced-precision routes of the
ResNet-style CNN, served by a real Triton, judged by per-output tolerances and task metrics
(benchmarks/accuracy_routes.py)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from gpt_triton.accuracy import compare_requests, eligible
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.spec import AccuracySpec, ToleranceSpec
from gpt_triton.runtimes import OpenVino

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def on_path() -> Iterator[None]:
    """The repository root on sys.path, as a user puts their metrics module on PYTHONPATH."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        yield


@pytest.fixture(scope="module")
def tm(on_path: None) -> ModuleType:
    return importlib.import_module("examples.task_metrics")


# ---------------------------------------------------------------------------------------------- top-1


def test_top1_agreement_counts_samples_and_passes_only_when_all_agree(tm: ModuleType) -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 10)).astype(np.float32)
    assert tm.top1_agreement({}, {"logits": ref}, {"logits": ref.copy()}) == (1.0, True)
    cand = ref.copy()
    cand[2, (ref[2].argmax() + 1) % 10] = ref[2].max() + 1.0  # one sample of four changes class
    assert tm.top1_agreement({}, {"logits": ref}, {"logits": cand}) == (0.75, False)
    # Small changes that keep every argmax are not a disagreement, however many elements move.
    assert tm.top1_agreement({}, {"logits": ref}, {"logits": ref + 1e-3})[1]


def test_top1_prefers_the_classifier_output_and_rejects_shape_changes(tm: ModuleType) -> None:
    logits = np.array([[0.0, 2.0, 1.0]], dtype=np.float32)
    other = np.array([[5.0, 0.0, 0.0]], dtype=np.float32)
    ref = {"embedding": other, "logits": logits}
    cand = {"embedding": other[:, ::-1].copy(), "logits": logits}  # only the non-classifier output changed
    assert tm.top1_agreement({}, ref, cand) == (1.0, True)
    with pytest.raises(ValueError, match="shape"):
        tm.top1_agreement({}, {"logits": logits}, {"logits": logits[:, :2]})


def test_top1_as_a_spec_task_metric_counts_exceedances(on_path: None) -> None:
    ref = [{"logits": np.eye(3, dtype=np.float32)[[i]]} for i in range(3)]
    cand = [dict(r) for r in ref]
    cand[1] = {"logits": np.eye(3, dtype=np.float32)[[2]]}
    spec = AccuracySpec(default=ToleranceSpec(), task_metric="examples.task_metrics:top1_agreement")
    result = compare_requests(ref, cand, spec, "tuning")
    assert result.exceedances == 1 and not result.passed
    assert "task metric examples.task_metrics:top1_agreement failed request 1" in (result.reason or "")
    assert not eligible(result, spec)[0]
    with pytest.raises(GptTritonError, match="has no function"):
        compare_requests(ref, cand, AccuracySpec(task_metric="examples.task_metrics:nope"), "tuning")


# ---------------------------------------------------------------------------------------------- detection


def _map_with_boxes(boxes: list[tuple[int, int, int, int]], size: int = 32) -> np.ndarray:
    scores = np.zeros((size, size), dtype=np.float32)
    for y0, x0, y1, x1 in boxes:
        scores[y0:y1, x0:x1] = 0.9
    return scores


def test_decode_detections_from_maps_and_from_class_scores(tm: ModuleType) -> None:
    found = tm.decode_detections(_map_with_boxes([(2, 3, 6, 9), (20, 20, 30, 25)]), threshold=0.5)
    assert sorted((d.lo, d.hi) for d in found) == [((2, 3), (6, 9)), ((20, 20), (30, 25))]
    per_channel = tm.decode_detections(np.stack([_map_with_boxes([(0, 0, 4, 4)]), _map_with_boxes([])]), 0.5)
    assert [d.channel for d in per_channel] == [(0,)]
    classes = tm.decode_detections(np.array([-1.0, 0.3, 0.0, 2.0]), threshold=0.0)
    assert [d.lo for d in classes] == [(1,), (3,)]  # strictly above the threshold


def test_match_f1_uses_iou_one_to_one(tm: ModuleType) -> None:
    det = tm.Detection
    a = det((), (0, 0), (10, 10))
    assert tm.match_f1([a], [det((), (0, 1), (10, 11))], iou_min=0.5) == 1.0  # IoU 90/110
    assert tm.match_f1([a], [det((), (0, 6), (10, 16))], iou_min=0.5) == 0.0  # IoU 40/160
    assert tm.match_f1([a], [det((1,), (0, 0), (10, 10))], iou_min=0.5) == 0.0  # another class never matches
    assert tm.match_f1([a], [a, a], iou_min=0.5) == pytest.approx(2 / 3)  # a duplicate is a false positive
    assert tm.match_f1([], [], iou_min=0.5) == 1.0 and tm.match_f1([a], [], iou_min=0.5) == 0.0


def test_detection_metric_on_score_maps(tm: ModuleType) -> None:
    metric = tm.make_detection_metric("prob_map", threshold=0.5, iou_min=0.5)
    ref = np.stack([_map_with_boxes([(2, 2, 10, 10), (20, 20, 28, 28)]), _map_with_boxes([(5, 5, 9, 9)])])
    jitter = ref + np.float32(0.05) * np.sign(np.random.default_rng(1).standard_normal(ref.shape)).astype(np.float32)
    assert metric({}, {"prob_map": ref}, {"prob_map": jitter}) == (1.0, True)  # no pixel crosses 0.5
    lost = ref.copy()
    lost[0, 20:28, 20:28] = 0.2  # the candidate misses one box of sample 0
    score, passed = metric({}, {"prob_map": ref}, {"prob_map": lost})
    assert not passed and score == pytest.approx((2 / 3 + 1.0) / 2)
    with pytest.raises(ValueError, match="iou_min"):
        tm.make_detection_metric(iou_min=0.0)


def test_logit_detections_flag_a_logit_crossing_zero(tm: ModuleType) -> None:
    ref = {"logits": np.array([[1.0, -0.5, 0.01, -2.0]], dtype=np.float32)}
    assert tm.logit_detections_agree({}, ref, {"logits": ref["logits"] + 0.005})[1]
    score, passed = tm.logit_detections_agree({}, ref, {"logits": ref["logits"] - 0.02})  # 0.01 -> -0.01
    assert not passed and score == pytest.approx(2 * 1 / 3)


# ---------------------------------------------------------------------------------------------- routes


@pytest.fixture(scope="module")
def bench(on_path: None) -> ModuleType:
    return importlib.import_module("benchmarks.accuracy_routes")


@pytest.fixture(scope="module")
def outcome(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("openvino")
    # Smaller images, fewer requests and a narrower network than the benchmark: the same ResNet-style CNN
    # (same depth, residual blocks, classifier) at widths 16-128, 2.9 MB instead of 25 MB, which builds,
    # quantizes and loads in a fraction of the time. The routes are the benchmark's except the second fp32
    # ONNX Runtime route (OpenVINO f32 already is the "fp32, different engine" case). Reduced precision
    # still moves the logits far outside the tight tolerance (int8 by about 0.2, fp16 by about 1e-2, int8
    # cosine about 0.997), fp32 routes stay within 1e-5.
    candidates = [c for c in bench.CANDIDATES if c[0] != "ort-fp32-basic"]
    return bench.run(tmp_path_factory.mktemp("acc_routes"), image=64, requests=24, candidates=candidates,
                     latency_rounds=3, log=lambda line: print(line, file=sys.stderr), widths=(16, 32, 64, 128))


REDUCED = ("ort-fp16", "ort-int8-dynamic", "ort-int8-static", "ov-bf16", "ov-int8")
FP32 = ("ort-fp32", "ov-f32")


@pytest.mark.slow
def test_tight_tolerance_rejects_reduced_precision_and_keeps_fp32(bench: ModuleType, outcome: Any) -> None:
    assert outcome.mode == "triton", "the server and deploy modules exist, so outputs must come through Triton"
    rows = {r.id: r for r in outcome.rows}
    assert not [r.error for r in rows.values() if r.error]
    tight = bench.SPECS["tight"]
    for cid in FP32:
        result = rows[cid].results["tight"]
        assert rows[cid].verdicts["tight"][0], rows[cid].verdicts["tight"][1]
        assert result.exceedances == 0 and result.min_margin >= tight.min_margin
        assert result.exceedance_upper_bound == pytest.approx(1 - 0.05 ** (1 / outcome.tuning_requests))
    assert rows["ov-f32"].max_abs < 1e-4  # fp32 on another engine: re-association only
    # OpenVINO's bf16 hint is reduced precision only on a CPU that computes bf16; elsewhere it runs in f32
    # and must pass like any fp32 route.
    bf16 = "BF16" in OpenVino().precisions()
    for cid in REDUCED:
        result = rows[cid].results["tight"]
        if cid == "ov-bf16" and not bf16:
            assert rows[cid].verdicts["tight"][0] and rows[cid].max_abs < 1e-4, rows[cid].verdicts["tight"][1]
            continue
        assert not rows[cid].verdicts["tight"][0]
        assert result.exceedances > 0 and result.min_margin < 0 and result.reason
    # Reduced precision is a small perturbation, graded by format: fp16 < bf16 < int8.
    int8 = min(rows[c].max_abs for c in REDUCED if "int8" in c)
    if bf16:
        assert rows["ort-fp16"].max_abs < rows["ov-bf16"].max_abs < int8 < 1.0
    else:
        assert rows["ov-bf16"].max_abs < rows["ort-fp16"].max_abs < int8 < 1.0
    # Cosine keeps the float formats and rejects int8 routes.
    assert rows["ort-fp16"].verdicts["cosine"][0] and rows["ov-f32"].verdicts["cosine"][0]
    assert not any(rows[c].verdicts["cosine"][0] for c in REDUCED if "int8" in c)


@pytest.mark.slow
def test_report_pareto_and_heldout_acceptance(bench: ModuleType, outcome: Any) -> None:
    text = bench.format_outcome(outcome)
    print(text, file=sys.stderr)  # the evidence, in the test log (pytest -s)
    for row in outcome.rows:
        for key in bench.SPECS:
            res = row.results[key]
            assert f"{row.id:<17}{res.exceedances:>4}/{res.requests:<3}{res.exceedance_upper_bound:>11.3f}" in text
    # The Pareto set: no member is dominated, every non-member is.
    points = {r.id: (r.latency_ms, r.tolerance_used()) for r in outcome.rows}

    def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] <= b[0] and a[1] <= b[1] and a != b

    assert outcome.pareto_tight
    for cid, point in points.items():
        beaten = any(dominates(other, point) for other in points.values())
        assert beaten == (cid not in outcome.pareto_tight)
    # The held-out split was opened once, after selection, for the candidate selection chose.
    if outcome.accepted is None:
        assert outcome.heldout_log == []
    else:
        chosen = next(r for r in outcome.rows if r.id == outcome.accepted)
        assert chosen.verdicts[bench.ACCEPT_SPEC][0]
        assert len(outcome.heldout_log) == 1 and outcome.acceptance.split == "heldout"
        assert outcome.acceptance.requests == outcome.heldout_requests
