"""Models for the fake-TensorRT tests: small ONNX graphs built here (no download)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.fixture(scope="session")
def static_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model without dynamic dims: input "x" [2, 16] -> MatMul -> Relu -> output "y" [2, 4]."""
    w = numpy_helper.from_array(np.ones((16, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"), helper.make_node("Relu", ["h"], ["y"])],
        "static", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _save(model, tmp_path_factory.mktemp("static") / "static.onnx")


@pytest.fixture(scope="session")
def half_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dynamic-batch fp16 model (input "images" [N, 3, 8, 8] float16 -> Relu -> "out"), as 11.x precision works."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["images"], ["out"], name="relu")], "half",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT16, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT16, ["N", 3, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _save(model, tmp_path_factory.mktemp("half") / "half.onnx")
