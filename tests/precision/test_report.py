"""The report's mixed-precision rows: kept groups, tuning-split margin, and the winner's held-out verdict."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.records import RunReport
from gpt_triton.report.markdown import render_markdown
from gpt_triton.report.view import build_view, mixed_precision_rows

# The report tests' sample run (tests/ is not a package, so load their conftest by path).
_spec = importlib.util.spec_from_file_location("report_samples", Path(__file__).parents[1] / "report" / "conftest.py")
assert _spec is not None and _spec.loader is not None
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)
candidate, make_report = samples.candidate, samples.make_report


def _report(winner: str) -> RunReport:
    base = make_report()
    mixed = [
        candidate("m01", "onnxruntime", {"precision": "int8_static", "fp32_groups": ["stage2"]}, "measured",
                  base_ms=1.5, margin=0.995),
        candidate("m02", "openvino", {"quantization": "int8", "fp32_groups": ["stage2", "head"]}, "failed",
                  reason="failed to load"),
    ]
    heldout = AccuracyResult(split="heldout", requests=14, passed=True, exceedances=0, exceedance_upper_bound=0.19,
                             min_margin=1.0)
    return base.model_copy(update={"candidates": base.candidates + mixed, "winner_id": winner, "heldout": heldout})


def test_rows_list_only_mixes_with_their_kept_groups_and_margin() -> None:
    rows = mixed_precision_rows(build_view(_report("m01")))
    assert [(r.row.id, r.kept) for r in rows] == [("m01", ["stage2"]), ("m02", ["stage2", "head"])]
    assert rows[0].tuning == "margin 0.995, 0/45 fail"
    assert rows[0].heldout == "passed (0/14 fail)"  # the winner's verdict
    assert rows[1].tuning == "failed to load" and rows[1].heldout == "-"


def test_markdown_has_the_table_only_when_a_mix_exists() -> None:
    text = render_markdown(_report("m01"), {})
    assert "## Mixed precision" in text and "| stage2, head | failed |" in text
    assert "## Mixed precision" not in render_markdown(make_report(), {})
