"""Does the burn-in absorb the transient it is there for? (a benchmark script over finished tunes, not a test;
issue 16)

``measure.burn_in_s`` sends each model on the pair server (``finalists-pair``) and on every re-measure
server ``burn_in_s`` seconds of uncounted traffic first, because a fresh server's first stretch of traffic
ran the selected conv_attention candidate faster than its steady state (benchmarks/server_age.py). The
burn-in's windows are in windows.csv as round 0. For each finished tune and burnt-in stage this script
prints the baseline/winner ratio of the mean log p99 (and of the mean latency) over three phases of the
same server: the burn-in's first half, its second half, and the counted windows; then, over tunes, the mean
of each phase's ratio against the counted windows' with a one-sample t-test. A transient the burn-in
absorbs shows as a first half above the counted windows and a second half near them.

A burn-in window holds what ``window_s`` of traffic gives (no request floor), fewer requests than a counted
p99 window, so its p99 sits lower for both models alike; compare the halves with each other first.

With ``--against RUN_DIR ...`` (tunes of the same spec without a burn-in, ``burn_in_s: 0``) it also compares
the re-measured gains themselves, by the candidate selected (the same route has the same id in every tune of
one spec): each group's geometric mean, their ratio and a Welch t-test on the log gains. A burn-in that
removes a young server's flattering minute shows as lower gains with it.

    .venv/bin/python benchmarks/burn_in_effect.py RUN_DIR [RUN_DIR ...] [--against RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpt_triton.measure.window_log import BURN_IN_ROUND, WINDOWS_FILE, read_windows  # noqa: E402

PHASES = ("burn-in, first half", "burn-in, second half", "counted")


def phase_ratios(rows: list[dict[str, str]], baseline: str, winner: str, column: str) -> list[float] | None:
    """log(baseline / winner) of the mean log ``column`` in each phase of one server's stage, or None when a
    phase lacks either model."""
    out = []
    burn = [r for r in rows if r["round"] == BURN_IN_ROUND]
    halves = (burn[: len(burn) // 2], burn[len(burn) // 2:])
    for phase in (*halves, [r for r in rows if r["round"] != BURN_IN_ROUND]):
        logs = {cid: [np.log(float(r[column])) for r in phase if r["candidate"] == cid] for cid in (baseline, winner)}
        if not all(logs.values()):
            return None
        out.append(float(np.mean(logs[baseline]) - np.mean(logs[winner])))
    return out


def remeasured_gains(run_dirs: list[Path]) -> dict[str, list[float]]:
    """Each tune's re-measured log gain, by the candidate it selected."""
    out: dict[str, list[float]] = defaultdict(list)
    for run_dir in run_dirs:
        report = json.loads((run_dir / "report.json").read_text()) if (run_dir / "report.json").is_file() else {}
        gain, selected = report.get("gain") or {}, report.get("selected_id")
        if gain.get("ratio") and selected not in (None, report.get("baseline_id")):
            out[selected].append(float(np.log(gain["ratio"]["value"])))
    return out


def compare_gains(burnt: list[Path], cold: list[Path]) -> None:
    with_it, without = remeasured_gains(burnt), remeasured_gains(cold)
    print("\nre-measured gains with the burn-in against without, by the candidate selected (geometric means):")
    for cid in sorted(set(with_it) & set(without)):
        a, b = np.array(with_it[cid]), np.array(without[cid])
        test = stats.ttest_ind(a, b, equal_var=False) if a.size > 1 and b.size > 1 else None
        tail = f"Welch t {test.statistic:+.2f}, p {test.pvalue:.2g}" if test is not None else "too few for a test"
        print(f"  {cid}: with {np.exp(a.mean()):.3f} ({a.size} tunes), without {np.exp(b.mean()):.3f} ({b.size} tunes): "
              f"with / without {np.exp(a.mean() - b.mean()):.3f} ({tail})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--against", nargs="+", type=Path, default=[], help="tunes of the same spec without a burn-in")
    args = parser.parse_args()
    shifts: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (stage kind, column, phase): log shifts
    for run_dir in args.run_dirs:
        if not (run_dir / WINDOWS_FILE).is_file() or not (run_dir / "report.json").is_file():
            print(f"{run_dir}: no windows.csv or report.json, skipped")
            continue
        report = json.loads((run_dir / "report.json").read_text())
        winner, baseline = report.get("selected_id"), report.get("baseline_id")
        if winner in (None, baseline):
            print(f"{run_dir}: the baseline was selected: no pair, skipped")
            continue
        by_stage: dict[str, list[dict[str, str]]] = defaultdict(list)
        for row in read_windows(run_dir / WINDOWS_FILE, burn_in=True):
            by_stage[row["stage"]].append(row)
        for stage, rows in by_stage.items():
            if not any(r["round"] == BURN_IN_ROUND for r in rows):
                continue
            kind = "pair server" if stage.startswith("finalists") else "re-measure"
            line = []
            for column in ("p99_ms", "mean_ms"):
                ratios = phase_ratios(rows, baseline, winner, column)
                if ratios is None:
                    continue
                line.append(f"{column[:-3]} " + ", ".join(f"{np.exp(r):.3f}" for r in ratios))
                for phase, r in zip(PHASES[:2], ratios[:2], strict=True):
                    shifts[kind, column, phase].append(r - ratios[2])
            burnt = sum(int(r["requests"]) for r in rows if r["round"] == BURN_IN_ROUND)
            print(f"{run_dir.name} {stage}: baseline/winner by phase ({', '.join(PHASES)}): {'; '.join(line)} "
                  f"({burnt} burn-in requests)")
    if not shifts:
        raise SystemExit("no tune with a burn-in and a pair: nothing to summarise")
    print("\nover tunes, each burn-in phase's ratio against the counted windows' on the same server:")
    for (kind, column, phase), values in sorted(shifts.items()):
        v = np.array(values)
        test = stats.ttest_1samp(v, 0.0) if v.size > 1 else None
        tail = f"t {test.statistic:+.2f}, p {test.pvalue:.2g}" if test is not None else "one tune"
        print(f"  {kind:11s} {column[:-3]:4s} {phase:21s}: {100 * np.expm1(v.mean()):+6.1f}% over {v.size} ({tail})")
    if args.against:
        compare_gains(args.run_dirs, args.against)


if __name__ == "__main__":
    main()
