"""report.md content, render_report's files, and `gpt-triton report RUN_DIR` end to end."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpt_triton.cli import main
from gpt_triton.core.records import RunReport
from gpt_triton.report import render_markdown, render_report
from gpt_triton.report.plots import PLOT_TITLES

from .conftest import make_report


def _write(run_dir: Path, report: RunReport) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(report.model_dump_json())
    return run_dir


def test_markdown_has_verdict_tables_and_relative_plot_links(report: RunReport, rendered: Path) -> None:
    text = (rendered / "report.md").read_text()
    assert "## Verdict" in text
    assert "ratio 2.210 [2.020, 2.400]" in text and "significant" in text
    assert "**held-out**: PASS" in text and "version 3" in text and "118k inferences" in text
    for c in report.candidates:
        assert re.search(rf"^\|[^|\n]*\| {c.id} \|", text, re.M), f"no row for {c.id}"
    assert "killed by signal 11 (SIGSEGV)" in text and "no NVIDIA GPU on this machine" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(links) == sorted(f"plots/{name}.png" for name in PLOT_TITLES)
    for link in links:
        assert (rendered / link).is_file()
    assert "### concurrency=4" in text  # per-load detail for the second load level
    assert "synthetic inputs" in text  # the reference was synthetic: say what that means
    assert "Knobs every candidate" not in text  # no knob is shared by all candidates of a family here
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


def test_render_report_writes_files_and_replaces_stale_plots(rendered: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in rendered.iterdir()) == ["plots", "report.csv", "report.json", "report.md"]
    assert (rendered / "report.md").read_text().startswith("# gpt-triton run")
    run_dir = tmp_path / "run"
    shutil.copytree(rendered, run_dir)
    # Re-render a run without a gain: the old re-measurement plot must not linger beside the new report.
    _write(run_dir, make_report(gain=None))
    assert render_report(run_dir) == run_dir / "report.md"
    assert not (run_dir / "plots" / "remeasurement.png").exists()
    assert sorted(p.name for p in run_dir.iterdir()) == ["plots", "report.csv", "report.json", "report.md"]  # no temp leftovers
    assert os.stat(run_dir / "report.md").st_mode & 0o044  # readable by others like any file we write


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


def test_cli_missing_run_dir_or_a_file_instead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "run directory not found" in capsys.readouterr().err
    (tmp_path / "report.json").write_text("{}")
    assert main(["report", str(tmp_path / "report.json")]) == 2
    assert f"pass the run directory that holds report.json ({tmp_path})" in capsys.readouterr().err


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


REAL_RUN = Path(__file__).parent / "data" / "real_run_report.json"


def test_report_of_a_real_tune_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """report.json saved by a real `gpt-triton tune` of conv_attention on this 2-core box (8 ORT routes,
    two load levels, a non-significant gain so the baseline was kept): 12-character ids, full knob lists."""
    report = RunReport.model_validate_json(REAL_RUN.read_bytes())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_bytes(REAL_RUN.read_bytes())
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert report.winner_id == report.baseline_id and report.gain is not None and not report.gain.significant
    assert "promoted the baseline" in out and "none: the baseline was kept" in out
    for c in report.candidates:
        assert c.id in out
    text = (run_dir / "report.md").read_text()
    assert "Full routes" in text and "Knobs every candidate of a route family shares" in text
    for name in PLOT_TITLES:
        assert (run_dir / "plots" / f"{name}.png").is_file()


def test_failed_render_leaves_the_previous_report_intact(rendered: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from gpt_triton.report import plots as plots_module

    run_dir = tmp_path / "run"
    shutil.copytree(rendered, run_dir)
    before = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    def broken(view: object, fig: object) -> None:
        raise RuntimeError("drawing failed")

    monkeypatch.setitem(plots_module.DRAW, "build_cost", broken)  # the last plot drawn: the others are done
    _write(run_dir, make_report(gain=None))
    with pytest.raises(RuntimeError, match="drawing failed"):
        render_report(run_dir)
    after = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after.keys() == before.keys()  # no temp dirs or files left behind
    assert all(after[k] == before[k] for k in before if k.name != "report.json")
