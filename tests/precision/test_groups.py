"""Layer groups: name-prefix blocks where names carry them, else contiguous chunks of comparable cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpt_triton.core.errors import GptTritonError
from gpt_triton.routes._precision_groups import group_nodes, layer_groups, load_groups, name_unnamed_nodes


def _chain(names: list[str]) -> onnx.ModelProto:
    """x -> MatMul(w_0) -> MatMul(w_1) ...: one MatMul with a 4x4 weight per name (empty: left unnamed)."""
    nodes, inits, x = [], [], "x"
    for i, name in enumerate(names):
        inits.append(numpy_helper.from_array(np.ones((4, 4), np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"t{i}"], name=name))
        x = f"t{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph)


def test_example_model_groups_follow_its_stages(precision_mlp: Path) -> None:
    groups = load_groups(precision_mlp)
    assert [g.name for g in groups] == ["stage1", "stage2", "stage3", "head"]
    assert groups[1].nodes == ("/stage2/fc1/MatMul", "/stage2/fc1/Add", "/stage2/fc1/Relu",
                               "/stage2/fc2/MatMul", "/stage2/fc2/Add", "/stage2/fc2/Relu")
    # Costs are weight elements: stage3 (two 1024x1024 layers) outweighs stage2 (two 1024x256 ones).
    assert groups[2].cost > 3 * groups[1].cost


def test_torch_style_dotted_names_group_by_block() -> None:
    names = ["layer1.0.conv1", "layer1.0.conv2", "layer2.0.conv1", "layer2.0.conv2", "fc.MatMul"]
    groups = layer_groups(_chain(names))
    assert [g.name for g in groups] == ["layer1", "layer2", "fc"]


def test_unnamed_graph_falls_back_to_contiguous_chunks_covering_every_node_once() -> None:
    model = _chain([""] * 10)
    groups = layer_groups(model, max_groups=3)
    assert [g.name for g in groups] == ["chunk0", "chunk1", "chunk2"]
    flat = [n for g in groups for n in g.nodes]
    assert flat == [node.name for node in model.graph.node] == [f"MatMul_{i}" for i in range(10)]
    sizes = [len(g.nodes) for g in groups]
    assert max(sizes) - min(sizes) <= 1  # equal weights: comparable chunks


def test_too_many_prefixes_fall_back_to_chunks() -> None:
    model = _chain([f"/block{i}/MatMul" for i in range(12)])
    groups = layer_groups(model, max_groups=4)
    assert [g.name for g in groups] == ["chunk0", "chunk1", "chunk2", "chunk3"]


def test_naming_is_stable_and_keeps_existing_names() -> None:
    model = _chain(["", "MatMul_0", ""])
    assert name_unnamed_nodes(model) == 2
    assert [n.name for n in model.graph.node] == ["MatMul_0_", "MatMul_0", "MatMul_2"]
    assert name_unnamed_nodes(model) == 0


def test_unknown_group_is_one_clear_error(precision_mlp: Path) -> None:
    groups = load_groups(precision_mlp)
    assert group_nodes(groups, ["head"]) == ["/head/fc/MatMul", "/head/fc/Add", "/head/Identity"]
    with pytest.raises(GptTritonError, match=r"unknown layer group\(s\) \['stage9'\].*stage1, stage2, stage3, head"):
        group_nodes(groups, ["stage9"])
