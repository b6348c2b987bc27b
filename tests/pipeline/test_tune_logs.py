"""Logs that read in a Kubernetes Job: `gpt-triton tune` with stdout piped (not a terminal) prints one full-width
progress line per step while building and measuring, and `--log-format json` one JSON object per event per line;
`report --json` gives the machine-readable summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_tune_cli import tiny_spec

from gpt_triton.testing.models import build_tiny_mlp


def _quick_spec(tmp_path: Path, **measure: object) -> Path:
    spec = tiny_spec()
    spec["search"] = {"mode": "fast", "max_builds": 2}  # the tests count 2 builds
    spec["measure"].update(measure)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _tune(tmp_path: Path, name: str, *extra: str, measure: dict[str, object]) -> subprocess.CompletedProcess[str]:
    model = build_tiny_mlp(tmp_path / "tiny.onnx")
    spec = _quick_spec(tmp_path, **measure)
    with open(tmp_path / f"{name}.out", "w") as stdout:  # a file, as a Job's log is: not a terminal
        result = subprocess.run(
            [sys.executable, "-m", "gpt_triton", "tune", str(model), "--spec", str(spec),
             "--out", str(tmp_path / name), "--repository", str(tmp_path / "repo"), *extra],
            stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=600,
        )
    return subprocess.CompletedProcess(result.args, result.returncode, (tmp_path / f"{name}.out").read_text(),
                                       result.stderr)


@pytest.mark.slow
def test_piped_tune_prints_full_width_progress_lines(tmp_path: Path) -> None:
    # Windows long enough that the search's measure stage (at least 3 rounds of the 2 candidates) outlasts the
    # 2 s between step lines (pipeline_cli.STEP_LINE_INTERVAL_S): a window's own line is printed, not only
    # the stage's first and last step.
    result = _tune(tmp_path, "text", measure={"window_s": 0.5})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "\x1b[" not in result.stdout, "no terminal control sequences in a log"
    stages = [line.split(" ", 2)[1] for line in lines if len(line.split(" ", 2)) > 2]
    for stage in ("build", "deploy", "measure", "finalists"):
        assert stage in stages, f"no {stage} progress line:\n{result.stdout}"
    # The two routes tie; the re-measure runs only when the finalists pick the non-default one.
    summary = json.loads((tmp_path / "text" / "report.json").read_text())
    if summary.get("winner_id") not in (None, summary.get("baseline_id")):
        assert "remeasure" in stages, f"no remeasure progress line:\n{result.stdout}"
    build_steps = [line for line in lines if " build 2/2 elapsed " in line]
    assert build_steps and " eta " in build_steps[0], "n/N, elapsed and ETA while building"
    assert any(" measure " in line and " window " in line for line in lines), "a line per measuring step"
    # The reference line is over 80 characters: it must arrive whole, on one line.
    reference = [line for line in lines if " reference: " in line]
    assert len(reference) == 1 and len(reference[0]) > 80 and reference[0].rstrip().endswith("seed 0"), reference
    assert any(line.startswith("report: ") for line in lines)


@pytest.mark.slow
def test_json_log_format_is_one_object_per_line_and_report_json_summarises(tmp_path: Path) -> None:
    # JSON logs every step (no rate bound), and no finalists line is read: no finalist stage.
    result = _tune(tmp_path, "json", "--log-format", "json", "--no-promote", measure={"finalists": 0})
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]  # every line parses on its own
    assert {"time", "event", "stage", "n", "total", "message", "candidate"} <= set(events[0])
    steps = [e for e in events if e["event"] == "step"]
    built = [e for e in steps if e["stage"] == "build"]
    assert [e["n"] for e in built] == [1, 2] and all(e["total"] == 2 and e["candidate"] for e in built)
    assert any(e["stage"] == "measure" and e["candidate"] for e in steps)
    assert [e["event"] for e in events if e["stage"] == "build"][0] == "start"
    summary = events[-1]
    assert summary["event"] == "summary" and summary["summary"]["exit_code"] == 0

    report = subprocess.run([sys.executable, "-m", "gpt_triton", "report", str(tmp_path / "json"), "--json"],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["schema"] == "gpt-triton.run-summary/1" and data["status"] == "done"
    assert data["exit_code"] == 0 and data["exit_meaning"].startswith("tuned")
    assert data["winner"]["id"] in data["verdicts"]["winner"]
    assert data["heldout"]["passed"] is True and data["promoted"] is None
    assert data["candidates"]["total"] == 2 and data["paths"]["report_json"].endswith("report.json")
    for key in ("run_id", "winner", "gain", "heldout", "candidates", "exit_code"):
        assert data[key] == summary["summary"][key], key  # tune's and report's summaries agree
