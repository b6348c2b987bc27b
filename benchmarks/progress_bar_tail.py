"""Does the terminal's progress bar slow the in-process load client? (a benchmark script, not a test; issue 16)

On a terminal the tune shows rich progress bars, in the process whose lean client times every window. A
bar that refreshes on a timer (rich's default: a thread, ten redraws a second) takes the interpreter
lock while requests are in flight. Here one embedded Triton serves a baseline and a winner; each round
measures both with the built-in client bare, under a timer-refreshed rich bar (rich's default), under
the tune's own terminal bars (:class:`gpt_triton.pipeline_cli.RichProgress`, redrawn per step), and with
perf_analyzer, in an order rotating every round. Printed: each variant's p50 and p99 over perf_analyzer's,
paired by round (geometric mean, +-2 standard errors).

    .venv/bin/python benchmarks/progress_bar_tail.py [--rounds 24] [--run-dir RUN]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress as Bars

sys.path.insert(0, str(Path(__file__).parent))
from perf_analyzer_agreement import from_run, ort_candidate  # noqa: E402
from served import random_requests, serving  # noqa: E402

from gpt_triton.core.measurements import LoadProfile  # noqa: E402
from gpt_triton.core.model_info import inspect_model, resolve_shapes  # noqa: E402
from gpt_triton.core.records import Candidate  # noqa: E402
from gpt_triton.measure.clients import BuiltinClient, LoadClient  # noqa: E402
from gpt_triton.measure.paired import log_ratio_interval, round_log_ratios  # noqa: E402
from gpt_triton.measure.perf_analyzer import PerfAnalyzer, PerfAnalyzerClient, find_perf_analyzer  # noqa: E402
from gpt_triton.pipeline_cli import RichProgress  # noqa: E402
from gpt_triton.testing.models import build_conv_attention  # noqa: E402

WINDOW_S, MIN_REQUESTS, SETTLE_S = 0.75, 500, 0.05  # examples/demo.yaml's windows


_SINK = io.StringIO()  # what the bars draw is not read: only what drawing them does to the windows


def _terminal() -> Console:
    _SINK.seek(0)
    _SINK.truncate()
    return Console(file=_SINK, force_terminal=True, width=160)


@contextlib.contextmanager
def timer_bar() -> Iterator[Callable[[str], None]]:
    """rich's default: a refresh thread redrawing ten times a second."""
    with Bars(console=_terminal()) as bars:
        task = bars.add_task("re-measuring 3 candidates (windows)", total=None)
        yield lambda text: bars.update(task, advance=1, description=text[:60])


@contextlib.contextmanager
def tune_bar() -> Iterator[Callable[[str], None]]:
    with RichProgress(_terminal()).bar("re-measuring 3 candidates (windows)", None) as advance:
        yield advance


@contextlib.contextmanager
def no_bar() -> Iterator[Callable[[str], None]]:
    yield lambda text: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--run-dir", type=Path, help="a tune's run directory: its baseline and selected candidate")
    args = parser.parse_args()
    tool = find_perf_analyzer(required=True)
    assert tool is not None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.run_dir is not None:
            model, baseline, winner = from_run(args.run_dir)
        else:
            model = build_conv_attention(root / "model")
            baseline = ort_candidate("baseline", model, "ORT_ENABLE_ALL", "1", True)
            winner = ort_candidate("winner", model, "ORT_ENABLE_ALL", "0", False)
        measure(model, {"baseline": baseline, "winner": winner}, args.rounds, tool)


def measure(model: Path, pair: dict[str, Candidate], rounds: int, tool: PerfAnalyzer) -> None:
    info = inspect_model(model)
    shapes = resolve_shapes(info, {})
    requests = random_requests(shapes)
    load = LoadProfile(concurrency=1)
    bars = {"bare": no_bar, "timer bar": timer_bar, "tune's bar": tune_bar, "perf_analyzer": no_bar}
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with serving(pair, info, shapes, "bar") as (server, names):
        builtin: LoadClient = BuiltinClient()
        pa: LoadClient = PerfAnalyzerClient(tool, "grpc", server.http_url)
        for name in names.values():
            for client in (builtin, pa):  # warm-up, discarded
                client.window(server.grpc_url, name, requests, load, 0.5, 5)
        labels = list(bars)
        for r in range(rounds):
            order = labels[r % len(labels):] + labels[:r % len(labels)]
            roles = list(pair) if r % 2 == 0 else list(pair)[::-1]
            for label in order:
                client = pa if label == "perf_analyzer" else builtin
                for role in roles:
                    with bars[label]() as advance:
                        sample = client.window(server.grpc_url, names[role], requests, load, WINDOW_S, MIN_REQUESTS,
                                               metrics_url=server.metrics_url, seed=r, payload_start=r * 131,
                                               settle_s=SETTLE_S)
                        advance(f"{role} window {r + 1}")
                    out.setdefault((label, role), []).append((sample.result.p50_ms, sample.result.p99_ms))
                    print(f"  round {r + 1:2d} {label:13s} {role:8s} p50 {sample.result.p50_ms:6.3f} ms "
                          f"p99 {sample.result.p99_ms:6.3f} ms requests {sample.result.requests}", flush=True)
    print("\n== the built-in client over perf_analyzer, paired by round (geometric mean, 95% t interval)")
    for role in pair:
        ref = np.array(out[("perf_analyzer", role)])
        for label in labels[:-1]:
            x = np.array(out[(label, role)])
            parts = []
            for k, what in ((0, "p50"), (1, "p99")):
                iv = log_ratio_interval(round_log_ratios(x[:, k], ref[:, k]))
                parts.append(f"{what} {iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]")
            print(f"{role:8s} {label:11s} " + "  ".join(parts))


if __name__ == "__main__":
    main()
