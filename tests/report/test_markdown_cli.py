"""report.md content, render_report's files, and `gpt-triton report RUN_DIR` end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpt_triton.cli import main
from gpt_triton.records import RunReport
from gpt_triton.report import render_markdown, render_plots, render_report
from gpt_triton.report.plots import PLOT_TITLES

from .conftest import make_report


def _write(run_dir: Path, report: RunReport) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(report.model_dump_json())
    return run_dir


def test_markdown_has_verdict_tables_and_relative_plot_links(report: RunReport, tmp_path: Path) -> None:
    plots = render_plots(report, tmp_path / "plots")
    text = render_markdown(report, plots, relative_to=tmp_path)
    assert "## Verdict" in text
    assert "ratio 2.210 [2.020, 2.400]" in text and "significant" in text
    assert "**held-out**: PASS" in text and "version 3" in text and "118k inferences" in text
    for c in report.candidates:
        assert re.search(rf"^\|[^|\n]*\| {c.id} \|", text, re.M), f"no row for {c.id}"
    assert "killed by signal 11 (SIGSEGV)" in text and "no NVIDIA GPU on this machine" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(links) == sorted(f"plots/{name}.png" for name in PLOT_TITLES)
    for link in links:
        assert (tmp_path / link).is_file()
    assert "### concurrency=4" in text  # per-load detail for the second load level
    assert "synthetic inputs" in text  # the reference was synthetic: say what that means
    # Every table row has the same number of cells as its header (route keys contain '|', escaped).
    for block in re.findall(r"((?:^\|.*\|\n)+)", text, re.M):
        counts = {len(re.split(r"(?<!\\)\|", line)) for line in block.strip().splitlines()}
        assert len(counts) == 1, block


def test_markdown_explains_missing_plots() -> None:
    report = make_report(gain=None)
    text = render_markdown(report, {})
    assert "Not drawn: no re-measured gain in this run." in text
    assert "![" not in text


def test_markdown_promoted_baseline() -> None:
    report = make_report(winner_id="c00", selected_id="c00", promoted_version=1)
    text = render_markdown(report, {})
    assert "promoted the baseline" in text


def test_render_report_writes_files_and_replaces_stale_plots(report: RunReport, tmp_path: Path) -> None:
    run_dir = _write(tmp_path / "run", report)
    path = render_report(run_dir)
    assert path == run_dir / "report.md" and path.read_text().startswith("# gpt-triton run")
    assert {p.name for p in (run_dir / "plots").iterdir()} == {f"{n}.png" for n in PLOT_TITLES}
    # Re-render a run without a gain: the old re-measurement plot must not linger beside the new report.
    _write(run_dir, make_report(gain=None))
    render_report(run_dir)
    assert not (run_dir / "plots" / "remeasurement.png").exists()
    assert sorted(p.name for p in run_dir.iterdir()) == ["plots", "report.json", "report.md"]  # no temp leftovers
    assert os.stat(run_dir / "report.md").st_mode & 0o044  # readable by others like any file we write


def test_cli_report_prints_summary(report: RunReport, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _write(tmp_path / "run", report)
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "verdict" in out and "c05" in out and "re-measured gain" in out
    assert (run_dir / "report.md").is_file()


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (None, "no report.json in"),
        ("{not json", "is not a valid run report"),
        ('{"run_id": "x"}', "is not a valid run report"),
        ("", "is not a valid run report"),
    ],
)
def test_cli_bad_report_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
                                      expect: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if content is not None:
        (run_dir / "report.json").write_text(content)
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expect in err
    assert err.count("\n") == 1
    assert sorted(p.name for p in run_dir.iterdir()) == ([] if content is None else ["report.json"])


def test_cli_missing_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "run directory not found" in capsys.readouterr().err


def test_cli_entry_point_exit_code(tmp_path: Path) -> None:
    """The real console script: exit status 2 and a single stderr line on a corrupt report."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text("[1, 2")
    proc = subprocess.run([sys.executable, "-m", "gpt_triton", "report", str(run_dir)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""


def test_cli_on_a_run_that_failed_before_any_candidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = make_report(candidates=[], baseline_id=None, winner_id=None, selected_id=None, gain=None, heldout=None,
                         promoted_version=None, promoted_path=None, status="failed", error="TypeError: boom")
    run_dir = _write(tmp_path / "run", report)
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "no candidates were planned" in out and "FAILED: TypeError: boom" in out
    text = (run_dir / "report.md").read_text()
    assert "No candidates were planned." in text and "**run**: FAILED: TypeError: boom" in text
    assert "![" not in text and list((run_dir / "plots").iterdir()) == []
