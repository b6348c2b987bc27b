"""`gpt-triton tune MODEL ...`: the main job.

Output follows where it goes: on a terminal, rich progress bars; anywhere else (a Kubernetes Job's log, a
file, a pipe) one plain, full-width line per step at a bounded rate, with stage, n/N, elapsed and ETA
(``--log-format text``), or one JSON object per event per line for log pipelines (``--log-format json``).
``--json`` prints the run's machine-readable summary (gpt_triton.report.summary) on stdout and sends the
progress to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from gpt_triton.core.errors import EXIT_NO_WINNER, EXIT_OK, GptTritonError
from gpt_triton.core.spec import TuneSpec, load_spec, parse_duration
from gpt_triton.run import Advance, Progress, stage_of

# Text progress in a log prints a step at most this often (the first and last steps of a stage always):
# a Job's log stays readable when hundreds of measurement windows pass.
STEP_LINE_INTERVAL_S = 2.0
_CANDIDATE_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{12})(?![0-9a-f])")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tune", help="tune a model: build candidates, serve, measure, validate, select, promote",
                       description="Tune MODEL.onnx on Triton and promote the winner into the model repository.")
    p.add_argument("model", type=Path, nargs="?", help="the ONNX model (or --model-repository REPO --model NAME)")
    p.add_argument("--model-repository", type=Path, metavar="REPO",
                   help="tune a model REPO already serves (with --model NAME): its config.pbtxt is the baseline, "
                   "the next version is promoted beside the served ones")
    p.add_argument("--model", dest="served_model", metavar="NAME", help="the served model in --model-repository")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224",
                   help="concrete shape for an input with dynamic dims (repeatable)")
    p.add_argument("--reference", type=Path, help=".npz, a folder of .npz, perf_analyzer JSON or JSONL of requests")
    p.add_argument("--spec", type=Path, help="YAML tuning spec (routes, search, load, objective, accuracy); "
                   "trusted input: accuracy.task_metric imports and runs code")
    p.add_argument("--repository", type=Path, help="production model repository (default: ./model_repository)")
    p.add_argument("--out", type=Path, help="run directory for report.json and artifacts (default: runs/<model>-<id>)")
    p.add_argument("--triton-url", help="HOST:PORT (gRPC) of an existing Triton in explicit model control mode")
    p.add_argument("--time-budget", help="wall-time budget, e.g. 10m")
    p.add_argument("--search", choices=["fast", "full", "mixed", "random"], help="search mode (overrides the spec)")
    p.add_argument("--max-builds", type=int, help="cap on the number of builds, at least 1 (overrides the spec)")
    p.add_argument("--resume", action="store_true", help="reuse the run directory's tuning cache")
    p.add_argument("--repeat-check", action="store_true", help="select twice and report whether the winners agree")
    p.add_argument("--no-promote", action="store_true", help="tune and report, but do not touch the repository")
    p.add_argument("--pushgateway", help="HOST:PORT of a Prometheus Pushgateway for the run's metrics")
    p.add_argument("--signing-key-file", help="sign promoted artifacts with this key (or GPT_TRITON_SIGNING_KEY)")
    p.add_argument("--model-name", help="name of the model in the repository (default: the file's stem)")
    p.add_argument("--log-format", choices=["auto", "text", "json"], default="auto",
                   help="progress output: auto (bars on a terminal, text lines otherwise), text (one line per "
                   "step, full width), json (one JSON object per event per line)")
    p.add_argument("--json", action="store_true",
                   help="print the run's summary as JSON on stdout (progress goes to stderr); keys in README")
    p.set_defaults(func=run)


# (flag, argparse attribute, path in the spec): CLI values are validated by the spec's own rules.
_OVERRIDES = [
    ("--time-budget", "time_budget", ("time_budget_s",)),
    ("--search", "search", ("search", "mode")),
    ("--max-builds", "max_builds", ("search", "max_builds")),
    ("--triton-url", "triton_url", ("server", "triton_url")),
    ("--model-name", "model_name", ("promotion", "model_name")),
]


def apply_overrides(spec: TuneSpec, args: argparse.Namespace) -> TuneSpec:
    """The spec with the command line's values, each checked like the YAML's (``--max-builds 0`` is refused,
    not ignored), before anything starts."""
    from pydantic import ValidationError

    data = spec.model_dump()
    for flag, attr, path in _OVERRIDES:
        given = getattr(args, attr, None)
        if given is None:
            continue
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = parse_duration(given) if attr == "time_budget" else given
        try:
            TuneSpec.model_validate(data)
        except ValidationError as exc:
            raise GptTritonError(f"{flag} {given}: {exc.errors()[0]['msg']}") from None
    return TuneSpec.model_validate(data)


def run(args: argparse.Namespace) -> int:
    from gpt_triton.core.model_info import parse_shape_hint
    from gpt_triton.pipeline import TuneOptions, tune

    spec = apply_overrides(load_spec(args.spec), args)
    shapes = dict(parse_shape_hint(text) for text in args.shape)
    from gpt_triton.served_model import served_model_options

    model, shapes, repository, baseline = served_model_options(
        args.model, args.model_repository, args.served_model, args.repository, args.model_name, shapes,
        args.signing_key_file)
    if baseline is not None:
        spec.promotion.model_name = args.served_model
    options = TuneOptions(
        model=model, spec=spec, shapes=shapes, reference=args.reference, repository=repository, baseline=baseline,
        out=args.out, triton_url=spec.server.triton_url, resume=args.resume,
        repeat_check=args.repeat_check, promote=not args.no_promote, pushgateway=args.pushgateway,
        signing_key_file=args.signing_key_file,
    )
    stream = sys.stderr if args.json else sys.stdout
    progress = make_progress(args.log_format, stream)
    report = tune(options, progress)
    from gpt_triton.report import print_summary, render_report
    from gpt_triton.report.summary import run_summary

    markdown = render_report(Path(report.run_dir))
    summary = run_summary(report)
    if isinstance(progress, JsonProgress):
        progress.emit("summary", message=f"report: {markdown}", summary=summary)
    else:
        console = _console(stream)
        print_summary(report, console)
        console.print(f"report: {markdown} (plots in {markdown.parent / 'plots'})", soft_wrap=True, markup=False,
                      highlight=False)
    if args.json:
        print(json.dumps(summary, indent=1), flush=True)
    if report.winner_id is None:
        print("error: every candidate, the default route included, failed held-out acceptance; nothing promoted "
              f"(the reference outputs disagree with the model; see {Path(report.run_dir) / 'report.json'})",
              file=sys.stderr)
        return EXIT_NO_WINNER
    return EXIT_OK


def _console(stream: TextIO) -> Any:
    from rich.console import Console

    # Piped: wide enough that a table row or a log line is not folded at 80 columns.
    return Console(file=stream, log_path=False, width=None if stream.isatty() else 200)


def make_progress(log_format: str, stream: TextIO) -> Progress:
    """Bars on a terminal; rate-bounded text lines in a log; JSON lines when asked."""
    if log_format == "json":
        return JsonProgress(stream)
    if log_format == "text" or not stream.isatty():
        return LineProgress(stream)
    return RichProgress(_console(stream))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _seconds(value: float) -> str:
    value = max(0.0, value)
    if value < 90:
        return f"{value:.0f}s"
    return f"{value // 60:.0f}m{value % 60:02.0f}s"


class _StageClock:
    """n/N, elapsed and ETA of one stage's steps."""

    def __init__(self, description: str, total: int | None) -> None:
        self.description, self.total, self.stage = description, total, stage_of(description)
        self.n = 0
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta(self) -> float | None:
        if not self.total or not self.n:
            return None
        return self.elapsed / self.n * max(self.total - self.n, 0)

    def counter(self) -> str:
        return f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"


class LineProgress(Progress):
    """One plain line per event, never wrapped (print, not a terminal renderer), flushed as it is written.

    Steps are printed at most every ``interval_s`` seconds; the first and the last step of a stage, and a
    line when the stage ends, always are."""

    def __init__(self, stream: TextIO, interval_s: float = STEP_LINE_INTERVAL_S) -> None:
        super().__init__(self._log)
        self.stream, self.interval_s = stream, interval_s

    def _print(self, text: str) -> None:
        print(f"{_now()} {text}", file=self.stream, flush=True)

    def _log(self, text: str) -> None:
        self._print(" ".join(text.splitlines()))

    @contextlib.contextmanager
    def bar(self, description: str, total: int | None) -> Iterator[Advance]:
        clock = _StageClock(description, total)
        self._print(f"{clock.stage} started: {description}")
        last_printed = float("-inf")

        def advance(text: str) -> None:
            nonlocal last_printed
            clock.n += 1
            now = time.monotonic()
            final = clock.total is not None and clock.n >= clock.total
            if clock.n == 1 or final or now - last_printed >= self.interval_s:
                last_printed = now
                eta = clock.eta
                self._print(f"{clock.stage} {clock.counter()} elapsed {_seconds(clock.elapsed)}"
                            + (f" eta {_seconds(eta)}" if eta is not None else "") + f": {text}")

        yield advance
        self._print(f"{clock.stage} done: {clock.counter()} steps in {_seconds(clock.elapsed)}")


class JsonProgress(Progress):
    """One JSON object per event per line: time, event (log/start/step/end/summary), stage, n, total,
    elapsed_s, eta_s, message, candidate (the 12-hex id the message names, else null)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(self._log)
        self.stream = stream
        self._stage: _StageClock | None = None

    def emit(self, event: str, *, message: str, clock: _StageClock | None = None, **extra: Any) -> None:
        found = _CANDIDATE_ID.search(message)
        record = {
            "time": _now(), "event": event, "stage": clock.stage if clock else None,
            "n": clock.n if clock else None, "total": clock.total if clock else None,
            "elapsed_s": round(clock.elapsed, 3) if clock else None,
            "eta_s": round(clock.eta, 3) if clock and clock.eta is not None else None,
            "message": message, "candidate": found.group(1) if found else None, **extra,
        }
        print(json.dumps(record), file=self.stream, flush=True)

    def _log(self, text: str) -> None:
        self.emit("log", message=text, clock=self._stage)

    @contextlib.contextmanager
    def bar(self, description: str, total: int | None) -> Iterator[Advance]:
        clock = _StageClock(description, total)
        outer, self._stage = self._stage, clock
        self.emit("start", message=description, clock=clock)

        def advance(text: str) -> None:
            clock.n += 1
            self.emit("step", message=text, clock=clock)

        try:
            yield advance
        finally:
            self._stage = outer
        self.emit("end", message=description, clock=clock)


class RichProgress(Progress):
    """Progress bars for the pipeline's steps on a terminal, log lines above them.

    The bars are redrawn when a step ends or a line is logged, never by a timer: rich's refresh thread
    would take the interpreter lock ten times a second inside the windows this process's own client times.
    Under such a bar the built-in client's window p99 came 1.35x perf_analyzer's on a conv_attention
    winner, 1.02x bare and 1.08x under these bars (``benchmarks/progress_bar_tail.py``, 2026-12-07). So
    the spinner and the elapsed time move with the steps, not with the clock."""

    def __init__(self, console: Any) -> None:
        super().__init__(self._log)
        self.console = console

    def _log(self, text: str) -> None:
        self.console.log(text, markup=False, highlight=False)

    @contextlib.contextmanager
    def bar(self, description: str, total: int | None) -> Iterator[Advance]:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bars

        columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("[dim]{task.fields[last]}")]
        with Bars(*columns, console=self.console, transient=True, auto_refresh=False) as bars:
            task = bars.add_task(description, total=total, last="")
            bars.refresh()
            yield lambda text: bars.update(task, advance=1, last=text[:60], refresh=True)
