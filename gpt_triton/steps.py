"""The steps after the search, each on its own fresh server: the separate re-measurement of the winner
against the baseline, the optional repeat check, and the one opening of the held-out split.

Each composes stages (deploy, measure, select, accuracy) for one decision of the run and records what
it used in ``report.decisions``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpt_triton.accuracy.reference import HeldOut
from gpt_triton.accuracy.served import accept
from gpt_triton.accuracy.validate import infer_requests
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import ObjectiveContrasts
from gpt_triton.core.objective import candidate_eligible, objective_value
from gpt_triton.core.outcomes import fresh_copy
from gpt_triton.core.records import Candidate, Gain
from gpt_triton.measure.isolated import isolated_estimate, rank_correlation
from gpt_triton.run import Run
from gpt_triton.select import Selection, gain, select
from gpt_triton.serving import measurer, serve


def isolated_estimates(run: Run, measured: Sequence[Candidate]) -> None:
    """In-process figures beside the served ones, and how well their ranking predicts the served one."""
    for candidate in measured:
        if candidate.artifact is not None:
            try:
                candidate.isolated = isolated_estimate(candidate.artifact, run.tuning.inputs)
            except Exception as exc:  # isolated figures are for comparison only; say why one is missing
                run.decide(f"{candidate.id}: no isolated estimate ({type(exc).__name__}: {exc})")
    rho = rank_correlation(measured, load_index=run.spec.objective.load_index)
    run.report.isolated_vs_served_rho = None if math.isnan(rho) else round(rho, 4)
    if run.report.isolated_vs_served_rho is not None:
        run.decide(f"isolated (in-process) vs served ranking: Spearman rho {rho:.2f} over {len(measured)} candidates; "
                   "selection uses the served figures only")


def selection(run: Run, measured: Sequence[Candidate],
              contrasts: Sequence[ObjectiveContrasts] | None = None) -> Selection:
    """Select among measured candidates with the run's objective and accuracy policy, judging ties on
    ``contrasts`` (default: the drift models of the run's search)."""
    spec = run.spec
    return select(measured, spec.objective, lambda c: candidate_eligible(c, spec.accuracy),
                  run.report.contrasts if contrasts is None else contrasts, spec.measure.confidence)


def remeasure(run: Run, winner: Candidate, baseline: Candidate, runner_up: Candidate | None) -> Gain | None:
    """Winner (and runner-up) against the baseline on a fresh server, interleaved, with fresh seeds: the
    gain and its interval come from this run, not from the windows that selected the winner."""
    spec = run.spec
    contenders = [winner, baseline]
    if runner_up is not None and runner_up.id not in (winner.id, baseline.id):
        contenders.insert(1, runner_up)
    with serve(run, contenders, "remeasure", "_r") as (server, loaded):
        if len(loaded) != len(contenders):
            return None
        with run.progress.bar(f"re-measuring {len(contenders)} candidates (windows)", None) as advance:
            results = measurer(run, server, advance).remeasure(contenders)
    win_value = objective_value(winner.latency, spec.objective)
    base_value = objective_value(baseline.latency, spec.objective)
    estimate = base_value / win_value if win_value and base_value else None
    found = gain(results[baseline.id], results[winner.id], spec.objective, spec.measure.confidence,
                 spec.measure.bootstrap_resamples, estimate)
    found.remeasured_baseline = results[baseline.id].stats
    found.remeasured_winner = results[winner.id].stats
    run.decide(
        f"re-measured on a fresh server, interleaved: baseline/winner {found.metric} ratio {found.ratio.value:.3f} "
        f"[{found.ratio.low:.3f}, {found.ratio.high:.3f}] (selection estimated {found.selection_estimate_ratio or float('nan'):.3f})"
    )
    return found


def repeat_check(run: Run, measured: Sequence[Candidate], first: Selection) -> None:
    """Select a second time from an independent measurement on a fresh server; do they agree?"""
    copies = [fresh_copy(c) for c in measured]
    with serve(run, copies, "repeat", "_k") as (server, loaded), \
            run.progress.bar("repeat check: measuring again (windows)", None) as advance:
        again = measurer(run, server, advance).measure(loaded)
    run.apply(copies, again.outcomes)
    second = selection(run, [c for c in copies if c.status == "measured"],
                       [again.contrasts] if again.contrasts else [])
    first_set = {first.winner_id, *first.ties}
    second_set = {second.winner_id, *second.ties}
    if first.winner_id == second.winner_id:
        verdict = "agree"
    elif first.winner_id in second_set or second.winner_id in first_set:
        verdict = "tie"
    else:
        verdict = "disagree"
    run.report.repeat_check = {"first": first.winner_id, "second": second.winner_id, "verdict": verdict,
                               "first_ties": list(first.ties), "second_ties": list(second.ties)}
    run.decide(f"repeat check: first selection {first.winner_id}, second {second.winner_id}: {verdict}")


def accept_on_heldout(run: Run, heldout: HeldOut, chosen: Candidate, baseline: Candidate) -> Candidate | None:
    """Open the held-out split once; return what may be promoted: the chosen candidate if it passes,
    else the baseline if it passes, else None (the reference disagrees with the model itself)."""
    held = heldout.open_for_acceptance(f"final acceptance of {chosen.id} before promotion")
    if not held.inputs:
        run.decide("held-out split is empty: acceptance skipped (give more reference requests)")
        return chosen
    contenders = [chosen] if chosen.id == baseline.id else [chosen, baseline]
    with serve(run, contenders, "heldout", "_h") as (server, loaded):
        if len(loaded) != len(contenders):
            raise GptTritonError(f"could not load {chosen.id} for held-out acceptance; see {run.run_dir / 'report.json'}")
        produced = {c.id: infer_requests(server.grpc_url, c.deploy.model_name, held.inputs, run.output_names)  # type: ignore[union-attr]
                    for c in contenders}
    verdicts = accept(held, produced, [c.id for c in contenders], baseline.id, run.spec.accuracy)
    for verdict in verdicts:
        result = verdict.accuracy
        run.decide(
            f"held-out acceptance of {verdict.candidate_id} on {result.requests} requests: "
            f"{'passed' if verdict.passed else 'FAILED: ' + verdict.reason}; "
            f"{result.exceedances} exceedances, upper bound {result.exceedance_upper_bound:.2%} at {result.confidence:.0%} confidence"
        )
        if verdict.candidate_id == chosen.id:
            run.report.heldout = result
    passed = next((v for v in verdicts if v.passed), None)
    return None if passed is None else next(c for c in contenders if c.id == passed.candidate_id)
