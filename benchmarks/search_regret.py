"""What does racing cost in selection quality, and what does it save? (a benchmark script, not a test)

Deploys N ONNX Runtime variants of the bundled conv+attention (or ResNet-style) model (graph optimisation level x intra-op
threads x spinning, served by the python-backend adapter) on one embedded Triton, then measures them
twice with :class:`gpt_triton.measure.harness.Measurer`, in one run:

* exhaustively: racing off, every candidate gets ``--windows`` windows;
* with racing, as the tuner ships (the default MeasureSpec: min 3, max 10 windows, stability 10%):
  one full window each, then after every interleaved round the candidates clearly slower than the
  leader (the drift model over all windows, Bonferroni over comparisons and rounds) are dropped;
  contenders continue until stable, separated, futile to separate (a declared tie) or max_windows;
  then, as the tuner does, the finalist stage (the tie group / top-k and the baseline judged again
  together, :func:`gpt_triton.steps.finalists`), its windows and time counted in racing's. The tuner
  chooses on the finalist run's and racing's drift models pooled (:func:`gpt_triton.select.select_finalists`);
  the choice on the finalist run alone (before) is judged beside it, on the same windows.

The exhaustive reference gets more windows than the tuner's cap (12 by default): it is the "truth"
racing is judged against, so it should be sharper than what it judges.

Regret needs the true objective of the racing winner and of the best candidate. The exhaustive run's
own minimum is a biased judge (the minimum of 24 noisy estimates is lucky: the winner's curse), so a
third, separate run judges: the racing winners and the exhaustive winner, interleaved in a fresh order
each round for ``--judge-windows`` windows each (doubled up to three times until every racing winner's
regret is decided against 2%, with Bonferroni over those looks), and valued with the drift model of
:mod:`gpt_triton.measure.racing` (candidate + round effects, errors correlated between neighbouring
windows). Regret = judged(racing winner) / judged(exhaustive winner) - 1, with its interval (95% jointly
over the judge's looks); it is
negative when racing found a faster candidate than the exhaustive run did; the target (regret <= 2%) is
judged on the interval's upper bound, not on the point. The exhaustive valuation
(pooled and drift-adjusted) is printed too. Racing runs ``--racing-runs`` times with fresh seeds.

    .venv/bin/python benchmarks/search_regret.py [--window 0.5] [--windows 12] [--metric p50]
    .venv/bin/python benchmarks/search_regret.py --model resnet --window 1 --racing-runs 4   # issue 4's target
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from gpt_triton.core.model_info import inspect_model, resolve_shapes, sha256_file
from gpt_triton.core.outcomes import apply_outcomes
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.deploy import write_model
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.racing import DriftFit, RaceWindow, drift_fit
from gpt_triton.measure.runs import MeasureRun
from gpt_triton.select import Selection, select, select_finalists
from gpt_triton.server import EmbeddedTriton
from gpt_triton.steps import contenders
from gpt_triton.testing.models import build_conv_attention, build_resnet_cnn

LEVELS = ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"]
THREADS = [0, 1, 2]
SPINNING = ["0", "1"]


def candidates(model_path: Path) -> list[Candidate]:
    sha = sha256_file(model_path)
    out = []
    for i, (level, threads, spin) in enumerate(itertools.product(LEVELS, THREADS, SPINNING)):
        knobs = {"graph_optimization_level": level, "intra_op_num_threads": threads, "allow_spinning": spin}
        route = Route(family="onnxruntime", knobs=knobs)
        options = {"session_options": {"graph_optimization_level": level, "intra_op_num_threads": threads},
                   "config_entries": {"session.intra_op.allow_spinning": spin}}
        art = Artifact(family="onnxruntime", runtime="onnxruntime", route=route, directory=str(model_path.parent),
                       files=[model_path.name], runtime_options=options, sha256=sha,
                       size_bytes=model_path.stat().st_size)
        out.append(Candidate(id=f"c{i:02d}", family="onnxruntime", route=route, serving=Route(family="serving"),
                             artifact=art, status="built", is_baseline=(i == 0)))
    return out


def run(measurer: Measurer, cands: list[Candidate]) -> tuple[float, MeasureRun]:
    start = time.monotonic()
    measured = measurer.measure(cands)
    apply_outcomes(cands, measured.outcomes)
    return time.monotonic() - start, measured


def dump(path: Path, measured: MeasureRun) -> None:
    """The run's windows as racing saw them (in the order run) and its decision log, for offline study."""
    path.parent.mkdir(parents=True, exist_ok=True)
    windows = {label: [dataclasses.asdict(w) for w in ws] for label, ws in measured.race_windows.items()}
    path.write_text(json.dumps({"windows": windows, "log": measured.log}, indent=1))


def read_dump(path: Path) -> list[RaceWindow]:
    """The windows :func:`dump` kept, of its first load (the benchmark measures one). Raises OSError, ValueError
    (not JSON), KeyError, TypeError or StopIteration for a file that is not such a dump."""
    loads = json.loads(path.read_text())["windows"]
    return [RaceWindow(**w) for w in next(iter(loads.values()))]


def everyone(_c: Candidate) -> tuple[bool, str]:
    """The benchmark's accuracy gate: every candidate passes (its variants are one model's sessions)."""
    return True, ""


def finalist_stage(url: str, requests: Sequence[dict[str, np.ndarray]], spec: MeasureSpec, objective: ObjectiveSpec,
                   racing: Sequence[Candidate], won: Selection, race_run: MeasureRun, seed: int,
                   client: LoadClient | None = None) -> tuple[list[Candidate], MeasureRun, Selection, Selection]:
    """As the tuner does (gpt_triton.steps.finalists): racing's contenders judged again together, on the server
    at ``url`` (through ``client``, default the spec's). Returns the group, the finalist run, the choice on it
    and racing's windows pooled (the tuner's), and the choice on the finalist run alone (before)."""
    group = contenders(racing, won, spec.finalists, spec.max_finalists)
    copies = [c.model_copy(deep=True, update={"status": "deployed", "latency": [], "reason": None}) for c in group]
    stage = spec.model_copy(update={"max_windows": spec.finalist_windows or spec.max_windows})
    final_run = Measurer(url, requests, stage, objective, seed=seed, client=client).measure(copies, until_separated=True)
    apply_outcomes(copies, final_run.outcomes)
    alone = select(copies, objective, everyone, [final_run.contrasts] if final_run.contrasts else [])
    pooled = select_finalists(copies, objective, everyone, [race_run.contrasts] if race_run.contrasts else [],
                              final_run.contrasts)
    return group, final_run, pooled, alone


JUDGE_LOOKS = 4  # looks of the sequential judge at n, 2n, 4n, 8n windows each; Bonferroni over them
REGRET_TARGET = 0.02


def judge(measurer: Measurer, cands: list[Candidate], windows: int, chosen: list[str], reference: str,
          looks: int = JUDGE_LOOKS) -> tuple[DriftFit, float, int]:
    """A separate interleaved run of ``cands`` (fresh order each round), valued by the drift model.

    Sequential: after ``windows`` windows each, then after every doubling up to ``looks`` looks, it
    stops once every racing winner in ``chosen`` is decided against the 2% target (its regret interval
    lies wholly below or wholly above it). Each look's interval is at level 1 - 0.05 / looks, so the
    chance that any look misleads stays at most 5% (Bonferroni): stopping when the bound first drops
    under 2% does not flatter the result. Returns the fit, the interval level used and the windows run."""
    level = 1.0 - 0.05 / looks
    ran: list[RaceWindow] = []
    total, fit = 0, None
    for look in range(looks):
        batch = windows if look == 0 else total  # doubling: n, 2n, 4n, ...
        offset = 1 + max((w.round for w in ran), default=-1)
        ran += [dataclasses.replace(w, round=w.round + offset) for w in measurer.compare(cands, batch)]
        total += batch
        fit = drift_fit(ran)
        assert fit is not None, "the judge run needs at least 2 candidates and 2 windows each"
        bounds = [regret_interval(fit, c, reference, level)[1:] for c in chosen if c != reference]
        if all(hi <= REGRET_TARGET or lo > REGRET_TARGET for lo, hi in bounds):
            break
        print(f"  judge look {look + 1}: {total} windows each, not yet decided against {100 * REGRET_TARGET:.0f}%",
              flush=True)
    assert fit is not None
    return fit, level, total


def regret_interval(fit: DriftFit, chosen: str, reference: str, level: float = 0.95) -> tuple[float, float, float]:
    """judged(chosen) / judged(reference) - 1 with its interval at ``level`` (t on the drift model's df)."""
    if chosen == reference:
        return 0.0, 0.0, 0.0
    diff = fit.mu[chosen] - fit.mu[reference]
    half = float(stats.t.ppf(0.5 + level / 2, fit.df)) * float(np.sqrt(fit.contrast_var(chosen, reference)))
    return float(np.exp(diff) - 1), float(np.exp(diff - half) - 1), float(np.exp(diff + half) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=0.5, help="seconds per window")
    parser.add_argument("--windows", type=int, default=12, help="windows per candidate in the exhaustive run")
    parser.add_argument("--tuner-max-windows", type=int, default=MeasureSpec().max_windows,
                        help="the racing tuner's max_windows (its spec default unless given)")
    parser.add_argument("--metric", default="p50", choices=["p50", "p90", "p99", "mean"])
    parser.add_argument("--race-after", type=int, default=1, help="rounds before racing may drop (>= 1)")
    parser.add_argument("--racing-runs", type=int, default=2, help="independent racing runs (fresh seeds)")
    parser.add_argument("--judge-windows", type=int, default=32,
                        help="windows per finalist at the judge's first look (it doubles up to 3 times until decided)")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N candidates (0: all 24)")
    parser.add_argument("--model", default="conv_attention", choices=["conv_attention", "resnet"],
                        help="resnet (~19 ms/inference) spreads the variants wider than conv_attention (~2 ms)")
    parser.add_argument("--no-finalists", dest="finalists", action="store_false",
                        help="select on racing's windows alone (before issue 16's finalist stage)")
    parser.add_argument("--dump", type=Path, default=None,
                        help="write each run's windows (drift-model view) and decision log as JSON here")
    args = parser.parse_args()
    objective = ObjectiveSpec(metric=args.metric)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build = build_resnet_cnn if args.model == "resnet" else build_conv_attention
        model_path = build(root / "model" / "model.onnx")
        info = inspect_model(model_path)
        shapes = resolve_shapes(info, {})
        rng = np.random.default_rng(0)
        requests = [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
                    for _ in range(8)]
        base = candidates(model_path)
        if args.limit:
            base = base[: args.limit]
        with EmbeddedTriton(repository=root / "repo", workdir=root / "work") as server:
            t0 = time.monotonic()
            for cand in base:
                assert cand.artifact is not None
                cand.deploy = write_model(root / "repo", f"regret_{cand.id}", info, shapes, cand.artifact,
                                          cand.serving, "python")
                server.load(root / "repo" / cand.deploy.model_name)
                cand.status = "deployed"
            print(f"deployed {len(base)} candidates in {time.monotonic() - t0:.0f} s", flush=True)
            # The tuner races with its shipped defaults (min/max windows, stability, confidence); only the
            # window length and warm-up are the benchmark's, and the same for both runs.
            common = dict(warmup_s=0.3, window_s=args.window, window_min_requests=20, bootstrap_resamples=1000)
            ex_spec = MeasureSpec.model_validate(dict(common, racing=False, min_windows=args.windows,
                                                      max_windows=args.windows))
            race_spec = MeasureSpec.model_validate(dict(common, racing=True, max_windows=args.tuner_max_windows))
            exhaustive = [c.model_copy(deep=True) for c in base]
            ex_measurer = Measurer(server.grpc_url, requests, ex_spec, objective, seed=1)
            ex_s, ex_run = run(ex_measurer, exhaustive)
            ex_w = ex_run.windows
            if args.dump:
                dump(args.dump / "exhaustive.json", ex_run)
            best = select(exhaustive, objective, everyone, [ex_run.contrasts] if ex_run.contrasts else [])
            assert best.winner_id
            ex_winner: str = best.winner_id
            print(f"exhaustive: {ex_w} windows, {ex_s:.0f} s; selected {best.winner_id} "
                  f"(ties: {', '.join(best.ties) or 'none'})", flush=True)
            races = []
            for k in range(args.racing_runs):
                racing = [c.model_copy(deep=True) for c in base]
                race_measurer = Measurer(server.grpc_url, requests, race_spec, objective, seed=2 + k,
                                         race_after=args.race_after)
                race_s, race_run = run(race_measurer, racing)
                race_w, race_log = race_run.windows, race_run.log
                if args.dump:
                    dump(args.dump / f"racing_{k + 1}.json", race_run)
                won = select(racing, objective, everyone, [race_run.contrasts] if race_run.contrasts else [])
                assert won.winner_id
                alone_id: str | None = None
                if args.finalists:
                    # As the tuner does (gpt_triton.steps.finalists): the contenders judged again together,
                    # and its cost counted in racing's time.
                    start = time.monotonic()
                    first_id = won.winner_id
                    # The tuner chooses on the finalist run and racing's windows pooled; the choice on the
                    # finalist run alone (before) is judged too, on the same windows.
                    group, final_run, won, alone = finalist_stage(server.grpc_url, requests, race_spec, objective,
                                                                  racing, won, race_run, seed=50 + k)
                    assert won.winner_id and alone.winner_id
                    alone_id = alone.winner_id
                    race_s += time.monotonic() - start
                    race_w += final_run.windows
                    race_log = race_log + [f"finalists: {line}" for line in final_run.log]
                    print(f"  finalists {', '.join(c.id for c in group)}: {final_run.windows} windows; "
                          f"racing had {first_id}, finalists select {won.winner_id} (on their run alone: "
                          f"{alone_id})", flush=True)
                assert won.winner_id is not None
                winner_id: str = won.winner_id
                races.append((winner_id, won, race_s, race_w, race_log, alone_id))
                print(f"racing run {k + 1}: {race_w} windows, {race_s:.0f} s; selected {won.winner_id} "
                      f"(ties: {', '.join(won.ties) or 'none'})", flush=True)
            finalists = list(dict.fromkeys([ex_winner] + [r[0] for r in races] + [r[5] for r in races if r[5]]))
            by_id = {c.id: c for c in base}
            judged, judge_level, judge_windows = None, 0.95, 0
            if len(finalists) > 1:
                judged, judge_level, judge_windows = judge(
                    Measurer(server.grpc_url, requests, ex_spec, objective, seed=99), [by_id[c] for c in finalists],
                    args.judge_windows, [r[0] for r in races], ex_winner)

    label = ex_spec.loads[objective.load_index].label()
    ex_fit = drift_fit(ex_run.race_windows[label])
    pooled = best.values
    fastest = min(pooled, key=pooled.__getitem__)
    print(f"\nmodel {args.model}; objective: {args.metric} at concurrency 1; {len(base)} candidates; "
          f"windows of {args.window} s; exhaustive {args.windows} windows each")
    if ex_fit is not None:
        print(f"exhaustive windows: drift model innovation sd {100 * np.sqrt(ex_fit.sigma2):.1f}%, neighbour "
              f"correlation {ex_fit.rho:.2f}; raw window-to-window sd "
              f"{100 * np.mean([np.std([w.value for w in ex_run.race_windows[label] if w.candidate == c], ddof=1) for c in pooled]):.1f}%")
        adjusted = sorted(ex_fit.mu, key=ex_fit.mu.__getitem__)
        print("exhaustive, drift-adjusted order (ratio to its first): " + ", ".join(
            f"{c} {np.exp(ex_fit.mu[c] - ex_fit.mu[adjusted[0]]):.3f}" for c in adjusted[:6]))
    print("exhaustive, pooled " + args.metric + ": " + ", ".join(
        f"{c} {pooled[c]:.2f} ms" for c in sorted(pooled, key=pooled.__getitem__)[:6]))
    summary: list[tuple[float, float, float]] = []  # (wall fraction, judged regret, its upper bound)
    alone_summary: list[float] = []  # upper bounds of the judged regret of the finalist run's own choice
    for k, (won_id, won, race_s, race_w, race_log, alone_id) in enumerate(races, 1):
        dropped = sum(1 for line in race_log if line.startswith("racing: dropped"))
        naive = pooled[won_id] / pooled[fastest] - 1.0
        line = (f"racing run {k}: {race_w} windows ({race_w / ex_w:.2f} of exhaustive), {race_s:.0f} s "
                f"({race_s / ex_s:.2f} of exhaustive wall time); dropped {dropped}; selected {won.winner_id}; "
                f"naive regret on the exhaustive pooled values {100 * naive:.1f}%")
        if ex_fit is not None and won.ties:
            # What a tie-break on accuracy margin or build cost could cost: the slowest declared tie,
            # valued on the exhaustive drift-adjusted effects.
            worst = max([won_id, *won.ties], key=ex_fit.mu.__getitem__)
            line += (f"; tie of {1 + len(won.ties)}, slowest {worst} "
                     f"{100 * (np.exp(ex_fit.mu[worst] - min(ex_fit.mu.values())) - 1):+.1f}% vs the exhaustive best")
        if won_id == ex_winner:
            line += "; same as the exhaustive winner: regret 0"
            summary.append((race_s / ex_s, 0.0, 0.0))
        elif judged is not None:
            r, lo, hi = regret_interval(judged, won_id, ex_winner, judge_level)
            line += (f"; judged regret vs the exhaustive winner {best.winner_id}: {100 * r:+.1f}% "
                     f"[{100 * lo:+.1f}%, {100 * hi:+.1f}%]")
            summary.append((race_s / ex_s, r, hi))
        if alone_id:  # the judge measured every choice; without a judge run all were the exhaustive winner
            r, lo, hi = (regret_interval(judged, alone_id, ex_winner, judge_level) if judged is not None
                         else (0.0, 0.0, 0.0))
            alone_summary.append(hi)
            if alone_id != won_id:
                line += f"; on the finalist run alone {alone_id}: {100 * r:+.1f}% [{100 * lo:+.1f}%, {100 * hi:+.1f}%]"
        print(line)
    if judged is not None:
        print(f"judge run: {judge_windows} windows each of {', '.join(finalists)}, intervals at "
              f"{100 * judge_level:.2f}% (Bonferroni over {JUDGE_LOOKS} looks); innovation sd "
              f"{100 * np.sqrt(judged.sigma2):.1f}%, neighbour correlation {judged.rho:.2f}, df {judged.df}")
    if summary:
        # The target is judged on the 95% upper bound of the regret: a point estimate under 2% with an
        # interval reaching +7% does not show that racing lost at most 2%.
        met = sum(1 for frac, _, hi in summary if frac <= 0.25 and hi <= 0.02)
        met_point = sum(1 for frac, r, _ in summary if frac <= 0.25 and r <= 0.02)
        print(f"target (upper bound of the judged regret, 95% over the judge's looks, <= 2% with <= 0.25 of the "
              f"exhaustive wall time): "
              f"met in {met} of {len(summary)} racing runs (by the point estimate alone: {met_point}); "
              f"worst upper bound {100 * max(h for _, _, h in summary):+.1f}%; "
              f"wall fractions {', '.join(f'{f:.2f}' for f, _, _ in summary)}; "
              f"judged regret {', '.join(f'{100 * r:+.1f}%' for _, r, _ in summary)} (upper bounds "
              f"{', '.join(f'{100 * h:+.1f}%' for _, _, h in summary)})")
    if alone_summary:
        print(f"the finalist run's choice alone (before): upper bound <= 2% in "
              f"{sum(1 for hi in alone_summary if hi <= 0.02)} of {len(alone_summary)} (upper bounds "
              f"{', '.join(f'{100 * h:+.1f}%' for h in alone_summary)})")
    for cand in sorted(exhaustive, key=lambda c: pooled.get(c.id, float("inf")))[:5]:
        print(f"  {cand.id} {pooled.get(cand.id, float('nan')):.3f} ms  {cand.route.key()}")


if __name__ == "__main__":
    main()
