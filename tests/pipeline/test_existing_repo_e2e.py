"""`gpt-triton tune --model-repository REPO --model NAME` end to end on the embedded Triton: a repository
written by hand (onnxruntime backend, 1/model.onnx) and one a previous gpt-triton promotion wrote. Each
run measures the production config as its baseline and promotes the next version beside the old ones,
which a real Triton then loads and serves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from google.protobuf import text_format
from test_existing_repo import hand_written_repository, promoted_repository
from test_tune_cli import tiny_spec
from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton.cli import main
from gpt_triton.server import EmbeddedTriton


def _tune(tmp_path: Path, repo: Path, builds: int = 2) -> dict:  # type: ignore[type-arg]
    # The quickest run that still exercises every stage: the baseline and one route (named by what it
    # changes), no finalist round; ``builds=1`` for the baseline alone, where only it is asserted on.
    spec = tiny_spec(finalists=False)
    spec["families"]["onnxruntime"]["knobs"] = {"graph_optimization_level": ["basic", "all"]}
    spec["families"]["serving"] = {"knobs": {"instance_count": [1, 2]}}
    spec["search"] = {"mode": "fast", "max_builds": builds}
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    out = tmp_path / "run"
    code = main(["tune", "--model-repository", str(repo), "--model", "tiny", "--spec", str(spec_file), "--out", str(out)])
    assert code == 0
    assert (out / "report.csv").is_file() and (out / "report.md").is_file()
    return json.loads((out / "report.json").read_text())  # type: ignore[no-any-return]


def _served_by_triton(server: EmbeddedTriton, model_dir: Path, version: int) -> None:
    """The promoted model directory loads in a real Triton and its new version answers."""
    server.load(model_dir)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("x", [1, 16], "FP32")
    x.set_data_from_numpy(np.ones((1, 16), np.float32))
    result = client.infer(model_dir.name, [x], model_version=str(version))
    assert result.as_numpy("y").shape == (1, 4)
    server.unload(model_dir.name)


def _baseline(report: dict) -> dict:  # type: ignore[type-arg]
    return next(c for c in report["candidates"] if c["id"] == report["baseline_id"])


@pytest.mark.slow
def test_a_hand_written_repository_is_tuned_and_gets_version_2(tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    repo = hand_written_repository(tmp_path)
    report = _tune(tmp_path, repo)
    base = _baseline(report)
    # The baseline is what production serves, not ONNX Runtime's defaults with one instance.
    assert base["name"] == "baseline" and base["status"] == "measured"
    assert base["route"]["knobs"]["graph_optimization_level"] == "basic"
    assert base["route"]["knobs"]["intra_op_threads"] == 1 and base["route"]["knobs"]["enable_mem_arena"] is False
    assert base["serving"]["knobs"]["instance_count"] == 2 and base["serving"]["knobs"]["dynamic_batching"] is True
    served = text_format.Parse(base["deploy"]["config_pbtxt"], mc.ModelConfig())
    assert served.instance_group[0].count == 2 and served.dynamic_batching.max_queue_delay_microseconds == 100
    assert any("production config" in d for d in report["decisions"])
    assert all(c["name"] for c in report["candidates"])
    assert report["promoted_version"] == 2
    model_dir = repo / "tiny"
    assert (model_dir / "1" / "model.onnx").is_file()  # the hand-written version is untouched
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    # Version 1 is an onnxruntime-backend file the new (python adapter) config cannot load: only 2 is listed.
    assert list(config.version_policy.specific.versions) == [2]
    _served_by_triton(triton_server, model_dir, 2)


@pytest.mark.slow
def test_a_repository_gpt_triton_promoted_is_tuned_again(tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    repo = promoted_repository(tmp_path)
    report = _tune(tmp_path, repo, builds=1)  # what is asserted is the baseline read back and the next version
    base = _baseline(report)
    assert base["status"] == "measured"
    assert base["route"]["knobs"]["graph_optimization_level"] == "extended"
    assert base["route"]["knobs"]["allow_spinning"] is False
    assert base["serving"]["knobs"]["instance_count"] == 2 and base["serving"]["knobs"]["max_batch_size"] == 4
    assert report["model"]["path"] == str(repo / "tiny" / "1" / "tiny.onnx")
    assert report["promoted_version"] == 2
    model_dir = repo / "tiny"
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    assert config.backend == "python" and config.version_policy.latest.num_versions == 2  # both versions stay loadable
    _served_by_triton(triton_server, model_dir, 2)
    _served_by_triton(triton_server, model_dir, 1)
