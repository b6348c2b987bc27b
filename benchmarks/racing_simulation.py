"""What would racing and the finalist stage cost, and choose, on a model's own noise? (exploratory; no server)

The tuner's own :class:`gpt_triton.measure.harness.Measurer` (racing's drops, stability, futility) and
finalist stage (:func:`gpt_triton.steps.contenders`, :func:`gpt_triton.select.select_finalists`), run as
``benchmarks/search_regret.py`` runs them, against a simulated load client: each window's latencies are
the candidate's effect from the drift model fitted to a kept exhaustive run (``search_regret.py --dump``),
times a window error with that fit's noise and neighbour correlation, times each request's own spread
(``--request-sd``, log scale: it sets the within-window variance racing's first round drops on; match it
to the kept run's, which this prints). A warm-up costs 0.4 s, a window 0.6 s and holds 200 requests by
default (conv_attention's exhaustive run at 0.5 s windows: 186 s over 312 windows; ``--warm-up-cost``,
``--window-cost``, ``--requests`` for another), and the fraction is of a simulated exhaustive run of the kept
run's windows. "Regret" is against the fitted effects, which carry the exhaustive run's own error.
``--noise-scale`` asks what a quieter or busier machine would give; ``--set FIELD=VALUE`` changes a measure
spec field, ``--rest`` adds a rule that was tried and not shipped (:func:`resting`).

A design tool, not a measurement: it runs the same rules on stationary noise, many times, so two rules
can be compared on the same draws; the real machine's figures are search_regret.py's.

    .venv/bin/python benchmarks/racing_simulation.py WINDOWS_JSON [--runs 40] [--request-sd 0.45] [--rest] [--set max_windows=6]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError
from scipy import stats

import gpt_triton.measure.harness as harness
from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.core.outcomes import apply_outcomes
from gpt_triton.core.records import Candidate, DeployInfo
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.driver import WindowSample
from gpt_triton.measure.race_step import race_step
from gpt_triton.measure.racing import DriftFit, drift_fit, race_alpha, race_round, window_log_stat
from gpt_triton.measure.runs import LoadRun
from gpt_triton.select import select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, when run as a script
from benchmarks.search_regret import everyone, finalist_stage, read_dump  # noqa: E402

PREFIX = "m_"


@dataclass(frozen=True)
class Costs:
    """What a simulated window costs: seconds of a warm-up and of a counted window, and a window's requests.
    The defaults are conv_attention's at 0.5 s windows: 186 s for 24 warm-ups and 288 windows, 500-650
    requests a second."""

    warm_up_s: float = 0.4
    window_s: float = 0.6
    requests: int = 200


class SimulatedClient(LoadClient):
    """Windows from the drift model: effect x AR(1) window error x each request's spread; counts the seconds."""

    name = "simulated"

    def __init__(self, fit: DriftFit, request_sd: float, rng: np.random.Generator, noise_scale: float = 1.0,
                 costs: Costs = Costs()) -> None:
        self.fit, self.request_sd, self.rng, self.costs = fit, request_sd * noise_scale, rng, costs
        self.sigma = float(np.sqrt(fit.sigma2)) * noise_scale
        self.error = 0.0
        self.seconds = 0.0

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        self.seconds += self.costs.window_s if min_requests > 0 else self.costs.warm_up_s
        rho = self.fit.rho
        self.error = rho * self.error + float(self.rng.normal(0.0, self.sigma * np.sqrt(1.0 - rho ** 2)))
        n = max(min_requests, self.costs.requests)
        latencies = np.exp(self.fit.mu[model_name.removeprefix(PREFIX)] + self.error
                           + self.rng.normal(0.0, self.request_sd, n))
        p50, p90, p99 = (float(v) for v in np.percentile(latencies, [50, 90, 99]))
        result = WindowResult(duration_s=duration_s, requests=n, errors=0, throughput=n / duration_s, p50_ms=p50,
                              p90_ms=p90, p99_ms=p99, mean_ms=float(latencies.mean()))
        return WindowSample(result=result, latencies_ms=latencies)


def candidate(cid: str, baseline: bool) -> Candidate:
    route = Route(family="onnxruntime", knobs={"id": cid})
    art = Artifact(family="onnxruntime", runtime="onnxruntime", route=route, directory="/simulated",
                   files=["model.onnx"], sha256=f"simulated-{cid}")
    return Candidate(id=cid, family="onnxruntime", route=route, serving=Route(family="serving"), status="deployed",
                     artifact=art, deploy=DeployInfo(model_name=PREFIX + cid, backend="python", adapter=True),
                     is_baseline=baseline)


def race_once(fit: DriftFit, spec: MeasureSpec, objective: ObjectiveSpec, request_sd: float, seed: int,
              noise_scale: float = 1.0, costs: Costs = Costs()) -> tuple[float, float, str]:
    """One racing run and its finalist stage: (seconds of racing, seconds in all, the chosen candidate)."""
    client = SimulatedClient(fit, request_sd, np.random.default_rng(seed), noise_scale, costs)
    cands = [candidate(cid, index == 0) for index, cid in enumerate(sorted(fit.mu))]
    raced = harness.Measurer("simulated:0", [{}], spec, objective, seed=seed, client=client).measure(cands)
    apply_outcomes(cands, raced.outcomes)
    found = select(cands, objective, everyone, [raced.contrasts] if raced.contrasts else [])
    racing_s = client.seconds
    _, _, chosen, _ = finalist_stage("simulated:0", [{}], spec, objective, cands, found, raced, seed + 50, client)
    assert chosen.winner_id is not None
    return racing_s, client.seconds, chosen.winner_id


@contextlib.contextmanager
def resting() -> Iterator[None]:
    """A rule tried on 2026-12-08 and not shipped, in force inside the block: after each racing step, a contender
    that more windows could not drop against the leader (:func:`race_round`'s futility, taken contender by
    contender) gets no more windows, while the leader goes on with the rest (in the finalist stage too)."""
    def step(run: LoadRun, spec: MeasureSpec, objective: ObjectiveSpec, max_windows: int, done: set[str],
             say: Callable[[str], None]) -> bool:
        futile = race_step(run, spec, objective, max_windows, done, say)
        live = [c for c in run.samples if c not in run.dropped and c not in run.failed]
        if futile or not live or min(len(run.samples[c]) for c in live) < spec.min_windows:
            return futile
        alpha = race_alpha(spec.confidence, len(run.samples), spec.max_windows)
        state = race_round(run.windows, live, alpha, max_windows=max_windows, frozen=frozenset(done))
        if state is None:
            return futile
        q = float(stats.t.ppf(1.0 - alpha, state.df))
        leader_n = len(run.samples[state.leader])
        for cid, v in state.verdicts.items():
            n = len(run.samples[cid])
            then = 1.0 / max(n, max_windows) + 1.0 / max(leader_n, max_windows)
            if not v.drop and v.diff - q * v.se * np.sqrt(min(1.0, then / (1.0 / n + 1.0 / leader_n))) <= 0.0:
                done.add(cid)
        return futile
    harness.race_step = step
    try:
        yield
    finally:
        harness.race_step = race_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("windows", type=Path, help="an exhaustive run's window file (search_regret.py --dump)")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--request-sd", type=float, default=0.45)
    parser.add_argument("--metric", default="p50", choices=["p50", "p90", "p99", "mean"])
    parser.add_argument("--requests", type=int, default=Costs.requests, help="a window's requests")
    parser.add_argument("--window-cost", type=float, default=Costs.window_s, help="seconds a counted window costs")
    parser.add_argument("--warm-up-cost", type=float, default=Costs.warm_up_s, help="seconds a warm-up costs")
    parser.add_argument("--noise-scale", type=float, default=1.0,
                        help="both noises times this: what a quieter (< 1) or busier machine would give")
    parser.add_argument("--rest", action="store_true", help="the resting rule (resting()), not shipped")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a MeasureSpec field for both stages, e.g. max_windows=6 (repeatable)")
    args = parser.parse_args()
    try:
        windows = read_dump(args.windows)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration) as exc:
        print(f"racing_simulation: {args.windows}: not a window file of search_regret.py --dump ({exc})",
              file=sys.stderr)
        raise SystemExit(2) from None
    fit = drift_fit(windows)
    if fit is None:
        print(f"racing_simulation: {args.windows}: too few windows for the drift model", file=sys.stderr)
        raise SystemExit(2)
    costs = Costs(args.warm_up_cost, args.window_cost, args.requests)
    per = max(sum(1 for w in windows if w.candidate == cid) for cid in fit.mu)
    exhaustive_s = len(fit.mu) * (costs.warm_up_s + per * costs.window_s)
    within = [w.within_var for w in windows if w.within_var is not None]
    rng = np.random.default_rng(0)
    simulated = [window_log_stat(np.exp(rng.normal(0.0, args.request_sd, costs.requests)), args.metric, seed=k)[1]
                 for k in range(200)]
    fields: dict[str, object] = dict(warmup_s=0.3, window_s=0.5, window_min_requests=20, bootstrap_resamples=200,
                                     settle_s=0.0)
    try:
        fields.update(item.split("=", 1) for item in args.set)  # pydantic parses the strings
        spec = MeasureSpec.model_validate(fields)
    except (ValueError, ValidationError) as exc:  # a field MeasureSpec refuses, or a pair without "="
        why = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()) \
            if isinstance(exc, ValidationError) else "expected FIELD=VALUE"
        print(f"racing_simulation: --set {' '.join(args.set)}: not a measure spec ({why})", file=sys.stderr)
        raise SystemExit(2) from None
    objective = ObjectiveSpec(metric=args.metric)
    with resting() if args.rest else contextlib.nullcontext():
        runs = [race_once(fit, spec, objective, args.request_sd, seed, args.noise_scale, costs)
                for seed in range(args.runs)]
    total = np.array([r[1] for r in runs]) / exhaustive_s
    racing = np.array([r[0] for r in runs]) / exhaustive_s
    regret = np.array([np.exp(fit.mu[r[2]] - min(fit.mu.values())) - 1.0 for r in runs])
    print(f"{args.windows}: {len(fit.mu)} candidates, window noise {100 * np.sqrt(fit.sigma2):.1f}%, neighbour "
          f"correlation {fit.rho:.2f}; kept within-window variance mean {np.mean(within) if within else float('nan'):.4f}, "
          f"simulated {np.mean([v for v in simulated if v is not None]):.4f} (request sd {args.request_sd}); "
          f"{f'noise x{args.noise_scale:g}; ' if args.noise_scale != 1 else ''}"
          f"{'resting' if args.rest else 'as shipped'}{''.join(' ' + item for item in args.set)}")
    print(f"  {args.runs} runs: fraction of the exhaustive time median {np.median(total):.2f} "
          f"[{np.percentile(total, 10):.2f}, {np.percentile(total, 90):.2f}] (10-90%), racing alone {np.median(racing):.2f}; "
          f"regret against the fitted effects: median {100 * np.median(regret):.1f}%, 90th percentile "
          f"{100 * np.percentile(regret, 90):.1f}%, over 2% in {np.mean(regret > 0.02):.2f}, over 5% in {np.mean(regret > 0.05):.2f}")


if __name__ == "__main__":
    main()
