"""How many windows does racing need, and how many does the regret judge need, at a run's window noise?
(a benchmark script over finished runs, not a test; issue 16)

`benchmarks/search_regret.py` asks racing to reach the exhaustive run's choice within 2% of regret, by the
upper bound of the judged regret, at no more than a quarter of the exhaustive run's time. Both halves depend
on how noisy one window's objective is, and that differs by an order of magnitude between objectives: a
p50 on the ResNet CNN moves some 7-15% from window to window, a p99 on conv_attention some 17-32%. This
script turns a run's own windows into what that noise costs, before any racing is run:

* the drift model of :mod:`gpt_triton.measure.racing` fitted to the windows (window noise ``sigma``, the
  lag-1 correlation, each candidate's effect);
* for each candidate, the windows each it and the leader need before racing can drop it at the fitted
  ratio: the one-sided bound at racing's Bonferroni error (:func:`race_alpha`) must clear 1, so
  ``n >= 2 (z sigma / ln r)^2``; a candidate that needs more than ``max_windows`` runs to the cap (a tie);
* the sum over candidates as a fraction of the exhaustive run's windows (``--exhaustive-windows`` each):
  racing's share of the time if every candidate ran until dropped or to the cap (the finalist stage comes on
  top). Racing's futility and stability stops end some ties sooner: on the ResNet CNN's saved windows this
  reads 0.24, where racing measured 0.18-0.20 (docs/measurement.md);
* the windows each that the regret judge needs to bound a true regret of 0 under 2% by the upper end of one
  look's two-sided 98.75% interval (four looks at 95% jointly), ``n = 2 (q sigma / ln 1.02)^2``, q = 2.50.

The neighbour correlation is left out of the counts (it helps candidates measured side by side and hurts
the rest), so they are what independent windows would need.

Inputs: a tune's RUN_DIR (its ``windows.csv``, stage ``search``, the objective in ``report.json``) or a
window file that ``search_regret.py`` kept (``{"windows": {load: [RaceWindow fields, ...]}}``).

    .venv/bin/python benchmarks/regret_power.py RUN_DIR_OR_WINDOWS_JSON [...] [--exhaustive-windows 13]

A path that is neither (missing, not JSON, no windows) is one line on stderr naming it, exit 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from scipy import stats

from gpt_triton.core.errors import GptTritonError
from gpt_triton.measure.racing import RaceWindow, drift_fit, race_alpha
from gpt_triton.measure.window_log import read_windows
from gpt_triton.report import load_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, when run as a script
from benchmarks.search_regret import read_dump  # noqa: E402

JUDGE_LOOK_LEVEL = 1.0 - 0.05 / 4  # each of the judge's four looks is a two-sided interval at this level (search_regret.py)
REGRET_TARGET = 0.02


def windows_of_run(run_dir: Path) -> tuple[list[RaceWindow], str, int, float]:
    """The search stage's windows in the order they ran, the objective, max_windows and confidence."""
    spec = load_report(run_dir).spec
    metric = spec.objective.metric
    rows = [r for r in read_windows(run_dir / "windows.csv") if r["stage"] == "search"]
    windows = [RaceWindow(candidate=r["candidate"], round=int(r["round"]), value=math.log(float(r[f"{metric}_ms"])))
               for r in rows if float(r[f"{metric}_ms"]) > 0]
    return windows, metric, spec.measure.max_windows, spec.measure.confidence


def read_source(source: Path) -> tuple[list[RaceWindow], str, int | None, float | None]:
    """A run directory's or a window file's windows; SystemExit(2) with one line naming what is wrong."""
    try:
        if source.is_dir():
            return windows_of_run(source)
        return read_dump(source), "objective", None, None
    except (GptTritonError, OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        kind = "run directory (windows.csv, report.json)" if source.is_dir() else "window file of search_regret.py --dump"
        print(f"regret_power: {source} is not a readable {kind}: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def drop_windows(ratio: float, sigma: float, z: float) -> float:
    """Windows each before a candidate ``ratio`` times the leader's objective is dropped (inf at a tie)."""
    gap = math.log(ratio)
    return math.inf if gap <= 0 else 2.0 * (z * sigma / gap) ** 2


def one(source: Path, exhaustive_windows: int, max_windows: int | None, confidence: float) -> None:
    windows, metric, run_cap, run_confidence = read_source(source)
    confidence = run_confidence or confidence
    cap = max_windows or run_cap or 10
    fit = drift_fit(windows)
    if fit is None:
        print(f"{source}: too few windows for the drift model")
        return
    sigma = math.sqrt(fit.sigma2)
    counts: dict[str, int] = {}
    for w in windows:
        counts[w.candidate] = counts.get(w.candidate, 0) + 1
    n_cand = len(fit.candidates)
    z = float(stats.norm.ppf(1.0 - race_alpha(confidence, n_cand, cap)))
    best = min(fit.mu.values())
    ratios = sorted(math.exp(m - best) for m in fit.mu.values())
    needs = [min(float(cap), max(1.0, math.ceil(drop_windows(r, sigma, z)))) for r in ratios[1:]]
    spent = cap + sum(needs)  # the leader runs to the cap with the last of them
    q = float(stats.norm.ppf(0.5 + JUDGE_LOOK_LEVEL / 2))  # the upper end of the judge's two-sided interval
    judge = 2.0 * (q * sigma / math.log(1.0 + REGRET_TARGET)) ** 2
    print(f"{source}: {metric}, {len(windows)} windows of {n_cand} candidates ({min(counts.values())}-"
          f"{max(counts.values())} each); window noise {100 * sigma:.1f}% (drift model, df {fit.df}), "
          f"neighbour correlation {fit.rho:.2f}")
    within = [r for r in ratios if r < 1.3]
    print(f"  ratios to the best: {len(within)} within 1.3x, {sum(r < 1.5 for r in ratios)} within 1.5x, "
          f"{sum(r < 2.0 for r in ratios)} within 2x (the best counted)")
    for r in (1.1, 1.3, 1.5, 2.0):
        print(f"  dropping a candidate {r:.1f}x the leader takes {drop_windows(r, sigma, z):5.1f} windows each "
              f"(racing's error {race_alpha(confidence, n_cand, cap):.2g}, z {z:.2f})")
    ties = sum(1 for n in needs if n >= cap)
    print(f"  racing until dropped or capped: {spent:.0f} windows ({ties} candidates at the cap of {cap}), "
          f"{spent / (n_cand * exhaustive_windows):.2f} of an exhaustive run of {exhaustive_windows} each "
          f"(target 0.25, before the finalist stage)")
    print(f"  the judge needs {judge:.0f} windows each to bound a zero regret under {100 * REGRET_TARGET:.0f}% "
          f"by the upper end of a {100 * JUDGE_LOOK_LEVEL:.2f}% interval (search_regret.py's looks stop at 256)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sources", type=Path, nargs="+")
    parser.add_argument("--exhaustive-windows", type=int, default=13,
                        help="windows each in the exhaustive reference (search_regret.py: --windows 12 and the first)")
    parser.add_argument("--max-windows", type=int, default=None,
                        help="racing's cap (default: the run's measure.max_windows; 10 for a window file)")
    parser.add_argument("--confidence", type=float, default=0.95)
    args = parser.parse_args()
    for source in args.sources:
        one(source, args.exhaustive_windows, args.max_windows, args.confidence)


if __name__ == "__main__":
    main()
