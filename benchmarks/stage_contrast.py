"""Does the finalist stage measure the selected pair as the re-measure does? (a benchmark script over finished
tunes, not a test; issue 16)

The selection estimate (the finalist run's baseline/winner ratio) sat below the re-measured gain in most
quiet conv_attention tunes. Both are the same two models at the same load, each on its own fresh server,
so this script asks which of the two moves between the stages, and whether the window before explains it.
It reads finished tunes' ``windows.csv`` (every counted window of every stage in the order run; re-measure
servers beyond the first are stages ``remeasure-2``, ...) and their report.json (who is the baseline and
who was selected) and prints:

* per tune: the mean log p99 of the winner's and the baseline's windows in the finalist stage minus the
  same in the re-measure (in %), their difference (what it does to the ratio), the reported gap, and how
  many models the finalist server judged;
* over tunes: each shift's mean with a one-sample t-test, and the correlation of the ratio's shift with
  the gap (the gap is a ratio of pooled p99s, so the two agree only roughly);
* the windows of both, pooled over tunes, by what ran just before on the same server (itself, the other
  of the pair, another candidate, nothing): mean log p99 against the tune's own mean for that model;
* the same windows regressed on the stage and on their time on the server (minutes since the stage's first
  window on it), standard errors clustered by tune: how much of the stage's shift the time explains.

    .venv/bin/python benchmarks/stage_contrast.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpt_triton.measure.window_log import WINDOWS_FILE, read_windows  # noqa: E402


def _stage(row: dict) -> str:
    """The stage a window belongs to: a re-measure's further servers are the re-measure's, the finalist stage's
    pair server (``finalists-pair``, where the estimate is measured) the finalist stage's."""
    return next((stage for stage in ("remeasure", "finalists") if row["stage"].startswith(stage)), row["stage"])


def _before(rows: list[dict], i: int, pair: dict[str, str]) -> str:
    """What ran just before window ``i`` on the same server (a stage's first window has nothing before it)."""
    if i == 0 or rows[i - 1]["stage"] != rows[i]["stage"]:
        return "nothing"
    prev = rows[i - 1]["candidate"]
    if prev == rows[i]["candidate"]:
        return "itself"
    return f"the {pair[prev]}" if prev in pair else "another candidate"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    shifts: list[tuple[float, float, float]] = []  # (winner, baseline, gap) in log
    by_before: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    timed: dict[str, list[tuple[float, float, float, int]]] = defaultdict(list)  # role: (centred log p99, finalists?, minutes, tune)
    for run_dir in args.run_dirs:
        if not (run_dir / WINDOWS_FILE).is_file() or not (run_dir / "report.json").is_file():
            print(f"{run_dir}: no windows.csv or report.json, skipped")
            continue
        report = json.loads((run_dir / "report.json").read_text())
        gain, winner = report.get("gain") or {}, report.get("selected_id")
        baseline = report.get("baseline_id")
        if not gain.get("selection_estimate_ratio") or winner in (None, baseline):
            print(f"{run_dir}: no selection estimate against the baseline, skipped")
            continue
        pair = {winner: "winner", baseline: "baseline"}
        rows = [r for r in read_windows(run_dir / WINDOWS_FILE) if _stage(r) in ("finalists", "remeasure")]
        first: dict[str, float] = {}
        minutes = []
        for r in rows:  # each server's stage has its own name (remeasure, remeasure-2, ...)
            ended = datetime.fromisoformat(r["ended_utc"].replace("Z", "+00:00")).timestamp()
            minutes.append((ended - first.setdefault(r["stage"], ended)) / 60.0)
        mean: dict[tuple[str, str], float] = {}
        for cid, role in pair.items():
            for stage in ("finalists", "remeasure"):
                values = [np.log(float(r["p99_ms"])) for r in rows if r["candidate"] == cid and _stage(r) == stage]
                mean[role, stage] = float(np.mean(values)) if values else float("nan")
            centre = float(np.mean([np.log(float(r["p99_ms"])) for r in rows if r["candidate"] == cid]))
            for i, r in enumerate(rows):
                if r["candidate"] == cid:
                    by_before[role, _stage(r), _before(rows, i, pair)].append(np.log(float(r["p99_ms"])) - centre)
                    timed[role].append((np.log(float(r["p99_ms"])) - centre, float(_stage(r) == "finalists"),
                                        minutes[i], len(shifts)))
        win = mean["winner", "finalists"] - mean["winner", "remeasure"]
        base = mean["baseline", "finalists"] - mean["baseline", "remeasure"]
        gap = float(np.log(gain["selection_estimate_ratio"] / gain["ratio"]["value"]))
        models = len({r["candidate"] for r in rows if r["stage"] == "finalists"})
        shifts.append((win, base, gap))
        print(f"{run_dir.name}: finalists - re-measure: winner {100 * win:+.1f}%, baseline {100 * base:+.1f}%, "
              f"ratio {100 * (base - win):+.1f}%; gap {100 * np.expm1(gap):+.1f}%; {models} models on the finalist server")
    if len(shifts) < 3:
        raise SystemExit(f"{len(shifts)} usable runs: at least 3 are needed")
    win, base, gap = (np.array(column) for column in zip(*shifts, strict=True))
    for name, values in (("winner", win), ("baseline", base), ("ratio (baseline - winner)", base - win)):
        test = stats.ttest_1samp(values, 0.0)
        print(f"\n{name}: mean shift {100 * values.mean():+.1f}% over {values.size} tunes "
              f"(higher in the finalist stage in {(values > 0).sum()}; t {test.statistic:+.2f}, p {test.pvalue:.2g})", end="")
    r = stats.pearsonr(base - win, gap)
    print(f"\nthe ratio's shift against the gap: r {r.statistic:+.2f} (p {r.pvalue:.2g})")
    print("\nwindows by what ran just before (mean log p99 against the tune's own mean for that model, in %):")
    for (role, stage, before), values in sorted(by_before.items()):
        v = np.array(values)
        se = v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
        print(f"  {role:8s} {stage:9s} after {before:16s} {v.size:5d} windows: {100 * v.mean():+6.1f}% (se {100 * se:.1f})")
    print("\nwindows against the stage and their time on the server (log p99, clustered by tune):")
    for role, points in sorted(timed.items()):
        y, finalist, age, tune = (np.array(column) for column in zip(*points, strict=True))
        for label, columns in (("stage alone", [finalist]), ("stage and time", [finalist, age])):
            beta, se = _clustered_ols(y, np.column_stack([np.ones_like(y), *columns]), tune.astype(int))
            terms = [f"finalist stage {100 * beta[1]:+.1f}% (se {100 * se[1]:.1f})"]
            if len(beta) > 2:
                terms.append(f"per minute on the server {100 * beta[2]:+.1f}% (se {100 * se[2]:.1f})")
            print(f"  {role:8s} {label:14s}: {', '.join(terms)}")


def _clustered_ols(y: np.ndarray, x: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares with the sandwich standard errors clustered by ``groups`` (windows of one tune share its drift)."""
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    residual = y - x @ beta
    bread = np.linalg.inv(x.T @ x)
    meat = sum(np.outer(x[groups == g].T @ residual[groups == g], x[groups == g].T @ residual[groups == g])
               for g in np.unique(groups))
    return beta, np.sqrt(np.diag(bread @ meat @ bread))


if __name__ == "__main__":
    main()
