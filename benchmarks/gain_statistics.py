"""Which statistic of a tune's own requests reads the gain perf_analyzer prints? (a benchmark script over
finished tunes, not a test; issue 16)

A tune's re-measured gain is paired by round: the geometric mean over rounds of p99(baseline window) /
p99(winner window), each window some 500 requests. perf_analyzer prints one p99 over the requests of its
last three stable windows merged, some 13,000 requests on conv_attention. On the same requests the two
kinds of statistic read 2.00 (pooled) and 2.29-2.45 (windows of 0.25-5 s) in the request trace of
2026-12-07 (docs/measurement.md): a window's p99 of 500 requests and a p99 of thousands are not the same
estimate where the quantile sits at the edge of isolated stalls.

Since windows.csv keeps each counted window's request latencies (``latencies.f32``), every such statistic
can be formed afterwards from the re-measure's own requests. For each RUN_DIR this prints the re-measure
pair's gain, and beside it the finalist pair's estimate formed the same way from its own rounds, as:

* ``paired``: the tuner's statistic (rounds of one window a side);
* ``blocks of k``: consecutive rounds grouped k at a time, each side's requests in a block pooled into one
  p99, the geometric mean over blocks with a t interval (k = 1 is ``paired``);
* ``pooled``: one p99 per side over every counted request (``baseline_ms / winner_ms``);

and, where ``gpt-triton recheck`` left records in RUN_DIR/rechecks/, each one against perf_analyzer's
printed p99 gain (both widths added), with the hours between.

    .venv/bin/python benchmarks/gain_statistics.py RUN_DIR [RUN_DIR ...] [--blocks 2 4 8] [--pair BASELINE OTHER]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from gpt_triton.core.cross_check import agreement_interval
from gpt_triton.core.measurements import Interval
from gpt_triton.measure.paired import log_ratio_interval
from gpt_triton.measure.window_log import read_windows, window_latencies
from gpt_triton.report import load_rechecks, load_report

REMEASURE, ESTIMATE = "remeasure", "finalists-pair"


def rounds_of(run_dir: Path, pair: tuple[str, str], stage: str = REMEASURE) -> list[tuple[np.ndarray, np.ndarray]]:
    """A stage's counted rounds holding a window of both sides: (baseline latencies, winner latencies)."""
    path = run_dir / "windows.csv"
    by_round: dict[int, dict[str, np.ndarray]] = {}
    for row in read_windows(path):
        if row["stage"] == stage and row["candidate"] in pair:
            by_round.setdefault(int(row["round"]), {})[row["candidate"]] = window_latencies(path, row)
    return [(sides[pair[0]], sides[pair[1]]) for _, sides in sorted(by_round.items())
            if len(sides) == 2 and all(len(v) for v in sides.values())]


def blocked(rounds: list[tuple[np.ndarray, np.ndarray]], k: int, q: float = 99.0) -> Interval:
    logs = []
    for start in range(0, len(rounds) - k + 1, k):  # a last, short block is left out
        base = np.concatenate([r[0] for r in rounds[start:start + k]])
        win = np.concatenate([r[1] for r in rounds[start:start + k]])
        logs.append(np.log(np.percentile(base, q) / np.percentile(win, q)))
    return log_ratio_interval(logs)


def show(label: str, iv: Interval) -> str:
    return f"{label} {iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def forms_of(rounds: list[tuple[np.ndarray, np.ndarray]], block_sizes: list[int]) -> dict[str, Interval]:
    forms = {"paired": blocked(rounds, 1)}
    for k in block_sizes:
        if len(rounds) // k >= 2:
            forms[f"blocks of {k}"] = blocked(rounds, k)
    base = np.concatenate([r[0] for r in rounds])
    win = np.concatenate([r[1] for r in rounds])
    pooled = float(np.percentile(base, 99) / np.percentile(win, 99))
    half = np.sqrt(forms["paired"].high / forms["paired"].low)  # no interval of its own here: paired's width lent
    forms["pooled"] = Interval(value=pooled, low=pooled / half, high=pooled * half)
    return forms


def one_run(run_dir: Path, block_sizes: list[int], pair: tuple[str, str] | None = None) -> None:
    report = load_report(run_dir)
    picked = pair[1] if pair else report.selected_id or report.winner_id
    baseline = pair[0] if pair else report.baseline_id
    if not pair and (report.gain is None or not baseline or not picked or picked == baseline):
        print(f"{run_dir}: no re-measured pair (if its re-measure ran even so, as in turns with the finalists, "
              "name the pair: --pair BASELINE OTHER)")
        return
    assert baseline and picked
    rounds = rounds_of(run_dir, (baseline, picked))
    if len(rounds) < 2:
        print(f"{run_dir}: windows.csv has no two re-measure rounds of {baseline} and {picked} with request latencies "
              "(a tune before they were kept, or a pair that was not re-measured)")
        return
    n = sum(len(b) + len(w) for b, w in rounds)
    claimed = f"{report.gain.ratio.value:.3f} ({report.gain.statistic})" if report.gain else "no gain claimed"
    print(f"\n{run_dir}: {baseline} against {picked}, {len(rounds)} rounds, {n} requests; report: {claimed}")
    forms = forms_of(rounds, block_sizes)
    estimate_rounds = rounds_of(run_dir, (baseline, picked), ESTIMATE)
    estimates = forms_of(estimate_rounds, block_sizes) if len(estimate_rounds) >= 2 else {}
    rechecks = load_rechecks(run_dir)
    for label, iv in forms.items():
        line = "  " + show(f"{label:>12}:", iv)
        if label in estimates:  # the finalist pair's estimate, formed the same way, against this re-measure
            line += f" (estimate {estimates[label].value:.3f}: {100 * (estimates[label].value / iv.value - 1):+.1f}%)"
        for r in rechecks:
            pa = r.gains.get("p99")
            if pa is not None:
                ratio, _ = agreement_interval(iv, pa)
                line += f"; / perf_analyzer at {r.hours_after_tune:.1f} h {ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}]"
        print(line)
    for r in rechecks:
        pa = r.gains.get("p99")
        if pa is not None:
            print("  " + show(f"perf_analyzer's printed p99 gain at {r.hours_after_tune:.1f} h "
                              f"({r.complete_rounds} rounds):", pa))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--blocks", nargs="*", type=int, default=[2, 4, 8])
    parser.add_argument("--pair", nargs=2, metavar=("BASELINE", "OTHER"),
                        help="candidate ids to read instead of the report's pair (a run that kept its baseline)")
    args = parser.parse_args()
    for run_dir in args.run_dirs:
        one_run(run_dir, args.blocks, tuple(args.pair) if args.pair else None)


if __name__ == "__main__":
    main()
