"""In-process probes and the proposed mixes on the example classifier (real ONNX Runtime, OpenVINO, NNCF):
whole-graph int8 breaks top-1 agreement, int8 with stage2 kept in fp32 holds it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from gpt_triton.accuracy.reference import ReferenceSet
from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.routes import BuildContext, Route
from gpt_triton.core.spec import AccuracySpec, TuneSpec
from gpt_triton.precision import InProcessProbe, PrecisionSearch
from gpt_triton.routes import FAMILIES
from gpt_triton.runtimes import run_once
from gpt_triton.search import CandidateSearch

TOP1 = AccuracySpec.model_validate({"default": {"topk": 1}})


@pytest.fixture(scope="module")
def context(precision_mlp: Path, precision_inputs: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    calibration = tmp_path_factory.mktemp("calibration") / "calibration.npz"
    np.savez(calibration, x=precision_inputs)
    return BuildContext(model=inspect_model(precision_mlp), shapes={"x": [16, 256]}, calibration_npz=str(calibration))


@pytest.fixture(scope="module")
def tuning(precision_mlp: Path, precision_inputs: np.ndarray) -> ReferenceSet:
    inputs = [{"x": x} for x in precision_inputs]
    outputs = [run_once("onnxruntime", precision_mlp, {}, request) for request in inputs]
    return ReferenceSet(inputs=inputs, outputs=outputs, source="test")


@pytest.mark.parametrize(("family", "knobs"), [("onnxruntime", {"precision": "int8_static"}),
                                                ("openvino", {"quantization": "int8"})])
def test_int8_fails_whole_graph_and_passes_with_stage2_kept(
    family: str, knobs: dict[str, str], context: BuildContext, tuning: ReferenceSet, tmp_path: Path,
) -> None:
    probe = InProcessProbe(FAMILIES[family], knobs, context, tuning, TOP1, tmp_path)
    whole = probe(())
    assert not whole.passed and whole.exceedances == len(tuning) and whole.reason is None
    mixed = probe(("stage2",))
    assert mixed.passed and mixed.exceedances == 0 and mixed.min_margin == 1.0
    assert not any(tmp_path.iterdir())  # probes leave no files behind


def test_ort_int8_keeps_the_groups_nodes_unquantised(context: BuildContext, tmp_path: Path) -> None:
    family = FAMILIES["onnxruntime"]
    artifact = family.build(Route(family="onnxruntime", knobs={"precision": "int8_static", "fp32_groups": ["stage2"]}),
                            context, tmp_path)
    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    by_name = {n.name: n for n in graph.node}
    stage2 = [n for name, n in by_name.items() if name.startswith("/stage2/") and n.op_type in ("Gemm", "MatMul")]
    stage3 = [n for name, n in by_name.items() if name.startswith("/stage3/") and n.op_type in ("Gemm", "MatMul")]
    assert stage2 and stage3
    assert not any(n.input[1] in dequantized for n in stage2)  # fp32 weights
    # The outlier tensor inside stage2 stays fp32 (the group's first input is stage1's output, quantised there).
    assert stage2[1].input[0] not in dequantized
    assert all(n.input[0] in dequantized and n.input[1] in dequantized for n in stage3)  # lowered
    assert any("kept layer group(s) stage2" in note for note in artifact.notes)


def test_fp16_keeps_the_groups_weights_in_fp32(context: BuildContext, tmp_path: Path) -> None:
    FAMILIES["onnxruntime"].build(Route(family="onnxruntime", knobs={"precision": "fp16", "fp32_groups": ["stage2"]}),
                                  context, tmp_path)
    types = {i.name: i.data_type for i in onnx.load(str(tmp_path / "model.onnx")).graph.initializer}
    assert types["stage2.fc1.weight"] == onnx.TensorProto.FLOAT
    assert types["stage3.fc1.weight"] == onnx.TensorProto.FLOAT16


def test_search_adds_the_mix_to_its_first_batch(context: BuildContext, tuning: ReferenceSet, tmp_path: Path) -> None:
    spec = TuneSpec.model_validate({
        "search": {"mode": "fast"},
        "families": {
            "onnxruntime": {"knobs": {"precision": ["fp32", "int8_static"], "graph_optimization_level": "all",
                                      "intra_op_threads": 0, "inter_op_threads": 0, "allow_spinning": True,
                                      "execution_mode": "sequential", "enable_mem_arena": True,
                                      "enable_mem_pattern": True, "int8_activation_type": "uint8"}},
            "openvino": {"enabled": False}, "graph": {"enabled": False}, "serving": {"enabled": False},
        },
        "accuracy": {"default": {"topk": 1}},
        "precision": {"enabled": True, "lowerings": ["onnxruntime:int8_static", "openvino:int8"], "max_probes": 12},
    })
    inputs_only = ReferenceSet(inputs=tuning.inputs, source="test")  # the default route's outputs are computed
    search = PrecisionSearch(CandidateSearch(spec, context.model), spec, context, lambda: inputs_only, 0.0, tmp_path / "p")
    first = search.ask()
    mixed = [c for c in first if c.route.knobs.get("fp32_groups")]
    assert first[0].is_baseline and len(first) == 3  # the baseline (= the fp32 start), int8 whole graph, the mix
    assert [(c.family, c.route.knobs["precision"], c.route.knobs["fp32_groups"]) for c in mixed] == [
        ("onnxruntime", "int8_static", ["stage2"])]
    search.tell(first, lambda c: 1.0)  # the route search hears only of its own candidates
    assert search.ask() == []
    text = "\n".join(search.decisions)
    assert "openvino:int8: skipped, the openvino family is not searched" in text
    assert "keep [stage2]: 0/12 requests fail" in text and "-> proposed" in text
    assert "6 accuracy probes" in text  # whole graph, 4 one-group probes, one keep-back step
    assert "probe reference: the default route's outputs" in text
