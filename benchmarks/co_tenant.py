"""How much does another tenant move a pair's gain, and does the tuner see it? (a benchmark script, not a
test; issue 16)

A tune on a shared machine measures its gain under whatever else the machine runs. This script serves the
pair conv_attention tunes select (ONNX Runtime defaults, whose threads spin while they wait: ``a``, the
baseline; spinning off: ``b``; ``benchmarks/p99_spread.py``) on a fresh embedded Triton per run and sends
alternating blocks of ``--block`` requests at concurrency 1 through three phases of ``--phase-s`` seconds:
quiet, then with ``--cores`` processes spinning outside the run's process tree (another tenant:
``gpt_triton.testing.co_tenant``), then quiet again. Per phase it prints each model's pooled p99, the ratio
a/b (the gain a tune would claim), the p50 ratio, and what the tuner's own reading
(``gpt_triton.measure.machine_load``, taken around every block as around every window of a tune) says
other processes used.

    .venv/bin/python benchmarks/co_tenant.py [--runs 2] [--phase-s 45] [--cores 1] [--block 500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.p99_spread import served_pair  # noqa: E402
from benchmarks.perf_analyzer_agreement import BUILDERS  # noqa: E402
from gpt_triton.measure.machine_load import cores_during  # noqa: E402
from gpt_triton.testing.co_tenant import co_tenant  # noqa: E402

PHASES = ("quiet", "crowded", "quiet again")
DISCARD = 25  # requests after each switch not counted, as measure.settle_s does


def one_run(model: Path, phase_s: float, cores: int, block: int) -> list[tuple[float, float, float, float]]:
    """(p99 a, p99 b, p50 ratio a/b, other processes' cores) per phase, on one fresh server."""
    out = []
    with tempfile.TemporaryDirectory(prefix="co-tenant-") as root, \
            served_pair(Path(root), model, aa=False) as (send, names):
        for phase in PHASES:
            latencies: dict[str, list[float]] = {n: [] for n in names}
            foreign: list[float] = []
            with co_tenant(cores) if phase == "crowded" else nullcontext([]):
                began = time.monotonic()
                while time.monotonic() - began < phase_s:
                    for name in names:
                        sent, read = cores_during(partial(send, name, block, DISCARD))
                        latencies[name] += sent
                        if read is not None:
                            foreign.append(read[0])
            a, b = (np.asarray(latencies[n]) for n in names)
            out.append((float(np.percentile(a, 99)), float(np.percentile(b, 99)),
                        float(np.median(a) / np.median(b)), float(np.mean(foreign)) if foreign else float("nan")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="conv_attention", choices=sorted(BUILDERS))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--phase-s", type=float, default=45.0)
    parser.add_argument("--cores", type=int, default=1, help="processes spinning outside the run (default 1)")
    parser.add_argument("--block", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="co-tenant-model-") as scratch:
        model = BUILDERS[args.model](Path(scratch) / f"{args.model}.onnx")
        runs = []
        for run in range(args.runs):
            rows = one_run(model, args.phase_s, args.cores, args.block)
            runs.append(rows)
            print(f"run {run + 1}: " + "; ".join(
                f"{phase}: a {a:.2f} b {b:.2f} ms p99 a/b {a / b:.3f} p50 a/b {p50:.3f} others {others:.2f} cores"
                for phase, (a, b, p50, others) in zip(PHASES, rows, strict=True)), flush=True)
    print(f"\nmean over {len(runs)} runs (geometric; others arithmetic), {args.cores} outside core(s) spinning "
          f"in the crowded phase, {args.phase_s:g} s a phase:")
    for index, phase in enumerate(PHASES):
        a, b, p50 = (float(np.exp(np.mean([np.log(rows[index][k]) for rows in runs]))) for k in range(3))
        others = float(np.mean([rows[index][3] for rows in runs]))
        print(f"  {phase:12s} p99 a {a:.2f} ms, b {b:.2f} ms, a/b {a / b:.3f}; p50 a/b {p50:.3f}; "
              f"other processes {others:.2f} cores as the tuner reads them")


if __name__ == "__main__":
    main()
