"""The steps after the search, each on its own fresh server: the finalist stage (the candidates still in
contention judged again together before the choice, then the chosen pair's estimate), the optional repeat
check, and the one opening of the held-out split. The re-measure of the winner against the baseline is
gpt_triton/remeasure_step.py.

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
from gpt_triton.core.naming import named, named_id
from gpt_triton.core.objective import candidate_eligible
from gpt_triton.core.outcomes import fresh_copy
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.gain_precision import GainPrecision, rule_applies
from gpt_triton.measure.isolated import isolated_estimate, rank_correlation
from gpt_triton.remeasure_step import (
    decide_per_server,
    load_words,
    pair_and_remeasure_in_turns,
    remeasure_order,
    stage_load,
)
from gpt_triton.run import Run
from gpt_triton.select import Selection, after_refinement, select, select_finalists
from gpt_triton.serving import measurer, serve


def isolated_estimates(run: Run, measured: Sequence[Candidate]) -> None:
    """In-process figures beside the served ones, and how well their ranking predicts the served one."""
    for candidate in measured:
        if candidate.artifact is not None:
            try:
                candidate.isolated = isolated_estimate(candidate.artifact, run.tuning.inputs)
            except Exception as exc:  # isolated figures are for comparison only; say why one is missing
                run.decide(f"{named(candidate)}: no isolated estimate ({type(exc).__name__}: {exc})")
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


def contenders(measured: Sequence[Candidate], first: Selection, top_k: int, cap: int) -> list[Candidate]:
    """Who is still in contention after the search: the winner and its tie group, filled up to ``top_k``
    by point estimate, at most ``cap`` (the fastest by point estimate), and the baseline always (so the
    gain selection estimates comes from one interleaved run, not from windows of different runs)."""
    by_id = {c.id: c for c in measured}
    ranked = [cid for cid, _ in sorted(first.values.items(), key=lambda item: item[1]) if cid in by_id]
    group = [cid for cid in ranked if cid == first.winner_id or cid in first.ties]
    for cid in ranked:
        if len(group) >= top_k:
            break
        if cid not in group:
            group.append(cid)
    if first.winner_id in group[cap:]:
        group.remove(first.winner_id)
        group.insert(0, first.winner_id)
    group = group[:cap]
    baseline = next((c.id for c in measured if c.is_baseline), None)
    if baseline is not None and baseline not in group:
        group.append(baseline)
    return [by_id[cid] for cid in group]


def finalists(run: Run, measured: Sequence[Candidate], first: Selection) -> Selection:
    """Re-judge the candidates still in contention together on a fresh server before the choice.

    Racing's windows picked the leader among many: the leader's figure is biased low (the winner's
    curse) and a tie from short windows may span large gaps. The contenders (:func:`contenders`) get
    one interleaved run, shuffled each round, with fresh seeds, up to ``measure.finalist_windows``
    (default ``max_windows``) windows each: racing drops those clearly slower; it ends when the rest are separated, or cannot be
    separated within the budget (a tie that holds). Selection then orders the contenders and judges
    their ties on that run's drift model and the search's pooled (:func:`select_finalists`). The gain it
    estimates comes from another fresh server run in the re-measure's design
    (:func:`pair_estimate`), or with ``gain_precision`` 0 that run's. Returns the search's selection
    unchanged when there is nothing to re-judge (``measure.finalists: 0``, no winner, or a single contender)."""
    spec = run.spec.measure
    if spec.finalists <= 0 or first.winner_id is None:
        return first
    group = contenders(measured, first, spec.finalists, spec.max_finalists)
    if len(group) < 2:
        return first
    copies = [fresh_copy(c) for c in group]
    windows = spec.finalist_windows or spec.max_windows
    stage = spec.model_copy(update={"loads": [spec.loads[run.spec.objective.load_index]],
                                    "max_windows": windows, "racing": True})
    objective = run.spec.objective.model_copy(update={"load_index": 0})
    run.decide(f"finalists: {', '.join(named(c) for c in group)} (search winner {named_id(group, first.winner_id)}, "
               f"{len(first.ties)} tied with it) judged again together, up to {windows} windows each")
    notes: list[str] = []
    with serve(run, copies, "finalists", "_f") as (server, loaded), \
            run.progress.bar(f"finalists: judging {len(loaded)} candidates (windows)", None) as advance:
        judge = measurer(run, server, advance, "finalists", stage, objective, seed=4_243)
        # Half of what the budget leaves beyond the re-measure's least cost for the finalist run and its
        # refinement (past it, each load ends at min_windows); the re-measure gets the other half.
        judged = judge.measure(loaded, until_separated=True,
                               deadline=run.budget.deadline(0.5, keep_s=run.budget.remeasure_s()))
        run.budget.observe_windows(judge.objective_window_seconds)
        run.apply(copies, judged.outcomes)
        final = select_finalists([c for c in copies if c.status == "measured"], objective,
                                 lambda c: candidate_eligible(c, run.spec.accuracy), run.report.contrasts,
                                 judged.contrasts, spec.confidence)
    baseline = next((c.id for c in copies if c.is_baseline), None)
    refined, pair = None, None
    if final.winner_id is not None and baseline is not None and final.winner_id != baseline:
        # Separated (or tied and broken) says who; the gain selection reports is then measured to
        # measure.gain_precision on a fresh server holding what the re-measure's will hold, in its design.
        # Not on this one: late in a server's life the selected candidate measured slower (its p99 rose
        # some 17% a minute), so the pair's windows after up to seven contenders' racing put the estimate
        # 8% below the re-measure on average; and a server holding the pair alone left the estimate 4.6%
        # below the re-measure at 200 windows a side (docs/measurement.md, "One design for both").
        pair = (baseline, final.winner_id)
        by_id = {c.id: c for c in copies}
        runner_up = by_id[final.runner_up_id] if final.runner_up_id is not None else None
        design = remeasure_order(by_id[final.winner_id], runner_up, by_id[baseline])
        refined = pair_estimate(run, design, pair, stage, objective, notes)
    chosen_on_the_run = len(final.log)
    if refined is not None and pair is not None:
        final = after_refinement(final, pair[0], refined.ratio, refined.requests)
    for line in judged.log:
        run.decide(f"finalists: {line}")
    for line in final.log[:chosen_on_the_run]:
        run.decide(f"finalists: select: {line}")
    for line in notes:  # the refinement (its lines carry their own prefix), then what it changed
        run.decide(line)
    for line in final.log[chosen_on_the_run:]:
        run.decide(f"finalists: select: {line}")
    if run.remeasured_in_turns is not None and (pair is None or final.winner_id != pair[1]):
        unjudged, run.remeasured_in_turns = run.remeasured_in_turns, None  # it measured a winner no longer selected
        decide_per_server(run, unjudged.notes)
        run.decide("finalists: the re-measure that ran in turns with the pair is not judged: the selection changed")
        if unjudged.cross_checked is not None:  # it measured the same pair: it goes with the re-measure
            run.decide(f"cross-check ({run.spec.measure.cross_check}): not judged either: it measured the pair the "
                       "selection no longer holds")
    if final.winner_id is None:
        run.decide("finalists: no finalist was measured again: the search's selection stands")
        return first
    requests = {c.id: c.latency[0].requests for c in copies if c.latency}
    if refined is not None and pair is not None:  # the estimate is the refined pair's ratio: it rests on
        requests[pair[0]], requests[pair[1]] = refined.requests  # their added windows too
    run.decide(f"finalists: selected {named_id(copies, final.winner_id)} (search had {first.winner_id}); estimate resting on "
               + ", ".join(f"{cid} {n} requests" for cid, n in requests.items()))
    return final


def pair_estimate(run: Run, design: Sequence[Candidate], pair: tuple[str, str], stage: MeasureSpec,
                  objective: ObjectiveSpec, notes: list[str]) -> GainPrecision | None:
    """The finalist stage's estimate: ``design`` (the selected candidate, the runner-up, the baseline: what
    the re-measure will hold) on a fresh server through the re-measure's design, ``pair`` = (baseline,
    selected) measured to ``measure.gain_precision`` within the window cap and half of what the budget
    leaves beyond the re-measure's least cost; None when the rule does not apply or a member would not load."""
    if not rule_applies(stage.gain_precision, objective.metric):  # no server started for nothing
        return None
    if run.spec.measure.remeasure_in_turns:
        return pair_and_remeasure_in_turns(run, design, pair, stage, objective, notes)
    with serve(run, design, "finalists-pair", "_p") as (server, loaded), \
            run.progress.bar("finalists: measuring the selected candidate against the baseline (windows)", None) as advance:
        if len(loaded) != len(design):
            notes.append("finalists: the re-measure's candidates did not all load on the pair's server: the estimate is the finalist run's")
            return None
        judge = measurer(run, server, advance, "finalists-pair", stage, objective, seed=4_271)
        found = judge.measure_pair(design, pair, notes, "finalists",
                                   deadline=run.budget.deadline(0.5, keep_s=run.budget.remeasure_s()))
        run.budget.observe_windows(judge.objective_window_seconds)
        if (load := stage_load(run, ["finalists-pair"])) is not None:
            notes.append(f"finalists: the pair's server: {load_words(run, load)}")
        return found


def repeat_check(run: Run, measured: Sequence[Candidate], first: Selection) -> None:
    """Select a second time from an independent measurement on a fresh server; do they agree?"""
    copies = [fresh_copy(c) for c in measured]
    with serve(run, copies, "repeat", "_k") as (server, loaded), \
            run.progress.bar("repeat check: measuring again (windows)", None) as advance:
        again = measurer(run, server, advance, "repeat").measure(loaded)
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
    run.decide(f"repeat check: first selection {named_id(run.report.candidates, first.winner_id)}, "
               f"second {named_id(run.report.candidates, second.winner_id)}: {verdict}")


def accept_on_heldout(run: Run, heldout: HeldOut, chosen: Candidate, baseline: Candidate) -> Candidate | None:
    """Open the held-out split once; return what may be promoted: the chosen candidate if it passes,
    else the baseline if it passes, else None (the reference disagrees with the model itself)."""
    held = heldout.open_for_acceptance(f"final acceptance of {named(chosen)} before promotion")
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
    by_id = {c.id: c for c in contenders}
    for verdict in verdicts:
        result = verdict.accuracy
        run.decide(
            f"held-out acceptance of {named(by_id[verdict.candidate_id])} on {result.requests} requests: "
            f"{'passed' if verdict.passed else 'FAILED: ' + verdict.reason}; "
            f"{result.exceedances} exceedances, upper bound {result.exceedance_upper_bound:.2%} at {result.confidence:.0%} confidence"
        )
        if verdict.candidate_id == chosen.id:
            run.report.heldout = result
    passed = next((v for v in verdicts if v.passed), None)
    return None if passed is None else next(c for c in contenders if c.id == passed.candidate_id)
