"""`tune --json`: the run summary on stdout with the exit code it stands for (0 a winner, 1 no winner), progress
kept off stdout. The pipeline itself is replaced by a saved report (end-to-end runs: tests/pipeline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpt_triton.pipeline
from gpt_triton.cli import main
from gpt_triton.core.errors import EXIT_CODES
from gpt_triton.core.records import RunReport
from gpt_triton.testing.models import build_tiny_mlp

SAVED_RUN = Path(__file__).parent / "report" / "data" / "real_run_report.json"


def _fake_tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, winner: bool) -> RunReport:
    report = RunReport.model_validate_json(SAVED_RUN.read_bytes())
    report.run_dir = str(tmp_path / "run")
    report.status = "done"
    if not winner:
        report.winner_id, report.promoted_version, report.promoted_path = None, None, None
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(report.model_dump_json())

    def tune(options: object, progress: object = None) -> RunReport:
        return report

    monkeypatch.setattr(gpt_triton.pipeline, "tune", tune)
    return report


@pytest.mark.parametrize("winner", [True, False])
def test_tune_json_prints_the_summary_and_exits_with_its_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str], winner: bool) -> None:
    report = _fake_tune(tmp_path, monkeypatch, winner)
    model = build_tiny_mlp(tmp_path / "tiny.onnx")
    code = main(["tune", str(model), "--json", "--no-promote", "--out", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    summary = json.loads(out)  # stdout holds the summary alone
    assert code == (0 if winner else 1) == summary["exit_code"]
    assert summary["exit_meaning"] == EXIT_CODES[code]
    assert summary["schema"] == "gpt-triton.run-summary/1" and summary["run_id"] == report.run_id
    assert set(summary) >= {"winner", "baseline_id", "gain", "heldout", "verdicts", "candidates", "promoted", "paths"}
    if winner:
        assert summary["winner"]["id"] == report.winner_id and summary["gain"]["low"] <= summary["gain"]["high"]
    else:
        assert summary["winner"] is None
        assert err.strip().splitlines()[-1].startswith("error: every candidate")
    assert summary["candidates"]["total"] == len(report.candidates)
    assert summary["paths"]["report_md"] == str(tmp_path / "run" / "report.md")
