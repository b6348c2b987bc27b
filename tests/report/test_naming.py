"""Candidate names: family + the knobs that differ from the baseline, in the table, report.md, plots and logs."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from gpt_triton.core.model_info import ModelInfo, TensorInfo
from gpt_triton.core.naming import BASELINE_NAME, candidate_name, named, unique_names
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Route
from gpt_triton.core.spec import TuneSpec
from gpt_triton.report import print_summary, render_markdown
from gpt_triton.report.plots import _label
from gpt_triton.report.view import build_view
from gpt_triton.search import CandidateSearch
from gpt_triton.select import select

from .conftest import make_report

ORT_DEFAULTS = {"graph_optimization_level": "all", "intra_op_threads": 0, "allow_spinning": True, "precision": "fp32"}


def _candidate(cid: str, family: str, knobs: dict[str, Any], serving: dict[str, Any] | None = None,
               baseline: bool = False) -> Candidate:
    return Candidate(id=cid, family=family, route=Route(family=family, knobs=knobs),
                     serving=Route(family="serving", knobs=serving or {"instance_count": 1, "dynamic_batching": False}),
                     is_baseline=baseline)


def test_a_name_lists_only_the_knobs_that_differ_from_the_baseline() -> None:
    base = _candidate("b" * 12, "onnxruntime", ORT_DEFAULTS, baseline=True)
    other = _candidate("c" * 12, "onnxruntime", {**ORT_DEFAULTS, "graph_optimization_level": "basic", "intra_op_threads": 1})
    served = _candidate("d" * 12, "onnxruntime", ORT_DEFAULTS, {"instance_count": 2, "dynamic_batching": True})
    assert candidate_name(base, base) == BASELINE_NAME
    assert candidate_name(other, base) == "onnxruntime graph_opt=basic threads=1"
    assert candidate_name(served, base) == "onnxruntime instances=2 batching=on"


def test_another_family_is_named_against_its_own_defaults() -> None:
    base = _candidate("b" * 12, "onnxruntime", ORT_DEFAULTS, baseline=True)
    ov_defaults = {"inference_precision": "f32", "num_streams": 1, "performance_hint": "LATENCY"}
    ov = _candidate("e" * 12, "openvino", {**ov_defaults, "inference_precision": "f16", "num_streams": 2})
    assert candidate_name(ov, base, {"openvino": ov_defaults}) == "openvino precision=f16 streams=2"
    assert candidate_name(_candidate("f" * 12, "openvino", ov_defaults), base, {"openvino": ov_defaults}) == "openvino"


def test_colliding_names_get_the_short_id_and_the_id_stays_the_key() -> None:
    base = _candidate("b" * 12, "onnxruntime", ORT_DEFAULTS, baseline=True)
    one, two = (_candidate(cid, "onnxruntime", ORT_DEFAULTS) for cid in ("123456aaaaaa", "654321bbbbbb"))
    one.name = two.name = "onnxruntime spin=off"  # e.g. two routes that differ only in a knob names hide
    names = unique_names([base, one, two], base.id)
    assert names[base.id] == "baseline"
    assert names[one.id] == "onnxruntime spin=off #123456" and names[two.id] == "onnxruntime spin=off #654321"


def test_reports_saved_without_names_are_named_from_their_candidates() -> None:
    report = make_report()  # candidates carry no name: the family's most common values stand for its defaults
    names = unique_names(report.candidates, report.baseline_id)
    assert names["c00"] == "baseline"
    assert names["c01"] == "ort level=all"
    assert names["c05"] == "openvino precision=bf16 instances=2 batching=on"
    assert len(set(names.values())) == len(names)


def test_the_search_names_what_it_plans() -> None:
    info = ModelInfo(path="/m.onnx", name="m", sha256="0" * 64, size_bytes=1, opset=17,
                     inputs=[TensorInfo(name="x", dtype="float32", dims=["batch", 16])],
                     outputs=[TensorInfo(name="y", dtype="float32", dims=["batch", 4])])
    spec = TuneSpec.model_validate({"search": {"mode": "fast", "max_builds": 50},
                                    "families": {"openvino": {"enabled": False}, "graph": {"enabled": False},
                                                 "serving": {"knobs": {"instance_count": [1, 2]}}}})
    batch = CandidateSearch(spec, info).ask()
    assert batch[0].name == "baseline"
    names = {c.name for c in batch[1:]}
    assert "onnxruntime graph_opt=basic" in names and "onnxruntime instances=2" in names
    assert all(c.name.startswith(c.family) for c in batch[1:])


def test_tables_report_md_plots_and_logs_show_names(report: Any) -> None:
    for c in report.candidates:
        c.name = unique_names(report.candidates, report.baseline_id)[c.id]
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    print_summary(report, console)
    table = console.export_text()
    console.file.close()
    view = build_view(report)
    md = render_markdown(report, {})
    for row in view.rows:
        assert row.name in table, row.name
        assert f"`{row.name}`" in md
    winner = report.candidate(report.winner_id)
    assert _label(view, winner) == f"{winner.name} (winner)"
    # The route column of report.md is whole: the differing knob is never cut off.
    long = report.candidate("c02")
    assert "quant=u8s8" in md and "-quant=u8s8" in view.row(long.id).route  # type: ignore[union-attr]
    # Decision logs name candidates through core.naming.named: name and the stable id.
    assert named(winner) == f"{winner.name} ({winner.id})"
    chosen = select(report.candidates, report.spec.objective, lambda c: (True, ""))
    assert any(line.startswith("selected ") and f"({chosen.winner_id})" in line and "openvino" in line
               for line in chosen.log)
