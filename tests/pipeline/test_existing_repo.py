"""Tuning a model a Triton repository already serves: reading it, its production config as the baseline,
and the bad-repository contract (one line, exit 2, nothing written). The end-to-end runs on the embedded
Triton are in test_existing_repo_e2e.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton.cli import main
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Route
from gpt_triton.core.spec import TuneSpec
from gpt_triton.deploy import model_config, write_version_files
from gpt_triton.deploy.existing import read_existing
from gpt_triton.promote.repository import promote
from gpt_triton.routes import OnnxRuntimeFamily
from gpt_triton.routes._common import make_artifact
from gpt_triton.search import CandidateSearch
from gpt_triton.served_model import prepare_existing
from gpt_triton.testing.models import build_tiny_mlp

HAND_WRITTEN = """
name: "tiny"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
optimization { graph { level: -1 } }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters { key: "enable_mem_arena" value: { string_value: "0" } }
"""


def hand_written_repository(root: Path, config: str = HAND_WRITTEN, versions: tuple[int, ...] = (1,)) -> Path:
    """REPO/tiny/{config.pbtxt, <v>/model.onnx} as teams write it for Triton's onnxruntime backend."""
    model_dir = root / "repo" / "tiny"
    model_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(config)
    for version in versions:
        build_tiny_mlp(model_dir / str(version) / "model.onnx")
    return root / "repo"


def promoted_repository(root: Path, signing_key: bytes | None = None) -> Path:
    """REPO/tiny/1 written by gpt-triton's own promotion: the python-backend adapter serving ONNX Runtime with
    non-default session options, two instances and dynamic batching."""
    source = build_tiny_mlp(root / "src" / "tiny.onnx")
    from gpt_triton.core.model_info import inspect_model

    info = inspect_model(source)
    family = OnnxRuntimeFamily()
    route = Route(family="onnxruntime", knobs={"graph_optimization_level": "extended", "intra_op_threads": 1,
                                              "allow_spinning": False})
    artifact = make_artifact(family, "onnxruntime", route, source.parent, [source.name],
                             family.runtime_options(route, info))
    serving = Route(family="serving", knobs={"instance_count": 2, "dynamic_batching": True, "max_batch_size": 4,
                                             "max_queue_delay_us": 500})
    config = model_config("tiny", info, {"x": [1, 16]}, artifact, serving, "python")
    repo = root / "repo"
    promote(repo, "tiny", config, lambda d: write_version_files(d, artifact, "python"),
            {"model_path": str(source), "model_sha256": info.sha256, "route": "onnxruntime: -graph_optimization_level=extended"},
            signing_key=signing_key)
    return repo


def test_a_hand_written_onnxruntime_model_is_read_with_its_production_config(tmp_path: Path) -> None:
    repo = hand_written_repository(tmp_path)
    prepared = prepare_existing(repo, "tiny", {})
    assert prepared.model == repo / "tiny" / "1" / "model.onnx"
    assert prepared.shapes == {"x": [1, 16]}  # from the config's dims, a batch of one
    base = prepared.baseline
    assert base.family == "onnxruntime"
    assert base.knobs["graph_optimization_level"] == "basic" and base.knobs["intra_op_threads"] == 1
    assert base.knobs["enable_mem_arena"] is False and base.knobs["precision"] == "fp32"
    assert base.serving == {"instance_count": 2, "max_batch_size": 8, "dynamic_batching": True,
                            "max_queue_delay_us": 100, "preferred_batch_sizes": []}
    assert "version 1" in base.source and "onnxruntime backend" in base.source


def test_a_native_config_without_a_scheduler_is_batched_as_triton_serves_it(tmp_path: Path) -> None:
    config = HAND_WRITTEN.replace("dynamic_batching { max_queue_delay_microseconds: 100 }", "")
    base = prepare_existing(hand_written_repository(tmp_path, config), "tiny", {}).baseline
    assert base.serving["dynamic_batching"] is True  # the backend's AutoCompleteConfig adds it in production
    assert any("dynamic_batching {}" in note for note in base.notes)


def test_the_newest_version_the_policy_serves_is_tuned(tmp_path: Path) -> None:
    repo = hand_written_repository(tmp_path, versions=(1, 2, 3))
    assert read_existing(repo, "tiny").version == 3
    (repo / "tiny" / "config.pbtxt").write_text(HAND_WRITTEN + "version_policy { specific { versions: [1, 2] } }")
    assert read_existing(repo, "tiny").version == 2


def test_a_gpt_triton_promotion_is_read_from_its_adapter_files(tmp_path: Path) -> None:
    repo = promoted_repository(tmp_path)
    existing = read_existing(repo, "tiny")
    assert existing.layout == "gpt-triton" and existing.runtime == "onnxruntime" and existing.version == 1
    assert existing.model_path == repo / "tiny" / "1" / "tiny.onnx"  # what production serves
    base = prepare_existing(repo, "tiny", {}).baseline
    assert base.knobs["graph_optimization_level"] == "extended" and base.knobs["intra_op_threads"] == 1
    assert base.knobs["allow_spinning"] is False
    assert base.serving["instance_count"] == 2 and base.serving["max_batch_size"] == 4
    assert base.serving["dynamic_batching"] is True and base.serving["max_queue_delay_us"] == 500


def test_the_search_plans_production_first_and_moves_away_from_it(tmp_path: Path) -> None:
    prepared = prepare_existing(hand_written_repository(tmp_path), "tiny", {})
    from gpt_triton.core.model_info import inspect_model

    info = inspect_model(prepared.model)
    spec = TuneSpec.model_validate({"search": {"mode": "fast", "max_builds": 60},
                                    "families": {"openvino": {"enabled": False}, "graph": {"enabled": False}}})
    search = CandidateSearch(spec, info, baseline=prepared.baseline)
    batch = search.ask()
    base: Candidate = batch[0]
    assert base.is_baseline and base.name == "baseline"
    assert base.route.knobs["graph_optimization_level"] == "basic" and base.route.knobs["intra_op_threads"] == 1
    assert base.serving.knobs["instance_count"] == 2 and base.serving.knobs["max_queue_delay_us"] == 100
    assert any("production config" in line for line in search.decisions)
    others = {c.name: c for c in batch[1:]}
    # One knob at a time from production: back to one instance, ORT's own level, ...
    assert "onnxruntime instances=1" in others and "onnxruntime graph_opt=all" in others
    assert others["onnxruntime instances=1"].route.knobs == base.route.knobs


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize(("damage", "fragment"), [
    (lambda m: (m / "config.pbtxt").unlink(), "no config.pbtxt"),
    (lambda m: (m / "config.pbtxt").write_text("name: \"tiny\"\nmax_batch_size: eight\n"), "not a valid Triton model config"),
    (lambda m: (m / "1" / "model.onnx").unlink(), "model file missing"),
    (lambda m: (m / "config.pbtxt").write_text('name: "tiny"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'),
     "tensorrt_plan"),
    (lambda m: (m / "config.pbtxt").write_text(HAND_WRITTEN.replace('name: "x"', 'name: "images"')), "declares inputs"),
    (lambda m: shutil.rmtree(m / "1"), "no numeric version folder"),
])
def test_a_bad_repository_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], damage, fragment) -> None:  # type: ignore[no-untyped-def]
    repo = hand_written_repository(tmp_path)
    damage(repo / "tiny")
    before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*"))
    code = main(["tune", "--model-repository", str(repo), "--model", "tiny", "--out", str(tmp_path / "run")])
    assert code == 2
    assert fragment in _error_line(capsys)
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")) == before  # nothing written
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("args", "fragment"), [
    (["--model-repository", "{repo}"], "go together"),
    (["--model-repository", "{repo}", "--model", "nope"], "no model 'nope'"),
    (["{repo}/tiny/1/model.onnx", "--model-repository", "{repo}", "--model", "tiny"], "not both"),
    (["--model-repository", "{repo}", "--model", "tiny", "--model-name", "other"], "--model-name other differs"),
    ([], "give the ONNX model"),
])
def test_conflicting_arguments_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                            fragment: str) -> None:
    repo = hand_written_repository(tmp_path)
    code = main(["tune", *(a.format(repo=repo) for a in args), "--out", str(tmp_path / "run")])
    assert code == 2
    assert fragment in _error_line(capsys)


def test_an_openvino_promotion_needs_the_onnx_it_was_built_from(tmp_path: Path) -> None:
    repo = promoted_repository(tmp_path)
    version = repo / "tiny" / "1"
    runtime = version / "gpt_triton_runtime.json"
    runtime.write_text('{"runtime": "openvino", "entry": "model.xml", "runtime_options": {"config": {}}}')
    (tmp_path / "src" / "tiny.onnx").unlink()
    with pytest.raises(GptTritonError, match="OpenVINO IR; re-tuning needs the ONNX it was built from"):
        read_existing(repo, "tiny")


def test_the_config_is_parsed_by_tritons_protobuf(tmp_path: Path) -> None:
    repo = hand_written_repository(tmp_path)
    existing = read_existing(repo, "tiny")
    expected = text_format.Parse(HAND_WRITTEN, mc.ModelConfig())
    assert existing.config == expected


def test_dims_the_config_leaves_open_still_need_a_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx
    from onnx import TensorProto, helper

    repo = hand_written_repository(tmp_path)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "length"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(repo / "tiny" / "1" / "model.onnx"))
    (repo / "tiny" / "config.pbtxt").write_text(HAND_WRITTEN.replace("dims: [ 16 ]", "dims: [ -1 ]").replace("dims: [ 4 ]", "dims: [ -1 ]"))
    assert prepare_existing(repo, "tiny", {}).shapes == {}  # nothing the config fixes
    assert prepare_existing(repo, "tiny", {"x": [1, 32]}).shapes == {"x": [1, 32]}
    assert main(["tune", "--model-repository", str(repo), "--model", "tiny", "--out", str(tmp_path / "run")]) == 2
    assert "--shape x=" in _error_line(capsys)


def test_a_signed_version_is_verified_before_it_is_re_tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    key = bytes(range(32))
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    repo = promoted_repository(tmp_path, signing_key=key)
    args = ["tune", "--model-repository", str(repo), "--model", "tiny", "--out", str(tmp_path / "run")]
    assert main(args) == 2
    assert "is signed: set GPT_TRITON_SIGNING_KEY" in _error_line(capsys)
    key_file = tmp_path / "key"
    key_file.write_text(key.hex())
    assert prepare_existing(repo, "tiny", {}, key_file=str(key_file)).baseline.serving["instance_count"] == 2
    model = repo / "tiny" / "1" / "tiny.onnx"
    model.write_bytes(model.read_bytes() + b"\0")  # swapped weights would be re-promoted and signed anew
    assert main([*args, "--signing-key-file", str(key_file)]) == 2
    assert "tampered" in _error_line(capsys)
    assert not (tmp_path / "run").exists() and sorted(p.name for p in (repo / "tiny").iterdir() if p.name.isdigit()) == ["1"]
