"""Do the re-measure's two phases measure the same thing? (a benchmark script over finished tunes, not a test;
issue 16)

The re-measure runs ``measure.remeasure_windows`` rounds of the winner, the runner-up and the baseline in
a fixed A, B, C order, then goes on with the pair (baseline, winner) alone, alternating, until their ratio is
known to ``measure.gain_precision`` or the window cap. The finalist stage's estimate rests mostly on pair
windows of the second kind. This script reads finished tunes' RUN_DIRs (report.json, and windows.csv where
the run wrote one) and prints, per tune, the selection estimate's gap to the re-measured gain and how far the
winner's and the baseline's per-window p99 moved from the A, B, C rounds to the pair's rounds (the mean of
log p99 over windows, in %); with windows.csv also the finalist stage's windows of the same two, on the same
scale. Then, over all tunes: the mean shift, its sign count and a one-sample t-test, and the correlation
between the winner's shift and the gap (a shift that explained the gap would show as a slope near minus the
A, B, C rounds' share of the windows).

    .venv/bin/python benchmarks/remeasure_phases.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpt_triton.measure.window_log import WINDOWS_FILE, read_windows  # noqa: E402


def log_p99(windows: list[dict]) -> np.ndarray:
    return np.log([float(w["p99_ms"]) for w in windows])


def one_tune(run_dir: Path) -> dict[str, float] | None:
    report = json.loads((run_dir / "report.json").read_text())
    gain = report.get("gain") or {}
    if not gain.get("remeasured_winner") or not gain.get("selection_estimate_ratio"):
        return None
    fixed = int(report["spec"]["measure"]["remeasure_windows"])
    winner = log_p99(gain["remeasured_winner"]["windows"])
    base = log_p99(gain["remeasured_baseline"]["windows"])
    if min(winner.size, base.size) <= fixed:
        return None  # no pair rounds: nothing to compare the A, B, C rounds with
    out = {"gap": 100 * float(np.log(gain["selection_estimate_ratio"] / gain["ratio"]["value"])),
           "winner_shift": 100 * float(winner[fixed:].mean() - winner[:fixed].mean()),
           "base_shift": 100 * float(base[fixed:].mean() - base[:fixed].mean()), "share": fixed / winner.size}
    if (run_dir / WINDOWS_FILE).is_file():
        rows = read_windows(run_dir / WINDOWS_FILE)
        # selected_id is the candidate the re-measure compared with the baseline (winner_id may be the baseline)
        for key, cid, remeasured in (("winner", report["selected_id"], winner), ("base", report["baseline_id"], base)):
            finals = np.log([float(r["p99_ms"]) for r in rows if r["stage"] == "finalists" and r["candidate"] == cid])
            if finals.size:
                out[f"{key}_finalists_vs_abc"] = 100 * float(finals.mean() - remeasured[:fixed].mean())
                out[f"{key}_finalists_vs_pair"] = 100 * float(finals.mean() - remeasured[fixed:].mean())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    found: list[dict[str, float]] = []
    for run_dir in args.run_dirs:
        row = one_tune(run_dir)
        if row is None:
            print(f"{run_dir.name}: no re-measured pair with pair rounds")
            continue
        found.append(row)
        extra = "".join(f"; {k.replace('_', ' ')} {v:+.1f}%" for k, v in row.items() if "finalists" in k)
        print(f"{run_dir.name}: estimate/re-measure log gap {row['gap']:+.1f}%; per-window log p99, pair rounds against "
              f"A, B, C rounds: winner {row['winner_shift']:+.1f}%, baseline {row['base_shift']:+.1f}%{extra}")
    if len(found) < 3:
        return
    for key, who in (("winner_shift", "winner"), ("base_shift", "baseline")):
        v = np.array([r[key] for r in found])
        print(f"{who}: pair rounds against A, B, C rounds {v.mean():+.1f}% (sd {v.std(ddof=1):.1f}) over {v.size} tunes, "
              f"higher in {int((v > 0).sum())}; t-test p {stats.ttest_1samp(v, 0.0).pvalue:.2g}")
    shift, gap = np.array([r["winner_shift"] for r in found]), np.array([r["gap"] for r in found])
    fit = stats.linregress(shift, gap)
    print(f"log gap against the winner's shift: r {fit.rvalue:+.2f} (p {fit.pvalue:.2g}), slope {fit.slope:+.2f} "
          f"+/- {fit.stderr:.2f} (the A, B, C rounds hold {np.mean([r['share'] for r in found]):.0%} of the windows)")
    for key in ("winner_finalists_vs_abc", "winner_finalists_vs_pair", "base_finalists_vs_abc", "base_finalists_vs_pair"):
        v = np.array([r[key] for r in found if key in r])
        if v.size:
            print(f"{key.replace('_', ' ')}: {v.mean():+.1f}% over {v.size} tunes with windows.csv")


if __name__ == "__main__":
    main()
