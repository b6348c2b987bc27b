"""Build small but realistic ONNX models from scratch (no download, no PyTorch).

* :func:`build_conv_attention` - convolution stem, multi-head self-attention block, MLP and classifier,
  with a dynamic batch axis: the bundled demo model.
* :func:`build_resnet_cnn` - a ResNet-style CNN with BatchNorm (10-30 MB), for the route-search target.
* :func:`build_tiny_mlp` - a few-kilobyte model for fast tests.

Weights are seeded random numbers scaled like a trained network (He init, BatchNorm statistics), so
numerics and reduced-precision behaviour are representative.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _GraphBuilder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, array: np.ndarray, prefix: str = "w") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], prefix: str | None = None, **attrs: Any) -> str:
        out = self.name(prefix or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv_bn_relu(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, relu: bool = True) -> str:
        fan_in = cin * k * k
        w = (self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        y = self.op("Conv", [x, self.const(w)], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        scale = self.const((1.0 + 0.1 * self.rng.standard_normal(cout)).astype(np.float32))
        bias = self.const((0.05 * self.rng.standard_normal(cout)).astype(np.float32))
        mean = self.const((0.1 * self.rng.standard_normal(cout)).astype(np.float32))
        var = self.const((0.5 + self.rng.random(cout)).astype(np.float32))
        y = self.op("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
        return self.op("Relu", [y]) if relu else y

    def linear(self, x: str, din: int, dout: int) -> str:
        w = (self.rng.standard_normal((din, dout)) * np.sqrt(1.0 / din)).astype(np.float32)
        b = (0.01 * self.rng.standard_normal(dout)).astype(np.float32)
        return self.op("Add", [self.op("MatMul", [x, self.const(w)]), self.const(b)])

    def layer_norm(self, x: str, dim: int) -> str:
        gamma = self.const(np.ones(dim, np.float32))
        beta = self.const(np.zeros(dim, np.float32))
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], name: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gpt-triton")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def build_conv_attention(
    path: str | Path, *, image: int = 64, width: int = 64, heads: int = 4, classes: int = 10, seed: int = 0
) -> Path:
    """Conv stem (2 stride-2 conv-bn-relu) -> tokens -> pre-norm multi-head attention + MLP -> logits."""
    g = _GraphBuilder(seed)
    x = "images"
    y = g.conv_bn_relu(x, 3, width // 2, stride=2)
    y = g.conv_bn_relu(y, width // 2, width, stride=2)
    y = g.conv_bn_relu(y, width, width)
    # [N, C, H, W] -> [N, H*W, C] tokens
    tokens = g.op("Transpose", [g.op("Reshape", [y, g.const(np.array([0, width, -1], np.int64))])], perm=[0, 2, 1])
    head_dim = width // heads
    h = g.layer_norm(tokens, width)
    q, k, v = (g.linear(h, width, width) for _ in range(3))
    split_shape = g.const(np.array([0, -1, heads, head_dim], np.int64))
    qh = g.op("Transpose", [g.op("Reshape", [q, split_shape])], perm=[0, 2, 1, 3])
    kh = g.op("Transpose", [g.op("Reshape", [k, split_shape])], perm=[0, 2, 3, 1])
    vh = g.op("Transpose", [g.op("Reshape", [v, split_shape])], perm=[0, 2, 1, 3])
    scores = g.op("Mul", [g.op("MatMul", [qh, kh]), g.const(np.array(1.0 / np.sqrt(head_dim), np.float32))])
    attn = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), vh])
    merged = g.op("Reshape", [g.op("Transpose", [attn], perm=[0, 2, 1, 3]), g.const(np.array([0, -1, width], np.int64))])
    tokens = g.op("Add", [tokens, g.linear(merged, width, width)])
    h = g.layer_norm(tokens, width)
    mlp = g.linear(g.op("Relu", [g.linear(h, width, 2 * width)]), 2 * width, width)
    tokens = g.op("Add", [tokens, mlp])
    pooled = g.op("ReduceMean", [tokens], axes=[1], keepdims=0)
    features = g.op("Identity", [pooled], prefix="features")
    logits = g.linear(features, width, classes)
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    g.nodes.append(helper.make_node("Identity", [features], ["embedding"]))
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, image, image])]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]),
        helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", width]),
    ]
    model = g.model(inputs, outputs, "conv_attention")
    _calibrate_batchnorm(model, "images", [8, 3, image, image], seed)
    return _save(model, path)


def build_resnet_cnn(
    path: str | Path, *, image: int = 160, widths: tuple[int, ...] = (48, 96, 192, 384), classes: int = 100, seed: int = 0
) -> Path:
    """ResNet-style CNN: stem, one basic residual block per stage (stride 2 between stages), GAP, FC.

    With the default widths the file is about 25 MB (6.3 M parameters), about 20 ms per image on 2 cores.
    """
    g = _GraphBuilder(seed)
    y = g.conv_bn_relu("images", 3, widths[0], k=3, stride=2)
    cin = widths[0]
    for stage, cout in enumerate(widths):
        stride = 1 if stage == 0 else 2
        shortcut = y if (stride == 1 and cin == cout) else g.conv_bn_relu(y, cin, cout, k=1, stride=stride, relu=False)
        z = g.conv_bn_relu(y, cin, cout, stride=stride)
        z = g.conv_bn_relu(z, cout, cout, relu=False)
        y = g.op("Relu", [g.op("Add", [z, shortcut])])
        z = g.conv_bn_relu(y, cout, cout)
        z = g.conv_bn_relu(z, cout, cout, relu=False)
        y = g.op("Relu", [g.op("Add", [z, y])])
        cin = cout
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [y])], axis=1)
    w = (g.rng.standard_normal((cin, classes)) * np.sqrt(1.0 / cin)).astype(np.float32)
    logits = g.op("Gemm", [pooled, g.const(w), g.const(np.zeros(classes, np.float32))])
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    g.nodes.append(helper.make_node("Softmax", [logits], ["probabilities"], axis=1))
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, image, image])]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]),
        helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", classes]),
    ]
    model = g.model(inputs, outputs, "resnet_cnn")
    _calibrate_batchnorm(model, "images", [4, 3, image, image], seed)
    return _save(model, path)


def build_tiny_mlp(path: str | Path, *, features: int = 16, hidden: int = 32, classes: int = 4, seed: int = 0) -> Path:
    """Two-layer MLP with a dynamic batch axis: kilobytes, milliseconds to build and serve."""
    g = _GraphBuilder(seed)
    h = g.op("Relu", [g.linear("x", features, hidden)])
    out = g.linear(h, hidden, classes)
    g.nodes.append(helper.make_node("Identity", [out], ["y"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", classes])]
    return _save(g.model(inputs, outputs, "tiny_mlp"), path)


def _calibrate_batchnorm(model: onnx.ModelProto, input_name: str, shape: list[int], seed: int = 0) -> None:
    """Set every BatchNorm's running mean/variance to the statistics of its input, layer by layer.

    That is what training leaves behind: activations stay O(1) through the network, so outputs are not
    saturated and reduced-precision routes show realistic (not degenerate) error.
    """
    import onnxruntime as ort

    inits = {init.name: init for init in model.graph.initializer}
    sample = np.random.default_rng(seed).random(shape, dtype=np.float32)
    for node in [n for n in model.graph.node if n.op_type == "BatchNormalization"]:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        probe.graph.output.append(helper.make_empty_tensor_value_info(node.input[0]))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        activation = session.run([node.input[0]], {input_name: sample})[0]
        mean = activation.mean(axis=(0, 2, 3)).astype(np.float32)
        var = activation.var(axis=(0, 2, 3)).astype(np.float32) + 1e-3
        inits[node.input[3]].CopyFrom(numpy_helper.from_array(mean, node.input[3]))
        inits[node.input[4]].CopyFrom(numpy_helper.from_array(var, node.input[4]))


def _save(model: onnx.ModelProto, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(path)
    return path
