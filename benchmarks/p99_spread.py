"""How far apart are two runs' p99 ratios, and would finer interleaving bring them closer? (a benchmark
script, not a test; issue 16)

Issue 16 asks a tune's selection estimate (the finalist run) and its re-measured gain (a separate run)
to agree within 5% at p99. This script asks what the measurement design can do about it, without a
tune in the way: two ONNX Runtime variants of the bundled conv_attention (or ResNet-style) model, by
default the pair conv_attention tunes select (ORT defaults with spinning on, the baseline, against
spinning off; ``--aa``: the baseline against a second copy of itself), are deployed on an embedded
Triton and measured ``--runs`` times at concurrency 1 with the lean gRPC wire path (pre-serialised
requests, one blocking call at a time). In every run each design sends ``--requests`` requests to each
model, alternating between them in blocks:

* ``500:0``: blocks of 500 requests, none discarded: the tuner's p99 windows, interleaved by window;
* ``N:S``: blocks of N requests of which the first S after each switch are discarded (the switch's
  own cost), i.e. interleaving at a finer grain, so that drift of the machine falls on both models
  alike.

Printed per run and design: each model's pooled p99, the p99 / p50 ratios and the window-median p99
(the median over windows of ``--window`` requests of each window's p99, which a burst in one window
cannot move); then per design the mean ratio across runs and the run-to-run spread (sd of the log
ratio). With ``--fresh-server`` every run starts its own server, as the finalist stage and the
re-measure do. ``--positions N`` then
alternates N blocks of 100 requests and prints each model's mean latency by position after the switch:
how long the previous model's carry-over lasts, which ``measure.settle_s`` leaves out of every window.

    .venv/bin/python benchmarks/p99_spread.py [--runs 5] [--requests 6000] [--designs 500:0,100:25,25:10] [--aa]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.perf_analyzer_agreement import BUILDERS, ort_candidate  # noqa: E402
from gpt_triton.core.model_info import inspect_model, resolve_shapes  # noqa: E402
from gpt_triton.deploy import write_model  # noqa: E402
from gpt_triton.measure.grpc_lean import GrpcConnection  # noqa: E402
from gpt_triton.measure.sender import serialised_request  # noqa: E402
from gpt_triton.server import SUMMARY_METRICS_ARGS, EmbeddedTriton  # noqa: E402

Send = Callable[[str, int, int], list[float]]  # (model, requests, discarded first) -> latencies in ms


@contextmanager
def served_pair(root: Path, model_path: Path, aa: bool, metrics_args: Sequence[str] = SUMMARY_METRICS_ARGS,
                scrape: bool = False) -> Iterator[tuple[Send, tuple[str, str]]]:
    """A server with the two variants loaded (the baseline twice with ``aa``), and a lean sender.
    ``metrics_args``: the server's latency-summary flags; ``scrape``: read the server's /metrics after
    every block sent, untimed, as the tuner does after every window (benchmarks/summary_cost.py)."""
    info = inspect_model(model_path)
    shapes = resolve_shapes(info, {})
    rng = np.random.default_rng(0)
    payloads = [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(16)]
    pair = [ort_candidate("a", model_path, "ORT_ENABLE_ALL", "1", True),
            ort_candidate("b", model_path, "ORT_ENABLE_ALL", "1" if aa else "0", False)]
    with EmbeddedTriton(repository=root / "repo", workdir=root / "work", metrics_args=metrics_args) as server:
        names = []
        for role, cand in zip(("a", "b"), pair, strict=True):
            assert cand.artifact is not None
            deploy = write_model(root / "repo", f"spread_{role}", info, shapes, cand.artifact, cand.serving, "python")
            server.load(root / "repo" / deploy.model_name)
            names.append(deploy.model_name)
        connection = GrpcConnection(server.grpc_url)
        wire = {m: [serialised_request(m, p, None) for p in payloads] for m in names}

        def send(model: str, count: int, discard: int) -> list[float]:
            out = []
            for i in range(count + discard):
                start = time.monotonic()
                connection.call(wire[model][i % len(payloads)])
                if i >= discard:
                    out.append((time.monotonic() - start) * 1e3)
            if scrape:
                assert server.metrics_url is not None
                with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
                    response.read()
            return out

        try:
            for m in names:  # warm-up
                send(m, 300, 0)
            yield send, (names[0], names[1])
        finally:
            connection.close()


def one_design(send: Send, names: tuple[str, str], per_side: int, block: int, discard: int,
               flip: bool) -> dict[str, np.ndarray]:
    lat: dict[str, list[float]] = {m: [] for m in names}
    order = names[::-1] if flip else names
    while min(len(v) for v in lat.values()) < per_side:
        for m in order:
            lat[m] += send(m, block, discard)
    return {m: np.asarray(v[:per_side]) for m, v in lat.items()}


def window_median_p99(latencies: np.ndarray, window: int) -> float:
    """The median over consecutive windows of ``window`` requests of each window's p99: the estimator
    a burst in one window cannot move (compare the pooled p99, where one burst sets the tail)."""
    windows = latencies[: latencies.size // window * window].reshape(-1, window)
    return float(np.median(np.percentile(windows, 99, axis=1)))


def carry_over(send: Send, names: tuple[str, str], blocks: int) -> None:
    """Mean latency by position after a switch to each model, in alternating blocks of 100 requests."""
    runs = np.array([[send(m, 100, 0) for m in names] for _ in range(blocks)])  # (block, model, position)
    by_position = {m: runs[:, k] for k, m in enumerate(names)}
    for m, lat in by_position.items():
        elapsed = np.cumsum(lat.mean(0))
        print(f"carry-over {m}: mean ms at positions 0-11 after the switch "
              + " ".join(f"{v:.2f}" for v in lat.mean(0)[:12])
              + f"; positions 20-99 {lat[:, 20:].mean():.2f}; position 12 ends {elapsed[11]:.0f} ms after the switch")


def sd(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="conv_attention", choices=sorted(BUILDERS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=6000, help="requests per model per design per run")
    parser.add_argument("--designs", default="500:0,100:25,25:10", help="BLOCK:DISCARDED,... (see the docstring)")
    parser.add_argument("--aa", action="store_true", help="the baseline against a copy of itself")
    parser.add_argument("--fresh-server", action="store_true", help="a new server for every run")
    parser.add_argument("--positions", type=int, default=0, help="blocks of 100 for the carry-over profile")
    parser.add_argument("--window", type=int, default=500, help="requests per window for the window-median p99")
    args = parser.parse_args()
    designs = [tuple(int(x) for x in d.split(":")) for d in args.designs.split(",")]
    ratios: dict[tuple[int, ...], list[tuple[float, float, float, float, float]]] = {d: [] for d in designs}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as server:
        model_path = BUILDERS[args.model](Path(tmp) / "model" / "model.onnx")
        for run in range(args.runs):
            if run == 0 or args.fresh_server:
                server.close()  # the previous run's server, if any (an ExitStack can be filled again)
                send, names = server.enter_context(served_pair(Path(tempfile.mkdtemp(dir=tmp)), model_path, args.aa))
            for block, discard in designs:
                lat = one_design(send, names, args.requests, block, discard, flip=run % 2 == 1)
                a, b = (lat[m] for m in names)
                p99a, p99b = np.percentile(a, 99), np.percentile(b, 99)
                p50a, p50b = np.percentile(a, 50), np.percentile(b, 50)
                wma, wmb = window_median_p99(a, args.window), window_median_p99(b, args.window)
                ratios[(block, discard)].append((p99a / p99b, p50a / p50b, p99a, p99b, wma / wmb))
                print(f"run {run + 1} design {block}:{discard}: p99 {p99a:.3f} / {p99b:.3f} ms = {p99a / p99b:.3f}; "
                      f"p50 ratio {p50a / p50b:.3f}; window-median p99 {wma:.3f} / {wmb:.3f} ms = {wma / wmb:.3f}",
                      flush=True)
        if args.positions:
            carry_over(send, names, args.positions)
    pair = "baseline / copy of itself" if args.aa else "spinning on / spinning off"
    print(f"\nmodel {args.model}, {pair}; {args.runs} runs of {args.requests} requests per model and design"
          f"{', a fresh server each run' if args.fresh_server else ', one server'}")
    for (block, discard), rs in ratios.items():
        p99 = np.log([r[0] for r in rs])
        p50 = np.log([r[1] for r in rs])
        wm = np.log([r[4] for r in rs])
        print(f"design {block}:{discard}: p99 ratio {np.exp(p99.mean()):.3f} (run-to-run sd {100 * sd(p99):.1f}%), "
              f"p50 ratio {np.exp(p50.mean()):.3f} (sd {100 * sd(p50):.1f}%), window-median p99 ratio "
              f"{np.exp(wm.mean()):.3f} (sd {100 * sd(wm):.1f}%); mean p99 "
              f"{np.mean([r[2] for r in rs]):.3f} / {np.mean([r[3] for r in rs]):.3f} ms")


if __name__ == "__main__":
    main()
