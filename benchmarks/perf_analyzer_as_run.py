"""Does a tune's gain survive perf_analyzer run as users run it? (a benchmark script, not a test; issue 16)

``gpt-triton recheck`` does the measuring (gpt_triton/recheck.py): one embedded Triton serves a finished
tune's baseline and selected candidate, and each round runs perf_analyzer once on each at its own defaults
(time windows of 1.2 x ``-p``, 5000 ms by default, until the last three agree within 10%, then ONE p99 over
the three windows' requests merged: InferenceProfiler::MergePerfStatusReports in NVIDIA's sources), the
tune's tuning-split inputs as ``--input-data``, the order flipping every round. This script runs it on
several run directories one after another and adds one comparison the command does not make: the tune's
own pooled figures (``baseline_ms / winner_ms``, the statistic perf_analyzer's printed p99 is), with the
re-measure's width lent to them.

    .venv/bin/python benchmarks/perf_analyzer_as_run.py RUN_DIR [RUN_DIR ...] [--rounds 6] [--interval-ms 5000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gpt_triton.core.cross_check import agreement_interval
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import Interval
from gpt_triton.recheck import recheck
from gpt_triton.report import load_report


def one_run(run_dir: Path, rounds: int, interval_ms: int) -> None:
    print(f"\n{run_dir}", flush=True)
    record, path = recheck(run_dir, rounds=rounds, interval_ms=interval_ms, say=lambda line: print(line, flush=True))
    for line in record.lines():
        print("  " + line)
    gain = load_report(run_dir).gain
    if gain is not None and gain.metric in record.gains and (pooled := gain.pooled_ratio()) is not None:
        half = np.sqrt(gain.ratio.high / gain.ratio.low)
        ratio, _ = agreement_interval(Interval(value=pooled, low=pooled / half, high=pooled * half),
                                      record.gains[gain.metric])
        print(f"  the tune's pooled figures {gain.baseline_ms:.3f} / {gain.winner_ms:.3f} ms = {pooled:.3f} are "
              f"{ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] of perf_analyzer's (the re-measure's width lent)")
    print(f"  wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--interval-ms", type=int, default=5000, help="perf_analyzer's -p (its default: 5000)")
    args = parser.parse_args()
    for run_dir in args.run_dirs:
        try:
            one_run(run_dir, args.rounds, args.interval_ms)
        except GptTritonError as exc:  # a missing report or artifact: one line, exit as the command does
            raise SystemExit(f"{run_dir}: {exc}") from None


if __name__ == "__main__":
    main()
