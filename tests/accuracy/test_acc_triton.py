"""Validation and capture through a real Triton (the embedded tritonserver with a python-backend model)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from gpt_triton.accuracy import (
    ReferenceSet,
    infer_requests,
    load_reference,
    synthesize_reference,
)
from gpt_triton.accuracy.served import accept, screen, served_reference
from gpt_triton.cli import main
from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.records import Candidate, DeployInfo
from gpt_triton.core.routes import Route
from gpt_triton.core.spec import AccuracySpec, ToleranceSpec

pytestmark = pytest.mark.slow

MODEL_PY = '''
import os
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {i.name: pb_utils.get_input_tensor_by_name(request, i.name).as_numpy() for i in self.session.get_inputs()}
            values = self.session.run(self.outputs, feeds)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(n, v) for n, v in zip(self.outputs, values)]))
        return responses
'''

CONFIG = '''
name: "mlp"
backend: "python"
max_batch_size: 8
dynamic_batching { }
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_mlp):
    from gpt_triton.server import EmbeddedTriton

    root = tmp_path_factory.mktemp("triton")
    model_dir = root / "src" / "mlp"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(CONFIG)
    (model_dir / "1" / "model.py").write_text(MODEL_PY)
    shutil.copy(tiny_mlp, model_dir / "1" / "model.onnx")
    with EmbeddedTriton(repository=root / "repo", workdir=root / "work") as server:
        server.load(model_dir)
        yield server


@pytest.fixture(scope="module")
def mlp_reference(tiny_mlp):
    info = inspect_model(tiny_mlp)
    shapes = resolve_shapes(info, {"x": [3, 16]})
    ref = synthesize_reference(info, shapes, 12, seed=5)
    session = ort.InferenceSession(str(tiny_mlp), providers=["CPUExecutionProvider"])
    return info, shapes, ref.with_outputs([{"y": session.run(["y"], r)[0]} for r in ref.inputs])


def test_infer_requests_matches_in_process(served, mlp_reference):
    _, _, ref = mlp_reference
    answers = infer_requests(served.grpc_url, "mlp", ref.inputs, ["y"], max_in_flight=4)
    assert len(answers) == len(ref)
    for got, want in zip(answers, ref.outputs or [], strict=True):
        assert got["y"].shape == want["y"].shape == (3, 4)
        np.testing.assert_allclose(got["y"], want["y"], atol=1e-5)


def _deployed(cid: str, model_name: str) -> Candidate:
    return Candidate(id=cid, family="onnxruntime", route=Route(family="onnxruntime"), serving=Route(family="serving"),
                     status="deployed", deploy=DeployInfo(model_name=model_name, backend="python", adapter=True))


def test_screening_through_triton(served, mlp_reference):
    _, _, ref = mlp_reference
    tight = AccuracySpec(default=ToleranceSpec(max_abs=1e-5))
    good, missing = _deployed("good", "mlp"), _deployed("missing", "nope")
    ok, gone = screen(served.grpc_url, [good, missing], ref, tight, ["y"])
    assert ok.status == "deployed" and ok.accuracy is not None and ok.reason is None
    assert ok.accuracy.passed and ok.accuracy.split == "tuning" and ok.accuracy.requests == 12
    assert ok.accuracy.exceedances == 0
    # An engine that errors at inference is a failed route, with the server's reason.
    assert gone.status == "failed" and "nope" in (gone.reason or "") and gone.accuracy is None
    # A reference the served model disagrees with on two requests: exactly those two fail, so it is infeasible.
    outputs = [dict(o) for o in ref.outputs or []]
    for i in (2, 7):
        outputs[i] = {"y": outputs[i]["y"] + np.float32(0.01)}
    shifted = ReferenceSet(inputs=ref.inputs, outputs=outputs, source="shifted")
    (bad,) = screen(served.grpc_url, [good], shifted, tight, ["y"])
    assert bad.status == "infeasible" and bad.accuracy is not None and bad.accuracy.exceedances == 2
    assert "request 2" in (bad.accuracy.reason or "")


def test_heldout_acceptance_judges_in_order_against_the_served_baseline(served, mlp_reference):
    _, _, ref = mlp_reference
    tight = AccuracySpec(default=ToleranceSpec(max_abs=1e-5))
    base = served_reference(served.grpc_url, _deployed("base", "mlp"), ReferenceSet(inputs=ref.inputs), ["y"])
    assert base.outputs is not None
    off = [{"y": o["y"] + np.float32(0.01)} if i == 3 else o for i, o in enumerate(base.outputs)]
    # No recorded outputs: the baseline's served outputs are the reference; the chosen one fails on one request.
    verdicts = accept(ReferenceSet(inputs=ref.inputs), {"chosen": off, "base": base.outputs}, ["chosen", "base"],
                      "base", tight)
    assert [(v.candidate_id, v.passed) for v in verdicts] == [("chosen", False), ("base", True)]
    assert verdicts[0].accuracy.split == "heldout" and verdicts[0].accuracy.exceedances == 1
    # A chosen candidate that passes is the only one judged.
    (only,) = accept(ReferenceSet(inputs=ref.inputs), {"chosen": base.outputs, "base": base.outputs},
                     ["chosen", "base"], "base", tight)
    assert only.candidate_id == "chosen" and only.passed


def test_capture_writes_reference(served, mlp_reference, tmp_path, capsys):
    info, shapes, ref = mlp_reference
    inputs_path = tmp_path / "inputs.jsonl"
    from gpt_triton.accuracy import save_jsonl

    save_jsonl(ReferenceSet(inputs=ref.inputs), inputs_path)
    out = tmp_path / "captured.npz"
    assert main(["capture", "--triton-url", served.grpc_url, "--model", "mlp", "--model-version", "1",
                 "--inputs", str(inputs_path), "--out", str(out)]) == 0
    assert "captured 12 requests" in capsys.readouterr().out
    captured = load_reference(out, info, shapes)
    assert captured.outputs is not None and len(captured) == 12
    for got, want in zip(captured.outputs, ref.outputs or [], strict=True):
        np.testing.assert_allclose(got["y"], want["y"], atol=1e-5)
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(captured.inputs, ref.inputs, strict=True))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_capture_errors_leave_no_file(served, mlp_reference, tmp_path, capsys):
    _, _, ref = mlp_reference
    inputs_path = tmp_path / "inputs.npz"
    np.savez(inputs_path, x=np.stack([r["x"] for r in ref.inputs]))
    out = tmp_path / "out.npz"
    cases = [
        (f"127.0.0.1:{_closed_port()}", "mlp", "cannot reach Triton at 127.0.0.1:", 3),  # transient: retry
        (served.grpc_url, "resnet", "model 'resnet' (version default) is not served by Triton", 2),
    ]
    for url, model, message, expected in cases:
        code = main(["capture", "--triton-url", url, "--model", model, "--inputs", str(inputs_path), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == expected and message in err and err.count("\n") == 1, err
        assert not out.exists() and not list(Path(tmp_path).glob(".out.npz*"))
    assert "ready models: mlp" in err
