"""``gpt-triton report RUN_DIR``: render plots and report.md from a saved run, print the summary."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="render report.md and plots from a run directory and print the summary",
        description="Read RUN_DIR/report.json, write RUN_DIR/plots/*.png and RUN_DIR/report.md, print the summary.",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="directory written by `gpt-triton tune`")
    parser.add_argument("--no-summary", action="store_true", help="write the files without printing the summary")
    parser.add_argument("--json", action="store_true",
                        help="print the run's summary as JSON (the keys of `tune --json`, see README) instead")
    parser.add_argument("--csv", type=Path, metavar="FILE",
                        help="also write the candidates' measurements to FILE in perf_analyzer's -f CSV layout "
                        "(RUN_DIR/report.csv is always written)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so `gpt-triton --help` does not pay for matplotlib.
    from gpt_triton.report import load_report, print_summary, render_report

    path = render_report(args.run_dir)
    if args.csv is not None:
        from gpt_triton.report import write_csv

        write_csv(load_report(args.run_dir), args.csv)
    if args.json:
        import json

        from gpt_triton.report.summary import run_summary

        print(json.dumps(run_summary(load_report(args.run_dir)), indent=1))
    elif not args.no_summary:
        console = Console()
        print_summary(load_report(args.run_dir), console)
        console.print(f"wrote {path} and {path.parent / 'plots'}")
    return 0
