"""What Triton's latency summaries, and reading them, cost the tail they report (a benchmark script, not a
test).

The canary gates read p99 from Triton 2.51's latency summaries, which exist only with
``--metrics-config=summary_latencies=true``. Triton then folds every request's request, queue and compute
durations into prometheus-cpp summaries (by default the quantiles 0.5, 0.9, 0.95, 0.99 and 0.999, the
last three to 0.1% rank error) on the request path, and computes the quantiles when /metrics is read. The
tuner reads /metrics before and after every window for Triton's counters; a Prometheus in production
every 15-30 s. This script serves the pair conv_attention tunes select (ONNX Runtime defaults with
spinning on, the tuner's baseline, against spinning off) on an embedded Triton started in each of these
settings, a fresh server each, in rotated order within every run:

* ``off``: no summaries (``--metrics-config`` not given);
* ``default``: ``summary_latencies=true``, Triton's five quantiles: what the embedded server and the
  chart pass;
* ``p99``: ``summary_latencies=true`` with ``summary_quantiles=0.99:0.001``, only the quantile the gates
  read;
* ``scraped``: ``default``, and /metrics read after every window (untimed), as the tuner does.

Each server gets ``--requests`` requests per model at concurrency 1 from the lean gRPC sender, the two
models alternating in windows of 500. Printed per run and setting: each model's p50 and p99; then per
setting and model the p99 and p50 relative to the first setting in the same run (geometric mean over
runs, a t interval over the runs' log ratios, and in how many runs it was higher).

    .venv/bin/python benchmarks/summary_cost.py [--runs 16] [--requests 4000] [--settings off,default,p99,scraped]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.p99_spread import one_design, served_pair  # noqa: E402
from benchmarks.perf_analyzer_agreement import BUILDERS  # noqa: E402
from gpt_triton.server import SUMMARY_METRICS_ARGS  # noqa: E402

# name -> (the server's metrics flags, read /metrics after every window)
SETTINGS: dict[str, tuple[tuple[str, ...], bool]] = {
    "off": ((), False),
    "default": (tuple(SUMMARY_METRICS_ARGS), False),
    "p99": ((*SUMMARY_METRICS_ARGS, "--metrics-config=summary_quantiles=0.99:0.001"), False),
    "scraped": (tuple(SUMMARY_METRICS_ARGS), True),
}
ROLES = ("spinning on", "spinning off")


def interval(log_ratios: np.ndarray) -> str:
    """Geometric mean ratio, its 95% t interval over runs, and the count of runs above 1."""
    mean = log_ratios.mean()
    half = stats.t.ppf(0.975, log_ratios.size - 1) * log_ratios.std(ddof=1) / np.sqrt(log_ratios.size)
    return (f"{np.exp(mean):.3f} [{np.exp(mean - half):.3f}, {np.exp(mean + half):.3f}], "
            f"higher in {(log_ratios > 0).sum()}/{log_ratios.size}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="conv_attention", choices=sorted(BUILDERS))
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--requests", type=int, default=4000, help="requests per model per setting per run")
    parser.add_argument("--settings", default="off,default,p99,scraped",
                        help="comma-separated, the first is the reference: " + ", ".join(SETTINGS))
    args = parser.parse_args()
    names = args.settings.split(",")
    if unknown := sorted(set(names) - set(SETTINGS)):
        parser.error(f"unknown settings {unknown}: choose from {', '.join(SETTINGS)}")
    if args.runs < 2 or len(names) < 2:
        parser.error("at least 2 runs and 2 settings (the interval is over runs, relative to the first setting)")
    # p99 and p50 per (setting, role), one entry per run
    p99: dict[tuple[str, str], list[float]] = {(n, r): [] for n in names for r in ROLES}
    p50: dict[tuple[str, str], list[float]] = {(n, r): [] for n in names for r in ROLES}
    with tempfile.TemporaryDirectory() as tmp:
        model_path = BUILDERS[args.model](Path(tmp) / "model" / "model.onnx")
        for run in range(args.runs):
            order = names[run % len(names):] + names[:run % len(names)]  # rotated: no setting always first
            for name in order:
                metrics_args, scrape = SETTINGS[name]
                root = Path(tempfile.mkdtemp(dir=tmp))
                with served_pair(root, model_path, False, metrics_args, scrape) as (send, pair):
                    latencies = one_design(send, pair, args.requests, 500, 0, flip=run % 2 == 1)
                cells = []
                for role, model in zip(ROLES, pair, strict=True):
                    p99[(name, role)].append(float(np.percentile(latencies[model], 99)))
                    p50[(name, role)].append(float(np.percentile(latencies[model], 50)))
                    cells.append(f"{role} p50 {p50[(name, role)][-1]:.3f} p99 {p99[(name, role)][-1]:.3f} ms")
                print(f"run {run + 1} {name:7s}: " + "; ".join(cells), flush=True)
    print(f"\nmodel {args.model}; {args.runs} runs, {args.requests} requests per model and setting, a fresh server "
          f"each; relative to '{names[0]}' in the same run: geometric mean [95% t interval over runs]")
    for name in names[1:]:
        for role in ROLES:
            r99 = np.log(np.array(p99[(name, role)]) / np.array(p99[(names[0], role)]))
            r50 = np.log(np.array(p50[(name, role)]) / np.array(p50[(names[0], role)]))
            print(f"{name:7s} {role:12s}: p99 {interval(r99)}; p50 {interval(r50)}")


if __name__ == "__main__":
    main()
