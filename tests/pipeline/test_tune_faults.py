"""Faults found by probing `gpt-triton tune` (issue 17: 4, 5, 6, 9, 13), each refused with one line and exit 2
before any build, and the exit-code contract in --help. None of these start a Triton."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper
from test_tune_cli import _assert_one_line_error, _run_cli

from gpt_triton.cli import main
from gpt_triton.testing.models import build_tiny_mlp


def _main_error(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return code, lines[0]


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    return build_tiny_mlp(tmp_path / "tiny.onnx")


def _spec(tmp_path: Path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


# -- fault 4: file errors under --out ---------------------------------------------------------------------
def test_out_that_is_a_file(tmp_path: Path, tiny: Path) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("a file where the run directory should be")
    result = _run_cli("tune", str(tiny), "--out", str(blocker), "--repository", str(tmp_path / "r"), cwd=tmp_path)
    _assert_one_line_error(result, "--out", "is a file")
    assert not (tmp_path / "r").exists()


def test_out_under_a_read_only_directory(tmp_path: Path, tiny: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    result = _run_cli("tune", str(tiny), "--out", str(locked / "run"), "--repository", str(tmp_path / "r"),
                      cwd=tmp_path, drop_root_override=True)
    _assert_one_line_error(result, "--out", "not writable")
    assert list(locked.iterdir()) == []


def test_a_write_refused_mid_run_is_one_line(tmp_path: Path, tiny: Path) -> None:
    """The run directory is fine at the start, but report.json cannot be written when the run saves (here a
    directory in its place, which stops root too): one line naming the file, exit 2, no traceback."""
    out = tmp_path / "run"
    (out / "report.json").mkdir(parents=True)
    (out / "report.json" / "keep").write_text("x")
    with socket.socket() as sock:  # a port nobody listens on: the run stops at its first stage, then saves
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _run_cli("tune", str(tiny), "--out", str(out), "--triton-url", f"127.0.0.1:{port}", "--no-promote",
                      cwd=tmp_path)
    _assert_one_line_error(result, f"cannot write {out / 'report.json'}")
    assert "Traceback" not in result.stderr
    assert not [p for p in out.iterdir() if p.name.startswith(".report.json.tmp")], "no temp file left"


def test_os_errors_from_our_own_writes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Any OSError that escapes a command (a write the OS refused) is one line and exit 2, not a traceback."""
    import gpt_triton.routes.cli as routes_cli

    def refuse(args: object) -> int:
        raise PermissionError(13, "Permission denied", str(tmp_path / "x.json"))

    monkeypatch.setattr(routes_cli, "run", refuse)
    code, line = _main_error(capsys, "routes", "whatever.onnx")
    assert code == 2 and "Permission denied" in line and "x.json" in line


# -- fault 5: shapes that cannot fit in memory --------------------------------------------------------------
def test_shape_too_large_for_memory(tmp_path: Path, tiny: Path) -> None:
    result = _run_cli("tune", str(tiny), "--shape", "x=1000000000x16", "--out", str(tmp_path / "run"),
                      "--repository", str(tmp_path / "r"), cwd=tmp_path)
    _assert_one_line_error(result, "--shape x=1000000000x16", "memory")
    assert "MemoryError" not in result.stderr and not (tmp_path / "run").exists()


def test_request_memory_bound_counts_dtype_dims_and_requests() -> None:
    from gpt_triton.core.errors import GptTritonError
    from gpt_triton.core.model_info import ModelInfo, TensorInfo
    from gpt_triton.preflight import REQUEST_COPIES, check_request_memory

    info = ModelInfo(path="m.onnx", name="m", sha256="0", size_bytes=1, opset=17,
                     inputs=[TensorInfo(name="x", dtype="float32", dims=["b", 16])],
                     outputs=[TensorInfo(name="y", dtype="float32", dims=["b", 4])])
    per_request = 4 * 16 * 4  # batch 4 x 16 floats
    fits = per_request * (10 + REQUEST_COPIES)
    check_request_memory(info, {"x": [4, 16]}, 10, available=fits)
    with pytest.raises(GptTritonError, match="each request 256 B"):
        check_request_memory(info, {"x": [4, 16]}, 10, available=fits - 1)


# -- fault 6: what used to fail after the whole tune ---------------------------------------------------------
def test_bad_model_name_is_refused_before_building(tmp_path: Path) -> None:
    model = build_tiny_mlp(tmp_path / "my model.onnx")
    result = _run_cli("tune", str(model), "--out", str(tmp_path / "run"), "--repository", str(tmp_path / "r"),
                      cwd=tmp_path)
    _assert_one_line_error(result, "bad model name 'my model'", "--model-name")
    assert not (tmp_path / "run").exists() and not (tmp_path / "r").exists()
    result = _run_cli("tune", str(model), "--model-name", "ok\n", "--out", str(tmp_path / "run"), cwd=tmp_path)
    _assert_one_line_error(result, "bad model name")


def test_model_folder_that_is_a_file(tmp_path: Path, tiny: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tiny").write_text("not a folder")
    result = _run_cli("tune", str(tiny), "--repository", str(repo), "--out", str(tmp_path / "run"), cwd=tmp_path)
    _assert_one_line_error(result, f"{repo / 'tiny'} is not a directory")
    assert not (tmp_path / "run").exists()


def test_read_only_model_folder_in_a_writable_repository(tmp_path: Path, tiny: Path) -> None:
    """The repository root is writable but repo/<model> is not: refused now, not at promotion."""
    repo = tmp_path / "repo"
    (repo / "tiny" / "1").mkdir(parents=True)
    (repo / "tiny").chmod(0o500)
    result = _run_cli("tune", str(tiny), "--repository", str(repo), "--out", str(tmp_path / "run"), cwd=tmp_path,
                      drop_root_override=True)
    _assert_one_line_error(result, f"model folder {repo / 'tiny'} is not writable")
    assert not (tmp_path / "run").exists()


def test_task_metric_that_does_not_import(tmp_path: Path, tiny: Path) -> None:
    spec = _spec(tmp_path, "accuracy:\n  task_metric: no_such_module_17:agree\n")
    result = _run_cli("tune", str(tiny), "--spec", spec, "--out", str(tmp_path / "run"), "--repository",
                      str(tmp_path / "r"), cwd=tmp_path)
    _assert_one_line_error(result, "no_such_module_17", "cannot import")
    assert not (tmp_path / "run").exists()


def test_nan_in_reference_outputs_names_the_request_in_the_users_file(tmp_path: Path, tiny: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    x = rng.random((20, 1, 16), dtype=np.float32)
    y = rng.random((20, 1, 4), dtype=np.float32)
    y[13, 0, 2] = np.nan
    y[17, 0, 1] = np.inf
    np.savez(tmp_path / "ref.npz", x=x, y=y)
    code, line = _main_error(capsys, "tune", str(tiny), "--reference", str(tmp_path / "ref.npz"), "--out",
                             str(tmp_path / "run"), "--repository", str(tmp_path / "r"))
    assert code == 2 and "reference output 'y' of request 13" in line and "NaN" in line
    assert not (tmp_path / "run").exists()


# -- fault 9: spec values checked before anything starts -----------------------------------------------------
@pytest.mark.parametrize(("text", "where"), [
    ("time_budget_s: -5\n", "time_budget_s"),
    ("search:\n  max_builds: -3\n", "search.max_builds"),
    ("search:\n  max_builds: 0\n", "search.max_builds"),
    ("measure:\n  window_s: -1\n", "measure.window_s"),
    ("measure:\n  burn_in_s: -30\n", "measure.burn_in_s"),
    ("measure:\n  min_windows: 5\n  max_windows: 3\n", "max_windows (3) is below min_windows (5)"),
    ("accuracy:\n  heldout_fraction: 1.5\n", "accuracy.heldout_fraction"),
    ("promotion:\n  keep_versions: 0\n", "promotion.keep_versions"),
    ("families:\n  onnxruntime:\n    knobs:\n      intra_op_threads: lots\n",
     "families.onnxruntime.knobs.intra_op_threads: 'lots' is a string"),
    ("families:\n  onnxruntime:\n    knobs:\n      intra_op_threads: -2\n",
     "families.onnxruntime.knobs.intra_op_threads: -2 is negative"),
])
def test_spec_values_are_range_and_type_checked(tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str],
                                                text: str, where: str) -> None:
    code, line = _main_error(capsys, "tune", str(tiny), "--spec", _spec(tmp_path, text), "--out",
                             str(tmp_path / "run"), "--repository", str(tmp_path / "r"))
    assert code == 2 and where in line, line
    assert not (tmp_path / "run").exists(), "refused before the run started"


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--max-builds", "0", "--max-builds 0: Input should be greater than or equal to 1"),
    ("--max-builds", "-1", "--max-builds -1"),
    ("--time-budget", "0", "--time-budget 0: Input should be greater than 0"),
])
def test_command_line_overrides_are_checked_not_ignored(tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str],
                                                        flag: str, value: str, message: str) -> None:
    code, line = _main_error(capsys, "tune", str(tiny), flag, value, "--out", str(tmp_path / "run"))
    assert code == 2 and message in line, line


def test_max_builds_override_reaches_the_spec(tmp_path: Path) -> None:
    import argparse

    from gpt_triton.core.spec import TuneSpec
    from gpt_triton.pipeline_cli import apply_overrides

    args = argparse.Namespace(time_budget="5m", search="fast", max_builds=1, triton_url=None, model_name="m")
    spec = apply_overrides(TuneSpec(), args)
    assert (spec.search.max_builds, spec.search.mode, spec.time_budget_s, spec.promotion.model_name) == (1, "fast", 300.0, "m")


# -- fault 13: ONNX external data ---------------------------------------------------------------------------
def test_missing_external_data_file_is_named_before_building(tmp_path: Path) -> None:
    weight = numpy_helper.from_array(np.ones((16, 4), np.float32), name="w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.weights",
              size_threshold=0)
    assert (tmp_path / "ext.weights").is_file()
    (tmp_path / "ext.weights").unlink()
    result = _run_cli("tune", str(path), "--out", str(tmp_path / "run"), "--repository", str(tmp_path / "r"),
                      cwd=tmp_path)
    _assert_one_line_error(result, "'ext.weights'", "missing", "tensor 'w'")
    assert not (tmp_path / "run").exists()


# -- exit codes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["tune"], ["report"], ["routes"], ["verify"], ["capture"], ["canary"],
                                     ["k8s", "render"]])
def test_every_command_documents_the_exit_codes(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 " in text and "1 no candidate passed held-out acceptance" in text
    assert "2 bad input" in text and "3 transient failure" in text


def test_routes_takes_shapes_like_tune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "length"])])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert main(["routes", str(path), "--shape", "x=2x7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shapes"] == {"x": [2, 7]}
    code, line = _main_error(capsys, "routes", str(path), "--shape", "x=2")
    assert code == 2 and "--shape x has rank 1" in line


def test_spec_fixture_is_still_valid() -> None:
    """The specs the end-to-end tests use pass the new range checks."""
    from test_tune_cli import FAST_SPEC, tiny_spec

    from gpt_triton.core.spec import TuneSpec

    for spec in (FAST_SPEC, tiny_spec()):
        TuneSpec.model_validate(yaml.safe_load(yaml.safe_dump(spec)))


def test_accuracy_messages_name_requests_by_their_index_in_the_users_file() -> None:
    """Screening and acceptance judge a split; their reasons name the request as the user's file numbers it."""
    from gpt_triton.accuracy.compare import compare_requests
    from gpt_triton.accuracy.reference import ReferenceSet, split_reference
    from gpt_triton.core.spec import AccuracySpec

    outputs = [{"y": np.full((1, 4), float(i), np.float32)} for i in range(20)]
    ref = ReferenceSet(inputs=[{"x": np.zeros((1, 16), np.float32)} for _ in range(20)], outputs=outputs)
    tuning, _ = split_reference(ref, 0.3, 5)
    assert tuning.indices is not None and tuning.outputs is not None
    position = 3
    produced = [dict(o) for o in tuning.outputs]
    produced[position] = {"y": produced[position]["y"] + np.float32(np.nan)}
    result = compare_requests(tuning.outputs, produced, AccuracySpec(), "tuning", request_ids=tuning.indices)
    assert result.reason == f"output y has NaN in request {tuning.indices[position]}"
    assert tuning.indices[position] != position  # the split reordered: the file's index is the one named
