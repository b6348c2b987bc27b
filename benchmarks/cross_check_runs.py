"""Over finished tunes run with ``measure.cross_check: perf_analyzer``: is the tuner's re-measured gain within
5% of perf_analyzer's for the same two versions, measured in the same minutes? (a benchmark script over
finished tunes, not a test; issue 16)

Each tune's re-measure and perf_analyzer's rounds took turns on one server (gpt_triton/remeasure_step.py),
so what separates the two gains is the clients and their own samples. For each RUN_DIR this prints, from
its windows.csv (the ``remeasure`` and ``cross-check`` stages' windows, paired by round as the tuner forms
its gain):

* both clients' gains for the objective's statistic (p99) and for the p50, and the ratio of the two
  (tuner / perf_analyzer) with its interval from both widths (:func:`agreement_interval`) and its z;
* each client's median request per side (the client's own cost);
* the report's own cross-check line, when the run wrote one, as a check that the two readings agree;
* each client's baseline window p99 by what its round came right after (the stage of the window before
  the round's first, burn-ins included): since the two clients trade places every other cycle
  (gpt_triton/measure/relay.py, 2026-12-07), each follows two kinds of round, and the two figures side by side
  show whether what ran just before moves a client's baseline (benchmarks/switch_tail.py's question,
  asked of the tune itself).

Then, over the runs: how many are within 5% by the point, and the agreement pooled over them (a
random-effects mean on the log scale, :func:`between_servers`, with Cochran's Q: do the runs differ
beyond their own intervals). The pooled figure is what a per-run check at 24 windows a side cannot show:
whether one client's gain sits systematically apart from the other's.

    .venv/bin/python benchmarks/cross_check_runs.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import gmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpt_triton.core.cross_check import AGREEMENT_TOLERANCE, agreement_interval, within_tolerance  # noqa: E402
from gpt_triton.core.measurements import Interval, between_servers  # noqa: E402
from gpt_triton.measure.window_log import WINDOWS_FILE, read_windows, stage_pair_ratio  # noqa: E402

STAGES = ("remeasure", "cross-check")


def round_values(rows: list[dict[str, str]], stage: str, cid: str, column: str) -> list[float]:
    """``column`` of ``cid``'s counted windows in ``stage``, in round order."""
    picked = sorted((int(r["round"]), float(r[column])) for r in rows if r["stage"] == stage and r["candidate"] == cid)
    return [value for _, value in picked]


def after_what(every: list[dict[str, str]], stage: str) -> dict[int, str]:
    """Each counted round of ``stage``: the stage whose window ran right before the round's first window
    (``every``: windows.csv's rows in the order run, burn-in rows included)."""
    before: dict[int, str] = {}
    for previous, row in zip(every[:-1], every[1:], strict=True):
        if row["stage"] == stage and row["round"] != "0" and int(row["round"]) not in before:
            before[int(row["round"])] = previous["stage"]  # its own stage: right after its previous round
    return before


def baseline_by_predecessor(every: list[dict[str, str]], stage: str, baseline: str) -> dict[str, list[float]]:
    """``baseline``'s window p99 in ``stage``'s rounds, grouped by :func:`after_what` (the other client's
    rounds, the pair server's, or its own)."""
    before = after_what(every, stage)
    groups: dict[str, list[float]] = {}
    for row in every:
        if row["stage"] == stage and row["candidate"] == baseline and row["round"] != "0":
            groups.setdefault(before.get(int(row["round"]), "?"), []).append(float(row["p99_ms"]))
    return groups


def gains(rows: list[dict[str, str]], ids: tuple[str, str], column: str) -> dict[str, Interval] | None:
    """Each stage's baseline/winner gain for ``column`` (p50_ms, p99_ms), paired by round; None when a stage
    has no round with both sides."""
    remeasured, checked = (stage_pair_ratio(rows, stage, ids, column) for stage in STAGES)
    return None if remeasured is None or checked is None else dict(zip(STAGES, (remeasured, checked), strict=True))


def fmt(iv: Interval) -> str:
    return f"{iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    pooled: dict[str, list[Interval]] = {"p99": [], "p50": []}
    within = 0
    for run_dir in args.run_dirs:
        report = json.loads((run_dir / "report.json").read_text())
        gain = report.get("gain")
        rows = read_windows(run_dir / WINDOWS_FILE)
        if gain is None or not any(r["stage"] == "cross-check" for r in rows):
            print(f"{run_dir}: no cross-checked gain (gain {'none' if gain is None else 'not cross-checked'})")
            continue
        ids = (report["baseline_id"], report["selected_id"])
        print(f"{run_dir} ({report['run_id']}): baseline {ids[0]} vs {ids[1]}")
        for stat, column in (("p99", "p99_ms"), ("p50", "p50_ms")):
            each = gains(rows, ids, column)
            if each is None:
                print(f"  {stat}: a stage has no round with both sides")
                continue
            agreement, z = agreement_interval(each["remeasure"], each["cross-check"])
            pooled[stat].append(agreement)
            if stat == "p99":
                within += within_tolerance(agreement)
            print(f"  {stat}: tuner {fmt(each['remeasure'])}, perf_analyzer {fmt(each['cross-check'])}: "
                  f"tuner / perf_analyzer {fmt(agreement)} (z {z:+.2f})")
        for side, cid in zip(("baseline", "winner"), ids, strict=True):
            medians = [float(np.median(round_values(rows, stage, cid, "p50_ms"))) for stage in STAGES]
            print(f"  {side} median window p50: tuner {medians[0]:.3f} ms, perf_analyzer {medians[1]:.3f} ms "
                  f"({medians[0] / medians[1]:.3f})")
        every = read_windows(run_dir / WINDOWS_FILE, burn_in=True)
        for stage in STAGES:
            groups = baseline_by_predecessor(every, stage, ids[0])
            if groups:
                words = ", ".join(f"after {kind} {float(gmean(v)):.3f} ms ({len(v)})"
                                  for kind, v in sorted(groups.items()))
                print(f"  {stage}: baseline window p99 (geometric mean, windows) by the round before: {words}")
        if (check := gain.get("cross_check")) is not None:
            print(f"  the run's own line: agreement {check['agreement']['value']:.3f} "
                  f"[{check['agreement']['low']:.3f}, {check['agreement']['high']:.3f}]")
    runs = len(pooled["p99"])
    if not runs:
        return
    print(f"\n{within} of {runs} runs within {100 * AGREEMENT_TOLERANCE:.0f}% by the point (p99, the objective)")
    for stat, intervals in pooled.items():
        mean, spread = between_servers(intervals)
        print(f"pooled over {runs} runs, {stat}: tuner / perf_analyzer {fmt(mean)} (random effects); "
              f"Q {spread.q:.2f} on {runs - 1} df, p {spread.p_value:.2g}, between-run sd {100 * spread.between_sd:.1f}%")


if __name__ == "__main__":
    main()
