"""`gpt-triton routes MODEL [--spec SPEC]`: every family, availability, knobs, counts per mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpt_triton.cli import main
from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.spec import load_spec
from gpt_triton.routes import FAMILIES
from gpt_triton.search import CandidateSearch


def test_routes_table_lists_every_family(tiny_model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["routes", str(tiny_model_path)]) == 0
    out = capsys.readouterr().out
    for name in FAMILIES:
        assert name in out
    assert "graph_optimization_level" in out and "inference_precision" in out
    available, why = FAMILIES["tensorrt"].availability()
    if not available:
        assert f"tensorrt is unavailable here: {why}" in out
    for mode in ("fast", "full", "mixed", "random"):
        assert mode in out


def test_unavailable_tensorrt_shows_what_each_version_would_sweep(
        tiny_model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    family = FAMILIES["tensorrt"]
    available, why = family.availability()
    if available:
        pytest.skip("TensorRT and a GPU are present: the table shows this machine's knobs")
    assert main(["routes", str(tiny_model_path)]) == 0
    out = capsys.readouterr().out
    reason_at = out.index(f"tensorrt is unavailable here: {why}")
    block = out[reason_at:]
    for label in ("TensorRT 10.0-10.7", "TensorRT 10.8-10.x", "TensorRT 11.0", "TensorRT 11.1+"):
        assert label in block, label
    assert "tiling_optimization_level [none, fast, moderate, full] default none" in block
    assert "all_build_routes" in block and "no_cublas" not in block and "timing_cache" not in block
    assert main(["routes", str(tiny_model_path), "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["families"]}
    by_version = rows["tensorrt"]["knobs_by_version"]
    assert [k["name"] for k in by_version["TensorRT 10.8-10.x"]] == [
        "precision", "builder_optimization_level", "tiling_optimization_level", "max_aux_streams", "tactic_sources",
        "fp32_groups"]
    assert rows["onnxruntime"]["knobs_by_version"] == {}


def test_routes_json_counts_follow_the_spec(tiny_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text("search: {max_builds: 500}\nfamilies:\n  openvino: {enabled: false}\n  onnxruntime:\n    knobs: {precision: fp32}\n")
    assert main(["routes", str(tiny_model_path), "--spec", str(spec_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in data["families"]}
    assert rows["openvino"]["enabled"] is False
    spec = load_spec(spec_path)
    model = inspect_model(tiny_model_path)
    assert data["search"]["modes"]["fast"] == len(CandidateSearch(spec, model).ask())
    assert "openvino" not in data["search"]["families"]


def test_routes_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["routes", str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model file not found") and err.count("\n") == 1
