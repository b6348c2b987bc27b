"""Does a tune's gain survive perf_analyzer run as users run it? (a benchmark script, not a test; issue 16)

``gpt-triton recheck`` does the measuring (gpt_triton/recheck.py): one embedded Triton serves a finished
tune's baseline and selected candidate, and each round runs perf_analyzer once on each at its own defaults
(time windows of 1.2 x ``-p``, 5000 ms by default, until the last three agree within 10%, then ONE p99 over
the three windows' requests merged: InferenceProfiler::MergePerfStatusReports in NVIDIA's sources), the
tune's tuning-split inputs as ``--input-data``, the order flipping every round. This script runs it on
several run directories one after another and adds one comparison the command does not make: the tune's
own pooled figures (``baseline_ms / winner_ms``, the statistic perf_analyzer's printed p99 is), with the
re-measure's width lent to them.

With ``--kept`` it measures nothing: for each run it lists the rechecks kept in ``RUN_DIR/rechecks`` and the
latest one's pair pooled over those alike (:func:`gpt_triton.core.recheck.pool_rechecks`), then the tune's gain
as a fraction of each run's pooled perf_analyzer gain, over the runs (how many within 5%, and a random-effects
mean across them). Each check also shows the pace perf_analyzer saw (each side's p50, geometric mean over the
complete rounds), and the last line asks whether a check's gain follows the machine's pace: the slope of its
log p99 gain on the log of the baseline's p50, within runs (each run's checks about their own mean).

    .venv/bin/python benchmarks/perf_analyzer_as_run.py RUN_DIR [RUN_DIR ...] [--rounds 6] [--interval-ms 5000]
    .venv/bin/python benchmarks/perf_analyzer_as_run.py RUN_DIR [RUN_DIR ...] --kept
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from gpt_triton.core.cross_check import AGREEMENT_TOLERANCE, agreement_interval, within_tolerance
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import Interval, between_servers
from gpt_triton.core.recheck import Recheck, pool_rechecks
from gpt_triton.recheck import recheck
from gpt_triton.report import load_rechecks, load_report
from gpt_triton.report.fmt import fmt_ratio_interval


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


def pace(record: Recheck) -> tuple[float, float] | None:
    """The baseline's and the winner's p50 (ms) as perf_analyzer printed them, geometric mean over the
    complete rounds: how fast the machine ran the pair during the check."""
    rounds = [r for r in record.rounds if r.baseline_p50_ms and r.winner_p50_ms]
    if not rounds:
        return None
    return (float(np.exp(np.mean([np.log(r.baseline_p50_ms or 1.0) for r in rounds]))),
            float(np.exp(np.mean([np.log(r.winner_p50_ms or 1.0) for r in rounds]))))


def kept(run_dir: Path, paced: list[np.ndarray]) -> Interval | None:
    """Print ``run_dir``'s rechecks and their series; the tune's gain / the pooled one, None without a series.
    Appends the series' checks to ``paced`` as rows of (log baseline p50, log p99 gain) about their own mean."""
    print(f"\n{run_dir}")
    records = load_rechecks(run_dir)
    if not records:
        print("  no rechecks kept")
        return None
    latest = records[-1]
    own: list[tuple[float, float]] = []
    for r in records:
        g = r.gains.get(r.metric)
        mark = "" if r.alike(latest) else " (not alike the latest: left out)"
        seen = pace(r)
        print(f"  {r.created} at {r.hours_after_tune:.1f} h: {r.rounds_done} rounds, perf_analyzer's "
              f"{r.metric} gain " + (fmt_ratio_interval(g) if g else "none") + mark
              + (f"; p50 baseline {seen[0]:.3f}, winner {seen[1]:.3f} ms" if seen else ""))
        if seen and g and r.alike(latest):
            own.append((float(np.log(seen[0])), float(np.log(g.value))))
    if len(own) > 1:
        paced.append(np.array(own) - np.mean(own, axis=0))
    series = pool_rechecks(records, latest)
    if series is None:
        print("  one recheck alike: nothing to pool")
        return None
    print("  " + series.line(latest.tune_gain, latest.tune_statistic))
    return series.agreement


def pace_line(paced: Sequence[np.ndarray]) -> str:
    """The within-run slope of log gain on log baseline p50, its standard error and p (the runs' means use up
    a degree of freedom each), and the correlation."""
    runs = len(paced)
    x, y = np.concatenate(paced).T
    slope = float(x @ y / (x @ x))
    df = len(x) - runs - 1
    se = float(np.sqrt(((y - slope * x) @ (y - slope * x)) / df / (x @ x)))
    p = float(2 * stats.t.sf(abs(slope / se), df))
    r = float(np.corrcoef(x, y)[0, 1])
    return (f"a check's p99 gain against the machine's pace, within runs ({len(x)} checks of {runs} runs): "
            f"{slope:+.2f} ± {se:.2f} in the log per log of the baseline's p50 (p {p:.2g}, r {r:+.2f}): "
            f"a check in which the baseline ran 10% slower read the gain {100 * (1.1 ** slope - 1):+.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--interval-ms", type=int, default=5000, help="perf_analyzer's -p (its default: 5000)")
    parser.add_argument("--kept", action="store_true", help="measure nothing: pool the rechecks each run kept")
    args = parser.parse_args()
    if args.kept:
        try:
            paced: list[np.ndarray] = []
            found = {run_dir: kept(run_dir, paced) for run_dir in args.run_dirs}
        except GptTritonError as exc:
            raise SystemExit(str(exc)) from None
        pooled = [a for a in found.values() if a is not None]
        if pooled:
            within = sum(within_tolerance(a) for a in pooled)
            print(f"\nthe tune's gain / perf_analyzer's pooled over its rechecks: {within} of {len(pooled)} runs within "
                  f"{100 * AGREEMENT_TOLERANCE:.0f}% (" + ", ".join(f"{a.value:.3f}" for a in pooled) + ")")
            if len(pooled) > 1:
                mean, spread = between_servers(pooled)
                print(f"over the runs (random effects): {mean.value:.3f} [{mean.low:.3f}, {mean.high:.3f}]; "
                      f"Q {spread.q:.2f} on {len(pooled) - 1} df, p {spread.p_value:.2g}")
        if sum(len(rows) for rows in paced) > len(paced) + 2:
            print(pace_line(paced))
        return
    for run_dir in args.run_dirs:
        try:
            one_run(run_dir, args.rounds, args.interval_ms)
        except GptTritonError as exc:  # a missing report or artifact: one line, exit as the command does
            raise SystemExit(f"{run_dir}: {exc}") from None


if __name__ == "__main__":
    main()
