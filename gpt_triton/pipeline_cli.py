"""`gpt-triton tune MODEL ...`: the main job."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpt_triton.core.spec import load_spec, parse_duration


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tune", help="tune a model: build candidates, serve, measure, validate, select, promote",
                       description="Tune MODEL.onnx on Triton and promote the winner into the model repository.")
    p.add_argument("model", type=Path, help="the ONNX model")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224",
                   help="concrete shape for an input with dynamic dims (repeatable)")
    p.add_argument("--reference", type=Path, help=".npz, a folder of .npz, perf_analyzer JSON or JSONL of requests")
    p.add_argument("--spec", type=Path, help="YAML tuning spec (routes, search, load, objective, accuracy)")
    p.add_argument("--repository", type=Path, help="production model repository (default: ./model_repository)")
    p.add_argument("--out", type=Path, help="run directory for report.json and artifacts (default: runs/<model>-<id>)")
    p.add_argument("--triton-url", help="HOST:PORT (gRPC) of an existing Triton in explicit model control mode")
    p.add_argument("--time-budget", help="wall-time budget, e.g. 10m")
    p.add_argument("--search", choices=["fast", "full", "mixed", "random"], help="search mode (overrides the spec)")
    p.add_argument("--max-builds", type=int, help="cap on the number of builds (overrides the spec)")
    p.add_argument("--resume", action="store_true", help="reuse the run directory's tuning cache")
    p.add_argument("--repeat-check", action="store_true", help="select twice and report whether the winners agree")
    p.add_argument("--no-promote", action="store_true", help="tune and report, but do not touch the repository")
    p.add_argument("--pushgateway", help="HOST:PORT of a Prometheus Pushgateway for the run's metrics")
    p.add_argument("--signing-key-file", help="sign promoted artifacts with this key (or GPT_TRITON_SIGNING_KEY)")
    p.add_argument("--model-name", help="name of the model in the repository (default: the file's stem)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpt_triton.core.model_info import parse_shape_hint
    from gpt_triton.pipeline import TuneOptions, tune

    spec = load_spec(args.spec)
    if args.time_budget:
        spec.time_budget_s = parse_duration(args.time_budget)
    if args.search:
        spec.search.mode = args.search
    if args.max_builds:
        spec.search.max_builds = args.max_builds
    if args.triton_url:
        spec.server.triton_url = args.triton_url
    if args.model_name:
        spec.promotion.model_name = args.model_name
    shapes = dict(parse_shape_hint(text) for text in args.shape)
    options = TuneOptions(
        model=args.model, spec=spec, shapes=shapes, reference=args.reference, repository=args.repository,
        out=args.out, triton_url=args.triton_url or spec.server.triton_url, resume=args.resume,
        repeat_check=args.repeat_check, promote=not args.no_promote, pushgateway=args.pushgateway,
        signing_key_file=args.signing_key_file,
    )
    from rich.console import Console

    console = Console(log_path=False)
    report = tune(options, RichProgress(console))  # type: ignore[arg-type]
    try:
        from gpt_triton.report import print_summary
    except ImportError:
        console.print(f"report: {report.run_id}")
    else:
        from gpt_triton.report import render_report

        print_summary(report, console)
        markdown = render_report(Path(report.run_dir))
        console.print(f"report: {markdown} (plots in {markdown.parent / 'plots'})")
    if report.winner_id is None:
        import sys

        print("error: every candidate, the default route included, failed held-out acceptance; nothing promoted "
              f"(the reference outputs disagree with the model; see {options.out or 'the run directory'}/report.json)",
              file=sys.stderr)
        return 1
    return 0


class RichProgress:
    """Progress bars for the pipeline's steps, log lines above them."""

    def __init__(self, console) -> None:  # type: ignore[no-untyped-def]
        self.console = console

    def log(self, text: str) -> None:
        self.console.log(text, markup=False, highlight=False)

    def bar(self, description: str, total: int | None):  # type: ignore[no-untyped-def]
        import contextlib

        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        @contextlib.contextmanager
        def _bar():  # type: ignore[no-untyped-def]
            columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), TextColumn("[dim]{task.fields[last]}")]
            with Progress(*columns, console=self.console, transient=True) as progress:
                task = progress.add_task(description, total=total, last="")
                yield lambda text: progress.update(task, advance=1, last=text[:60])

        return _bar()
