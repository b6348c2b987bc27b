"""Reports people look at: terminal summary, report.md, PNG plots, and ``gpt-triton report RUN_DIR``.

``view`` turns a RunReport into what is shown (rows, marks, per-family summary, verdict), deciding
objective and eligibility through ``gpt_triton.core.objective``; ``terminal``, ``markdown`` and ``plots``
render that view.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pydantic import ValidationError

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.recheck import Recheck
from gpt_triton.core.records import RunReport
from gpt_triton.report.csv_export import CSV_FILE, csv_text, write_csv
from gpt_triton.report.markdown import render_markdown
from gpt_triton.report.plots import plot_availability, render_plots
from gpt_triton.report.terminal import print_summary, summary_table
from gpt_triton.report.verdict import break_even_inferences, verdict_lines
from gpt_triton.report.view import FamilySummary, ReportView, build_view, per_family_summary

__all__ = [
    "CSV_FILE", "FamilySummary", "ReportView", "break_even_inferences", "build_view", "csv_text", "load_rechecks", "load_report", "per_family_summary",
    "plot_availability", "print_summary", "render_markdown", "render_plots", "render_report", "summary_table",
    "verdict_lines", "write_csv",
]


def load_report(run_dir: Path) -> RunReport:
    """Read RUN_DIR/report.json; a missing or corrupt file is a one-line GptTritonError."""
    path = Path(run_dir) / "report.json"
    if Path(run_dir).is_file():
        raise GptTritonError(f"{run_dir} is a file; pass the run directory that holds report.json ({Path(run_dir).parent})")
    if not Path(run_dir).is_dir():
        raise GptTritonError(f"run directory not found: {run_dir}; pass the directory `gpt-triton tune` wrote")
    if not path.is_file():
        raise GptTritonError(f"no report.json in {run_dir}; pass the directory `gpt-triton tune` wrote")
    try:
        return RunReport.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise GptTritonError(
            f"{path} is not a valid run report ({where}: {first['msg']}); re-run `gpt-triton tune` or restore the file"
        ) from None
    except OSError as exc:
        raise GptTritonError(f"cannot read {path}: {exc.strerror}") from None


def load_rechecks(run_dir: Path) -> list[Recheck]:
    """RUN_DIR/rechecks/*.json (``gpt-triton recheck``), oldest first; one that does not read is one line."""
    found = []
    for path in sorted((Path(run_dir) / "rechecks").glob("[!.]*.json")):
        try:
            found.append(Recheck.model_validate_json(path.read_bytes()))
        except ValidationError as exc:
            raise GptTritonError(f"{path} is not a recheck record ({exc.errors()[0]['msg']}); "
                                 "remove it or run `gpt-triton recheck` again") from None
    return found


def render_report(run_dir: Path) -> Path:
    """Write RUN_DIR/plots/*.png, RUN_DIR/report.md and RUN_DIR/report.csv (the measurements in perf_analyzer's
    ``-f`` layout, :mod:`gpt_triton.report.csv_export`) from report.json; returns report.md's path.

    Plots are drawn into a temporary directory that replaces plots/ only when complete, and report.md is
    written to a temporary file then renamed, so an interrupted render leaves the previous report intact.
    """
    run_dir = Path(run_dir)
    report = load_report(run_dir)
    rechecks = load_rechecks(run_dir)  # before anything is written: a bad record leaves the old report whole
    mask = _umask()
    staging = Path(tempfile.mkdtemp(prefix=".plots-", dir=run_dir))
    staging.chmod(0o777 & ~mask)  # mkdtemp's 0700 would hide the plots from a web server or a colleague
    try:
        drawn = render_plots(report, staging)
        plots_dir = run_dir / "plots"
        old = None
        if plots_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=".plots-old-", dir=run_dir))
            plots_dir.replace(old / "plots")
        staging.replace(plots_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    plots = {name: plots_dir / path.name for name, path in drawn.items()}
    target = run_dir / "report.md"
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".md", dir=run_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(render_markdown(report, plots, relative_to=run_dir, rechecks=rechecks))
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    write_csv(report, run_dir / CSV_FILE)
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
