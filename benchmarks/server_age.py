"""Does a pair's p99 ratio drift with the server's time up, and does it settle? (a benchmark script, not a
test; issue 16)

Over finished tunes (``benchmarks/stage_contrast.py``) the selected candidate's per-window p99 rose some
17% per minute of a stage's time on its fresh server, the baseline's about half that, so a gain measured
later in a server's life comes out lower, and the finalist stage, which runs longer before the pair's
windows, estimated lower gains than the re-measure. This script measures the drift itself, without a tune:
the pair conv_attention tunes select (ONNX Runtime defaults with spinning on, the baseline ``a``, against
spinning off, ``b``; ``benchmarks/p99_spread.py``) on a fresh embedded Triton per run, alternating blocks of
``--block`` requests (the first ``--discard`` after each switch not counted, as ``measure.settle_s`` does) for
``--minutes``, and prints per minute of the server's time each model's pooled p99 and their ratio a/b, per run
and as the mean log over runs: a drift that settles shows as a ratio that stops moving.

    .venv/bin/python benchmarks/server_age.py [--runs 3] [--minutes 8] [--block 500] [--discard 25] [--idle-s 0]

``--idle-s S`` leaves the loaded server idle for S seconds before the first block: if the ratio's first
minute is then already settled, the drift follows the server's clock (a burn-in could be a wait); if it
still starts high, it follows the traffic served (a burn-in must send requests). ``--prime-s S`` sends S
seconds of traffic to ``a`` alone first: if ``b``'s first minute is then settled, the server's traffic is what
matters; if ``b`` still starts fast, each model's own (a burn-in must reach every model).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.p99_spread import served_pair  # noqa: E402
from benchmarks.perf_analyzer_agreement import BUILDERS  # noqa: E402


def one_run(model: Path, minutes: float, block: int, discard: int,
            idle_s: float = 0.0, prime_s: float = 0.0) -> list[tuple[float, float, float]]:
    """(p99 a, p99 b, a / b) for each whole minute of traffic on one fresh server, after ``idle_s`` seconds
    of no traffic at all (whether the drift follows the server's clock or the requests it has served) and
    ``prime_s`` seconds of traffic to ``a`` alone (whether it follows the server's traffic or each model's)."""
    with tempfile.TemporaryDirectory(prefix="server-age-") as root, \
            served_pair(Path(root), model, aa=False) as (send, names):
        time.sleep(idle_s)  # the experiment's condition (an idle server), not a wait for anything
        primed = time.monotonic()
        while time.monotonic() - primed < prime_s:
            send(names[0], block, 0)
        began = time.monotonic()
        by_minute: dict[int, dict[str, list[float]]] = {}
        while (elapsed := time.monotonic() - began) < minutes * 60:
            for name in names:
                by_minute.setdefault(int(elapsed // 60), {n: [] for n in names})[name] += send(name, block, discard)
    rows = []
    for minute in sorted(by_minute)[: int(minutes)]:  # whole minutes only
        a, b = (float(np.percentile(by_minute[minute][n], 99)) for n in names)
        rows.append((a, b, a / b))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="conv_attention", choices=sorted(BUILDERS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--discard", type=int, default=25)
    parser.add_argument("--idle-s", type=float, default=0.0,
                        help="seconds the loaded server stays idle before the first block (default 0)")
    parser.add_argument("--prime-s", type=float, default=0.0,
                        help="seconds of traffic to a alone before the first counted block (default 0)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="server-age-model-") as scratch:
        model = BUILDERS[args.model](Path(scratch) / f"{args.model}.onnx")
        runs = []
        for run in range(args.runs):
            rows = one_run(model, args.minutes, args.block, args.discard, args.idle_s, args.prime_s)
            runs.append(rows)
            print(f"run {run + 1}: " + "; ".join(f"min {m}: a {a:.2f} b {b:.2f} a/b {r:.3f}"
                                                  for m, (a, b, r) in enumerate(rows)), flush=True)
    minutes = min(len(rows) for rows in runs)
    after = "".join([f" after {args.idle_s:g} s idle" if args.idle_s else "",
                     f" after {args.prime_s:g} s of traffic to a alone" if args.prime_s else ""])
    print(f"\nmean over {len(runs)} runs (geometric), by minute of traffic{after}:")
    for m in range(minutes):
        a, b, r = (float(np.exp(np.mean([np.log(rows[m][k]) for rows in runs]))) for k in range(3))
        print(f"  minute {m}: p99 a {a:.2f} ms, b {b:.2f} ms, a/b {r:.3f}")


if __name__ == "__main__":
    main()
