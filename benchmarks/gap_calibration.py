"""Are the selection estimate's and the re-measure's intervals honest, and what would it take for the two
to agree within 5%? (a benchmark script over finished tunes, not a test; issue 16)

Issue 16 asks that a tune's selection estimate (the finalist run) lie within 5% of the separately
re-measured gain in 4 of 5 tunes. Every tune's report.json holds both, each with a 95% interval, and
their gap as a z score (``Gain.between_runs``: the log gap over the standard error both widths imply).
Over many finished RUN_DIRs this prints:

* each run's gap and z;
* whether the intervals are calibrated: the sd of z (1 when they are), the count beyond 1.96 against
  the 5% expected, the mean z (a selection bias shows as a shifted mean);
* the observed sd of the log gap against the sd the intervals predict (their root mean square), and the
  part of the gap no interval accounts for (the runs' own difference, e.g. each server's state);
* what the target asks: the per-run standard error of the log gain at which |gap| <= 5% in 4 of 5
  tunes, given that unexplained part, and how many times the present windows that takes (the standard
  error falls as one over the square root of the windows).
* where the run's windows.csv says what else the machine ran (``foreign_cores``), the cores other
  processes used during the finalist pair's windows and during the re-measure's: a gap beyond the
  intervals with one stage crowded is the machine's load, not the sampling;
* for runs re-measured on several servers (``measure.remeasure_servers``): each server's ratio, and over
  all such runs whether the servers differ beyond their own intervals (Cochran's Q summed against
  chi-square) and the between-server sd of the log gain (the moment estimate pooled over the runs, which
  a single run's two or three servers give only roughly).

    .venv/bin/python benchmarks/gap_calibration.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpt_triton.core.measurements import (  # noqa: E402
    ServerSpread,
    WindowResult,
    heterogeneity,
    log_standard_error,
)
from gpt_triton.core.records import Gain  # noqa: E402
from gpt_triton.measure.machine_load import machine_load  # noqa: E402
from gpt_triton.measure.window_log import WINDOWS_FILE, read_windows, stage_pair_ratio  # noqa: E402

TARGET = 0.05  # |estimate / re-measure - 1|
SHARE = 0.8  # in 4 of 5 tunes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--paired-from-windows", action="store_true",
                        help="recompute both runs' ratios paired by round (measure.gain_statistic: paired) from each "
                             "run's windows.csv, whatever statistic the run itself used")
    args = parser.parse_args()
    gaps, zs, predicted = [], [], []
    spreads: list[ServerSpread] = []
    for run_dir in args.run_dirs:
        path = run_dir / "report.json"
        if not path.is_file():
            print(f"{run_dir}: no report.json, skipped")
            continue
        # Only the gain is read, so reports of runs with other (or patched) specs read too.
        raw = json.loads(path.read_text()).get("gain")
        gain = Gain.model_validate(raw) if raw else None
        if gain is not None and args.paired_from_windows:
            gain = paired_from_windows(run_dir, gain)
        between = gain.between_runs() if gain is not None else None
        if gain is None or gain.selection_estimate is None or between is None:
            print(f"{run_dir}: no selection estimate with an interval (no finalist stage), skipped")
            continue
        se = float(np.hypot(log_standard_error(gain.selection_estimate), log_standard_error(gain.ratio)))
        gaps.append(np.log1p(between.relative))
        zs.append(between.z)
        predicted.append(se)
        print(f"{run_dir.parent.name}/{run_dir.name}: estimate {gain.selection_estimate.value:.3f}, re-measured {gain.ratio.value:.3f}: "
              f"gap {100 * between.relative:+.1f}%, z {between.z:+.2f} (se of the log gap {se:.3f})")
        if (loads := stage_loads(run_dir)) is not None:
            print(f"    other processes: {loads}")
        if gain.servers is not None:
            spreads.append(gain.servers)
            print(f"    {gain.servers.describe()}")
    if len(zs) < 3:
        raise SystemExit(f"{len(zs)} usable runs: at least 3 are needed")
    z, gap, pred = np.array(zs), np.array(gaps), np.array(predicted)
    within = int((np.abs(np.expm1(gap)) <= TARGET).sum())
    observed = float(np.sqrt(np.mean(gap**2)))  # about 0, not about the mean: a bias counts against the target
    expected = float(np.sqrt(np.mean(pred**2)))
    unexplained = float(np.sqrt(max(0.0, observed**2 - expected**2)))
    print(f"\n{len(z)} runs; |gap| <= {100 * TARGET:.0f}% in {within}")
    print(f"z: sd {z.std(ddof=1):.2f} (1 if the intervals are calibrated), mean {z.mean():+.2f} "
          f"(t {z.mean() / (z.std(ddof=1) / np.sqrt(z.size)):+.2f}), |z| > 1.96 in {(np.abs(z) > 1.96).sum()} "
          f"(expected {0.05 * z.size:.1f})")
    print(f"log gap: root mean square {observed:.3f} (mean {gap.mean():+.3f}, sd {gap.std(ddof=1):.3f}); "
          f"the intervals predict {expected:.3f}; unexplained {unexplained:.3f}")
    if spreads:
        between_servers_summary(spreads)
    # |gap| <= TARGET with probability SHARE for a centred normal gap: its sd at most TARGET / z_(1+SHARE)/2.
    allowed = float(np.log1p(TARGET) / stats.norm.ppf(0.5 + SHARE / 2))
    per_run_now = expected / np.sqrt(2)
    if unexplained >= allowed:
        print(f"target: the gap's root mean square must be <= {allowed:.3f}; the unexplained part alone is {unexplained:.3f}: "
              "no number of windows in one run reaches it")
        return
    per_run = float(np.sqrt((allowed**2 - unexplained**2) / 2))
    print(f"target: the gap's root mean square must be <= {allowed:.3f}: each run's log-gain se <= {per_run:.3f} "
          f"(now {per_run_now:.3f}), about {(per_run_now / per_run) ** 2:.1f}x the windows of each run")


def paired_from_windows(run_dir: Path, gain: Gain) -> Gain | None:
    """``gain`` with its estimate and re-measured ratio recomputed paired by round from windows.csv (each
    window's objective statistic as logged, the baseline's and the selected candidate's windows of one round
    paired, set-aside windows left out); None without windows.csv or for a multi-server re-measure."""
    report = json.loads((run_dir / "report.json").read_text())
    path = run_dir / WINDOWS_FILE
    if not path.is_file() or gain.servers is not None or gain.metric not in ("p50", "p90", "p99", "mean"):
        return None
    rows = read_windows(path)
    pair = (report["baseline_id"], report.get("selected_id") or report["winner_id"])

    estimate, remeasured = (stage_pair_ratio(rows, stage, pair, f"{gain.metric}_ms", min_rounds=3)
                            for stage in ("finalists-pair", "remeasure"))
    if estimate is None or remeasured is None:
        return None
    return gain.model_copy(update={"ratio": remeasured, "selection_estimate": estimate,
                                   "selection_estimate_ratio": estimate.value})


def stage_loads(run_dir: Path) -> str | None:
    """The finalist pair's and the re-measure's machine load from windows.csv; None before it had them."""
    path = run_dir / WINDOWS_FILE
    if not path.is_file():
        return None
    rows = [r for r in read_windows(path) if r.get("foreign_cores")]
    parts = []
    for stage, label in (("finalists-pair", "finalist pair"), ("remeasure", "re-measure")):
        load = machine_load([WindowResult(duration_s=float(r["duration_s"]), requests=int(r["requests"]), errors=0,
                                          throughput=0.0, p50_ms=0.0, p90_ms=0.0, p99_ms=0.0, mean_ms=0.0,
                                          foreign_cores=float(r["foreign_cores"]),
                                          steal_cores=float(r["steal_cores"] or 0.0))
                             for r in rows if r["stage"] == stage])
        if load is not None:
            parts.append(f"{label} {load.mean_cores:.2f} cores ({load.crowded} of {load.windows} windows crowded)")
    return "; ".join(parts) or None


def between_servers_summary(spreads: list[ServerSpread]) -> None:
    """Over runs re-measured on several servers: do servers differ beyond their intervals, and by how much?"""
    q = sum(sp.q for sp in spreads)
    df = sum(len(sp.servers) - 1 for sp in spreads)
    # DerSimonian-Laird's moment estimate per run, unclipped, averaged: one run's is rough, many runs' less so.
    moments = [heterogeneity(sp.servers)[1] for sp in spreads]
    tau2 = float(np.mean(moments))
    print(f"between servers ({len(spreads)} runs, {sum(len(sp.servers) for sp in spreads)} servers): Q {q:.1f} on {df} df "
          f"(p {stats.chi2.sf(q, df):.2g}); between-server sd of the log gain {np.sqrt(max(tau2, 0.0)):.3f} "
          f"(moment estimate {tau2:+.4f}, se {np.std(moments, ddof=1) / np.sqrt(len(moments)) if len(moments) > 1 else float('nan'):.4f})")


if __name__ == "__main__":
    main()
