"""A classifier whose one block breaks reduced precision, and its confidently classified reference data.

``precision_mlp.onnx`` (deterministic weights, no download): ``x [batch, 256] -> logits [batch, 10]``, an MLP
in four named stages (``/stage1/...``, ``/stage2/...``, ``/stage3/...``, ``/head/...``). ``stage2``'s first
layer gives one channel a weight column 3000x the others, so that channel's activation reaches ~5e4 while
the others stay below ~4 (an outlier channel, as large language and vision models have); the next layer
ignores the channel (a zero weight row), so the fp32 model never sees it. Whole-graph int8 calibrates one
activation scale per tensor: the outlier sets it (~200 per step), every other channel of that tensor rounds
to zero and the logits stop depending on the input (top-1 agreement collapses). Keeping ``stage2`` in fp32
and lowering the rest keeps the classes. (Hidden width 2048: the engine, not the serving path, dominates the
served latency; the tests build it at width 1024.)

``precision_mlp_reference.npz``: requests of 64 samples drawn U(0,1) and kept only when the fp32 model's
top-1 logit beats the runner-up by ``MIN_GAP`` (a validation set of confidently classified samples, as a
real classifier's would be): int8's logit error elsewhere (~0.1 here) then leaves every class unchanged.

Run: ``python examples/precision_model.py [OUT_DIR]`` (also called by ``examples/make_models.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

D_IN, WIDTH, CLASSES = 256, 2048, 10
BATCH = 64
OUTLIER_SCALE = 3000.0  # within onnxconverter-common's clamp (1e4), so fp16 conversion keeps the weight
MIN_GAP = 0.5
REQUESTS = 48


def build_precision_mlp(path: str | Path, seed: int = 0, width: int = WIDTH) -> Path:
    """Write the classifier to ``path`` (parents created) and return the path. ``width``: the hidden layers'
    (``stage2`` narrows to a quarter of it); the default makes the engine, not serving, dominate latency."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def dense(stage: str, name: str, x: str, din: int, dout: int, *, relu: bool = True,
              outlier_column: bool = False, ignore_first_row: bool = False) -> str:
        weight = (rng.standard_normal((din, dout)) * np.sqrt(2.0 / din)).astype(np.float32)
        if outlier_column:
            weight[:, 0] = np.abs(weight[:, 0]) * OUTLIER_SCALE
        if ignore_first_row:
            weight[0, :] = 0.0
        bias = (rng.standard_normal(dout) * 0.01).astype(np.float32)
        prefix = f"/{stage}/{name}"
        inits.extend([numpy_helper.from_array(weight, f"{stage}.{name}.weight"),
                      numpy_helper.from_array(bias, f"{stage}.{name}.bias")])
        nodes.append(helper.make_node("MatMul", [x, f"{stage}.{name}.weight"], [f"{prefix}/MatMul_output_0"],
                                      name=f"{prefix}/MatMul"))
        nodes.append(helper.make_node("Add", [f"{prefix}/MatMul_output_0", f"{stage}.{name}.bias"],
                                      [f"{prefix}/Add_output_0"], name=f"{prefix}/Add"))
        if not relu:
            return f"{prefix}/Add_output_0"
        nodes.append(helper.make_node("Relu", [f"{prefix}/Add_output_0"], [f"{prefix}/Relu_output_0"], name=f"{prefix}/Relu"))
        return f"{prefix}/Relu_output_0"

    narrow = width // 4
    h = dense("stage1", "fc1", "x", D_IN, width)
    h = dense("stage1", "fc2", h, width, width)
    h = dense("stage2", "fc1", h, width, narrow, outlier_column=True)
    h = dense("stage2", "fc2", h, narrow, width, ignore_first_row=True)
    h = dense("stage3", "fc1", h, width, width)
    h = dense("stage3", "fc2", h, width, width)
    logits = dense("head", "fc", h, width, CLASSES, relu=False)
    nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/head/Identity"))
    graph = helper.make_graph(
        nodes, "precision_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D_IN])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="gpt-triton examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    onnx.save(model, str(tmp))
    tmp.replace(out)
    return out


def build_reference(model_path: str | Path, path: str | Path, requests: int = REQUESTS, batch: int = BATCH,
                    seed: int = 1) -> Path:
    """Inputs only (``x``: ``[requests, batch, 256]``): samples whose fp32 top-1 gap is at least ``MIN_GAP``."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    kept: list[np.ndarray] = []
    need = requests * batch
    while sum(len(k) for k in kept) < need:
        x = rng.random((4096, D_IN), dtype=np.float32)
        logits = session.run(["logits"], {"x": x})[0]
        top2 = np.sort(logits, axis=1)[:, -2:]
        kept.append(x[top2[:, 1] - top2[:, 0] >= MIN_GAP])
    x = np.concatenate(kept)[:need].reshape(requests, batch, D_IN)
    out = Path(path)
    tmp = out.with_name(out.stem + ".part.npz")
    np.savez(tmp, x=x)
    tmp.replace(out)
    return out


def main(out_dir: str = "examples/models") -> None:
    model = build_precision_mlp(Path(out_dir) / "precision_mlp.onnx")
    reference = build_reference(model, Path(out_dir) / "precision_mlp_reference.npz")
    for path in (model, reference):
        print(f"{path} ({path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main(*sys.argv[1:2])
