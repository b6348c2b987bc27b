"""`gpt-triton tune`: the stages in order, with the run saved after each one.

model -> routes -> built candidates -> deployed in Triton -> screened (tuning split) + measured ->
selected -> re-measured against the baseline on a fresh server -> accepted on the held-out split ->
promoted -> reported (and pushed).

This module holds only the sequence. Each stage lives in its package and returns typed outcomes
(:mod:`gpt_triton.core.outcomes`) that :meth:`gpt_triton.run.Run.apply` applies; the steps after the
search are in :mod:`gpt_triton.steps`. The held-out split is opened exactly once, for the final
acceptance of the chosen candidate; every earlier decision uses the tuning split and says so in
``report.decisions``.
"""

from __future__ import annotations

from pathlib import Path

from gpt_triton.accuracy.reference import HeldOut, ReferenceSet, save_calibration_npz, split_reference
from gpt_triton.accuracy.served import screen, served_reference
from gpt_triton.build import build_candidates
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.naming import named
from gpt_triton.core.objective import measured_value
from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.core.routes import BuildContext
from gpt_triton.metrics.pushgateway import push_best_effort
from gpt_triton.precision import PrecisionSearch
from gpt_triton.preflight import prepare as preflight
from gpt_triton.promote.candidate import promote_candidate
from gpt_triton.promote.signing import load_signing_key
from gpt_triton.remeasure_step import remeasure
from gpt_triton.run import Progress, Run, TuneOptions
from gpt_triton.search import CandidateSearch
from gpt_triton.server import TritonServer
from gpt_triton.serving import deployed, measurer, open_server, unusable_families
from gpt_triton.steps import accept_on_heldout, finalists, isolated_estimates, repeat_check, selection
from gpt_triton.tuning_cache import TuningCache

__all__ = ["Progress", "TuneOptions", "tune"]


def tune(options: TuneOptions, progress: Progress | None = None) -> RunReport:
    """Run every stage; returns the report (also saved as RUN_DIR/report.json)."""
    spec = options.spec
    info = inspect_model(options.model)
    shapes = resolve_shapes(info, options.shapes)
    repository = Path(options.repository or spec.promotion.repository)
    ref = preflight(options, info, shapes, repository)  # every check before the first build
    signing_key = load_signing_key(options.signing_key_file) if options.promote else None

    run = Run(options, info, shapes, progress or Progress())
    try:
        heldout = _search(run, ref)
        _finish(run, heldout, repository, signing_key)
        run.report.status = "done"
    except BaseException as exc:
        run.report.status, run.report.error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        run.save()
        if options.pushgateway:  # best effort: a promoted model stays promoted (exit 0) if the push fails
            push_best_effort(options.pushgateway, run.report, failed=run.report.status == "failed")
    return run.report


def _split(run: Run, ref: ReferenceSet) -> HeldOut:
    """Tuning and held-out splits; the tuning inputs are also the builds' calibration data."""
    spec = run.spec.accuracy
    run.tuning, heldout = split_reference(ref, spec.heldout_fraction, spec.split_seed)
    run.report.reference = {
        "source": ref.source, "synthetic": ref.synthetic, "requests": len(ref.inputs),
        "split_seed": spec.split_seed, "tuning_requests": len(run.tuning.inputs),
        "heldout_requests": heldout.size, "outputs_recorded": ref.outputs is not None,
    }
    run.decide(f"reference: {ref.source} ({'synthetic' if ref.synthetic else 'recorded'}), "
               f"{len(run.tuning.inputs)} tuning / {heldout.size} held-out requests, seed {spec.split_seed}")
    save_calibration_npz(run.tuning, run.run_dir / "calibration.npz")
    return heldout


def _search(run: Run, ref: ReferenceSet) -> HeldOut:
    """Ask the search for batches until it is done or the budget is spent: build, deploy, screen, measure."""
    heldout = _split(run, ref)
    spec, report = run.spec, run.report
    context = BuildContext(model=run.info, shapes=run.shapes, calibration_npz=str(run.run_dir / "calibration.npz"))
    cache = TuningCache.open(run.run_dir / "tuning_cache.jsonl", run.info, spec, resume=run.options.resume)
    with cache, open_server(run, "search") as server:
        report.triton_version = server.version()
        # The route search's plan, then (spec.precision) the mixed-precision routes found on the tuning split.
        search = PrecisionSearch(CandidateSearch(spec, run.info, unavailable=unusable_families(spec, server),
                                                 baseline=run.options.baseline),
                                 spec, context, lambda: run.tuning, run.started, run.run_dir / "precision")
        # The search stops leaving the later stages' least cost, planned from its own windows so far. The
        # first batch (the baseline is in it) always runs: with nothing measured there is no run to end.
        while not (report.candidates and run.budget.over(run.budget.search_reserve_s(_measured(report.candidates)))):
            batch = search.ask()
            if not batch:
                break
            report.candidates.extend(batch)
            with run.progress.bar(f"building {len(batch)} candidates", len(batch)) as advance:
                def built(candidate: Candidate, _: object) -> None:
                    cache.record(candidate)
                    advance(f"{named(candidate)} {candidate.status}")

                run.apply(batch, build_candidates(batch, context, run.run_dir / "artifacts", spec.search, cache=cache),
                          after=built)
            run.save()
            _serve_batch(run, server, batch, cache)
            search.tell(batch, lambda c: measured_value(c, spec.objective))
            for candidate in batch:
                cache.record(candidate)
            run.save()
        for line in search.decisions:
            report.decisions.append(f"search: {line}")
        if spec.time_budget_s is not None:
            run.decide(run.budget.plan_note(_measured(report.candidates)))
    return heldout


def _serve_batch(run: Run, server: TritonServer, batch: list[Candidate], cache: TuningCache) -> None:
    """Deploy a built batch, screen it on the tuning split, and measure what passes."""
    reused = cache.reused(batch)
    run.apply(batch, reused)
    if reused:
        run.decide(f"resume: {len(reused)} candidates keep their earlier screening and measurement from the tuning cache")
    reused_ids = {o.candidate_id for o in reused}
    wanted = [c for c in batch if c.id not in reused_ids or (c.is_baseline and run.tuning.outputs is None)]
    with run.progress.bar(f"deploying {len(wanted)} candidates", len(wanted)) as advance, \
            deployed(run, server, wanted, advance=advance) as loaded:
        if run.tuning.outputs is None:
            baseline = next((c for c in loaded if c.is_baseline), None)
            if baseline is None:
                raise GptTritonError("the default route did not build or load, so there is no reference output; "
                                     f"see {run.run_dir / 'report.json'}")
            run.tuning = served_reference(server.grpc_url, baseline, run.tuning, run.output_names)
            run.decide("tuning-split reference outputs: the default route's outputs served by Triton")
        fresh = [c for c in loaded if c.status == "deployed"]
        run.apply(fresh, screen(server.grpc_url, fresh, run.tuning, run.spec.accuracy, run.output_names))
        feasible = [c for c in loaded if c.status == "deployed"]
        with run.progress.bar(f"measuring {len(feasible)} candidates (windows)", None) as advance:
            meter = measurer(run, server, advance, "search")
            # Past the budget less the later stages' least cost (which this batch's windows tell), each
            # load ends at min_windows.
            measurable = _measured(run.report.candidates) + len(feasible)
            measured = meter.measure(feasible, deadline=lambda: run.budget.deadline(
                keep_s=run.budget.search_reserve_s(measurable, meter.objective_window_seconds)))
        run.budget.observe_windows(meter.objective_window_seconds)
        for line in measured.log:
            run.decide(line)
        run.apply(feasible, measured.outcomes)
        if measured.contrasts is not None:
            run.report.contrasts.append(measured.contrasts)


def _finish(run: Run, heldout: HeldOut, repository: Path, signing_key: bytes | None) -> None:
    """Select, re-measure the winner against the baseline, accept on the held-out split, promote."""
    spec, report = run.spec, run.report
    measured = [c for c in report.candidates if c.status == "measured"]
    baseline = next((c for c in report.candidates if c.is_baseline), None)
    report.baseline_id = baseline.id if baseline else None
    if baseline is None or baseline.status != "measured":
        raise GptTritonError(
            f"the default route was not measured ({baseline.reason if baseline else 'not planned'}); "
            f"nothing can be compared or promoted; see {run.run_dir / 'report.json'}"
        )
    isolated_estimates(run, measured)
    chosen_by_selection = selection(run, measured)
    for line in chosen_by_selection.log:
        run.decide(f"select (tuning split): {line}")
    chosen_by_selection = finalists(run, measured, chosen_by_selection)  # the contenders judged again, together
    report.selected_id = chosen_by_selection.winner_id
    winner = report.candidate(chosen_by_selection.winner_id) if chosen_by_selection.winner_id else baseline
    run.save()
    if run.options.repeat_check:
        repeat_check(run, measured, chosen_by_selection)

    chosen = baseline
    if winner.id != baseline.id:
        runner_up_id = chosen_by_selection.runner_up_id
        report.gain = remeasure(run, winner, baseline, report.candidate(runner_up_id) if runner_up_id else None,
                                chosen_by_selection.estimate_ratio, chosen_by_selection.estimate)
        if report.gain is not None and (report.gain.significant or not spec.promotion.require_gain):
            chosen = winner
        else:
            run.decide("the re-measured gain's interval does not exclude 1.0: the baseline is promoted")
    else:
        run.decide("selection picked the default route: the baseline is promoted")
    report.winner_id = chosen.id
    run.save()

    # The held-out split is opened exactly once, here, for the final acceptance of the chosen candidate.
    accepted = accept_on_heldout(run, heldout, chosen, baseline)
    report.reference["heldout_access"] = heldout.describe()["opened"]
    if accepted is None:
        report.winner_id = None
        run.decide("nothing promoted: even the default route fails held-out acceptance, so the reference outputs "
                   "disagree with the model; check the --reference data")
        run.save()
        return
    if accepted.id != chosen.id:
        run.decide("the winner failed held-out acceptance: the baseline is promoted instead")
        report.winner_id = accepted.id
    run.save()
    if run.options.promote:
        name = spec.promotion.model_name or run.info.name
        promoted = promote_candidate(repository, name, report, accepted, spec.promotion.keep_versions, signing_key)
        report.promoted_version, report.promoted_path = promoted.version, str(promoted.path)
        run.decide(f"promoted {named(accepted)} as {name} version {promoted.version} into {repository}"
                   + ("" if promoted.signed else ", UNSIGNED: no signing key was set, nothing proves it untampered"))


def _measured(candidates: list[Candidate]) -> int:
    return sum(c.status == "measured" for c in candidates)
