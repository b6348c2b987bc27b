"""`gpt-triton tune`: the stages in order, with the run saved after each one.

model -> routes -> built candidates -> deployed in Triton -> screened (tuning split) + measured ->
selected -> re-measured against the baseline on a fresh server -> accepted on the held-out split ->
promoted -> reported (and pushed).

The held-out split is opened exactly once, for the final acceptance of the chosen candidate; every
earlier decision uses the tuning split and says so in ``report.decisions``.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gpt_triton import __version__
from gpt_triton.accuracy.reference import HeldOut, ReferenceSet
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.core.records import Candidate, Gain, RunReport
from gpt_triton.core.routes import BuildContext
from gpt_triton.core.spec import TuneSpec
from gpt_triton.select import Selection
from gpt_triton.server import TritonServer
from gpt_triton.tuning_cache import TuningCache

Log = Callable[[str], None]
Advance = Callable[[str], None]  # one step done; the text says what


class Progress:
    """How the pipeline tells a person what it is doing: log lines and step counters.

    This plain version only logs; the CLI passes a rich one with progress bars.
    """

    def __init__(self, log: Log = print) -> None:
        self.log = log

    @contextlib.contextmanager
    def bar(self, description: str, total: int | None) -> Iterator[Advance]:
        yield lambda text: None


@dataclass
class TuneOptions:
    model: Path
    spec: TuneSpec
    shapes: dict[str, list[int]] = field(default_factory=dict)
    reference: Path | None = None
    repository: Path | None = None  # default: spec.promotion.repository
    out: Path | None = None  # default: runs/<model>-<run id>
    triton_url: str | None = None
    resume: bool = False
    repeat_check: bool = False
    promote: bool = True
    pushgateway: str | None = None
    signing_key_file: str | None = None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def check_repository_writable(repository: Path) -> None:
    """Fail before any work when promotion could not write: one line, naming the path."""
    probe_dir = repository
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir() or not os.access(probe_dir, os.W_OK | os.X_OK):
        raise GptTritonError(f"model repository {repository} is not writable (checked {probe_dir}); pass --repository DIR")


class Run:
    """One tuning run: owns the report and saves it after every stage."""

    def __init__(self, options: TuneOptions, info: ModelInfo, shapes: dict[str, list[int]], progress: Progress) -> None:
        self.options = options
        self.spec = options.spec
        self.info = info
        self.shapes = shapes
        self.progress = progress
        self.log = progress.log
        self.started = time.monotonic()
        self.tuning: ReferenceSet = ReferenceSet(inputs=[], source="(not split yet)")  # set by _tune
        run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        self.run_dir = options.out or Path("runs") / f"{info.name}-{run_id}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        from gpt_triton.environment import machine

        self.report = RunReport(
            run_id=run_id, run_dir=str(self.run_dir), tool_version=__version__, created=_now(), model=info, shapes=shapes,
            spec=self.spec.model_dump(mode="json"), machine=machine(),
            triton_mode="remote" if options.triton_url else "embedded",
        )

    def decide(self, text: str) -> None:
        self.report.decisions.append(text)
        self.log(text)

    def save(self) -> None:
        self.report.tuning_seconds = round(time.monotonic() - self.started, 3)
        write_json_atomic(self.run_dir / "report.json", self.report.model_dump_json(indent=1))

    def over_budget(self, reserve_s: float = 0.0) -> bool:
        budget = self.spec.time_budget_s
        return budget is not None and time.monotonic() - self.started > budget - reserve_s


@contextlib.contextmanager
def open_server(run: Run, staging: Path, label: str) -> Iterator[TritonServer]:
    """The embedded server (started and always stopped) or the user's server (never stopped)."""
    from gpt_triton.server import EmbeddedTriton, RemoteTriton

    if run.options.triton_url:
        server: TritonServer = RemoteTriton(run.options.triton_url, native_backends=run.spec.server.native_backends)
        server.start()
        try:
            yield server
        finally:
            server.stop()
        return
    with EmbeddedTriton(repository=staging, workdir=run.run_dir / "triton", log_path=run.run_dir / f"triton-{label}.log") as embedded:
        yield embedded


def deploy(run: Run, server: TritonServer, candidates: Sequence[Candidate], staging: Path, advance: Advance | None = None,
           suffix: str = "") -> list[Candidate]:
    """Write each built candidate as a Triton model and load it; a load failure marks it failed."""
    from gpt_triton.deploy import choose_backend, write_model
    from gpt_triton.server import ModelLoadError

    loaded: list[Candidate] = []
    for candidate in candidates:
        if candidate.artifact is None or candidate.status in ("crashed", "failed"):
            continue
        backend = choose_backend(candidate.artifact, server.native_backends)
        name = f"c_{candidate.id}{suffix}"
        info = write_model(staging, name, run.info, run.shapes, candidate.artifact, candidate.serving, backend)
        try:
            server.load(staging / name)
        except ModelLoadError as exc:
            candidate.status, candidate.reason = "failed", f"load failed: {exc}"
            run.decide(f"{candidate.id}: failed to load in Triton ({exc})")
            continue
        candidate.deploy = info
        if candidate.status == "built":
            candidate.status = "deployed"
        loaded.append(candidate)
        if advance is not None:
            advance(f"{name} loaded ({backend} backend)")
    return loaded


def unload(server: TritonServer, candidates: Sequence[Candidate]) -> None:
    for candidate in candidates:
        if candidate.deploy is not None:
            with contextlib.suppress(Exception):
                server.unload(candidate.deploy.model_name)


def _reuse_measurements(run: Run, batch: Sequence[Candidate], cache: TuningCache) -> set[str]:
    """--resume: a candidate already built, screened and measured in this run directory is not measured again
    (the final re-measurement on a fresh server still checks any gain it claims)."""
    reused: set[str] = set()
    for candidate in batch:
        previous = cache.get(candidate.id)
        if previous is None or candidate.status != "built":
            continue
        if previous.status == "measured" and previous.latency:
            candidate.latency, candidate.accuracy, candidate.isolated = previous.latency, previous.accuracy, previous.isolated
            candidate.status = "measured"
        elif previous.status == "infeasible" and previous.accuracy is not None:
            candidate.accuracy, candidate.status, candidate.reason = previous.accuracy, "infeasible", previous.reason
        else:
            continue
        reused.add(candidate.id)
    if reused:
        run.decide(f"resume: {len(reused)} candidates keep their earlier screening and measurement from the tuning cache")
    return reused


def screen_accuracy(run: Run, grpc_url: str, candidates: Sequence[Candidate], tuning: ReferenceSet) -> None:
    """Accuracy on the tuning split through Triton; a failing candidate becomes infeasible (not timed)."""
    from gpt_triton.accuracy.compare import compare_requests, eligible
    from gpt_triton.accuracy.validate import infer_requests

    assert tuning.outputs is not None, "screening needs reference outputs (recorded, or the baseline's)"
    outputs = [t.name for t in run.info.outputs]
    for candidate in candidates:
        assert candidate.deploy is not None
        try:
            produced = infer_requests(grpc_url, candidate.deploy.model_name, tuning.inputs, outputs)
        except Exception as exc:  # an engine that errors at inference is a failed route, not a crash of the run
            candidate.status, candidate.reason = "failed", f"inference failed: {' '.join(str(exc).split())[:300]}"
            run.decide(f"{candidate.id}: inference failed on the tuning split ({candidate.reason})")
            continue
        result = compare_requests(tuning.outputs, produced, run.spec.accuracy, "tuning", inputs=tuning.inputs)
        candidate.accuracy = result
        ok, why = eligible(result, run.spec.accuracy)
        if not ok:
            candidate.status, candidate.reason = "infeasible", why
            run.decide(f"{candidate.id}: infeasible on the tuning split: {why}")


def reference_outputs_from_baseline(run: Run, grpc_url: str, baseline: Candidate, ref: ReferenceSet) -> ReferenceSet:
    """Without recorded outputs, what the default route serves today is the reference."""
    from gpt_triton.accuracy.validate import infer_requests

    assert baseline.deploy is not None
    outputs = infer_requests(grpc_url, baseline.deploy.model_name, ref.inputs, [t.name for t in run.info.outputs])
    return ref.with_outputs(outputs)


def tune(options: TuneOptions, progress: Progress | None = None) -> RunReport:
    """Run every stage; returns the report (also saved as RUN_DIR/report.json)."""
    from gpt_triton.accuracy.reference import load_reference, synthesize_reference

    spec = options.spec
    info = inspect_model(options.model)
    shapes = resolve_shapes(info, options.shapes)
    repository = Path(options.repository or spec.promotion.repository)
    if options.promote:
        check_repository_writable(repository)
    if options.reference is not None:
        ref = load_reference(options.reference, info, shapes)
    else:
        ref = synthesize_reference(info, shapes, spec.accuracy.synthetic_requests, spec.accuracy.split_seed)
    signing_key = None
    if options.promote:
        from gpt_triton.promote.signing import load_signing_key

        signing_key = load_signing_key(options.signing_key_file)

    run = Run(options, info, shapes, progress or Progress())
    try:
        _tune(run, ref, repository, signing_key)
        run.report.status = "done"
    except BaseException as exc:
        run.report.status, run.report.error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        run.save()
        if options.pushgateway:
            from gpt_triton.metrics.pushgateway import push_run_metrics

            with contextlib.suppress(GptTritonError) if run.report.status == "failed" else contextlib.nullcontext():
                push_run_metrics(options.pushgateway, run.report, failed=run.report.status == "failed")
    return run.report


def _tune(run: Run, ref: ReferenceSet, repository: Path, signing_key: bytes | None) -> None:
    from gpt_triton.accuracy.reference import save_calibration_npz, split_reference
    from gpt_triton.build import build_candidates
    from gpt_triton.measure.harness import Measurer
    from gpt_triton.search import CandidateSearch
    from gpt_triton.core.objective import objective_value
    from gpt_triton.tuning_cache import TuningCache

    spec, report = run.spec, run.report
    tuning, heldout = split_reference(ref, spec.accuracy.heldout_fraction, spec.accuracy.split_seed)
    run.tuning = tuning
    report.reference = {
        "source": ref.source, "synthetic": ref.synthetic, "requests": len(ref.inputs),
        "split_seed": spec.accuracy.split_seed, "tuning_requests": len(tuning.inputs),
        "heldout_requests": heldout.size, "outputs_recorded": ref.outputs is not None,
    }
    run.decide(f"reference: {ref.source} ({'synthetic' if ref.synthetic else 'recorded'}), "
               f"{len(tuning.inputs)} tuning / {heldout.size} held-out requests, seed {spec.accuracy.split_seed}")
    calibration = run.run_dir / "calibration.npz"
    save_calibration_npz(tuning, calibration)
    context = BuildContext(model=run.info, shapes=run.shapes, calibration_npz=str(calibration))
    cache = TuningCache.open(run.run_dir / "tuning_cache.jsonl", run.info, spec, resume=run.options.resume)
    search = CandidateSearch(spec, run.info)
    staging = run.run_dir / "staging"
    staging.mkdir(exist_ok=True)

    with open_server(run, staging, "search") as server:
        report.triton_version = server.version()
        while not run.over_budget(reserve_s=60.0):
            batch = search.ask()
            if not batch:
                break
            report.candidates.extend(batch)
            with run.progress.bar(f"building {len(batch)} candidates", len(batch)) as advance:
                build_candidates(batch, context, run.run_dir / "artifacts", spec.search, cache=cache,
                                 progress=lambda c: advance(f"{c.id} {c.status}"))
            run.save()
            reused = _reuse_measurements(run, batch, cache)
            wanted = [c for c in batch if c.id not in reused or (c.is_baseline and tuning.outputs is None)]
            with run.progress.bar(f"deploying {len(wanted)} candidates", len(wanted)) as advance:
                loaded = deploy(run, server, wanted, staging, advance)
            if tuning.outputs is None:
                baseline = next((c for c in loaded if c.is_baseline), None)
                if baseline is None:
                    raise GptTritonError("the default route did not build or load, so there is no reference output; "
                                         f"see {run.run_dir / 'report.json'}")
                tuning = run.tuning = reference_outputs_from_baseline(run, server.grpc_url, baseline, tuning)
                run.decide("tuning-split reference outputs: the default route's outputs served by Triton")
            screen_accuracy(run, server.grpc_url, [c for c in loaded if c.status == "deployed"], tuning)
            feasible = [c for c in loaded if c.status == "deployed"]
            with run.progress.bar(f"measuring {len(feasible)} candidates (windows)", None) as advance:
                measurer = Measurer(server.grpc_url, tuning.inputs, spec.measure, spec.objective,
                                    metrics_url=server.metrics_url, progress=advance,
                                    processes=spec.measure.client_processes)
                for line in measurer.measure(feasible):
                    run.decide(line)
                if measurer.contrasts is not None:
                    report.contrasts.append(measurer.contrasts)
            search.tell(batch, lambda c: objective_value(c.latency, spec.objective) if c.status == "measured" else None)
            for candidate in batch:
                cache.record(candidate)
            unload(server, batch)
            run.save()
        for line in search.decisions:
            report.decisions.append(f"search: {line}")
    _finish(run, heldout, repository, signing_key, staging)


def _eligible(run: Run) -> Callable[[Candidate], tuple[bool, str]]:
    from gpt_triton.accuracy.compare import eligible

    def check(candidate: Candidate) -> tuple[bool, str]:
        if candidate.accuracy is None:
            return False, "no accuracy result"
        return eligible(candidate.accuracy, run.spec.accuracy)

    return check


def _finish(run: Run, heldout: HeldOut, repository: Path, signing_key: bytes | None, staging: Path) -> None:
    from gpt_triton.measure.harness import Measurer
    from gpt_triton.measure.isolated import isolated_estimate, rank_correlation
    from gpt_triton.core.objective import objective_value
    from gpt_triton.select import gain, select

    spec, report = run.spec, run.report
    measured = [c for c in report.candidates if c.status == "measured"]
    baseline = next((c for c in report.candidates if c.is_baseline), None)
    report.baseline_id = baseline.id if baseline else None
    if baseline is None or baseline.status != "measured":
        raise GptTritonError(
            f"the default route was not measured ({baseline.reason if baseline else 'not planned'}); "
            f"nothing can be compared or promoted; see {run.run_dir / 'report.json'}"
        )
    for candidate in measured:
        if candidate.artifact is not None:
            try:
                candidate.isolated = isolated_estimate(candidate.artifact, run.tuning.inputs)
            except Exception as exc:  # isolated figures are for comparison only; say why one is missing
                run.decide(f"{candidate.id}: no isolated estimate ({type(exc).__name__}: {exc})")
    rho = rank_correlation(measured, load_index=spec.objective.load_index)
    report.isolated_vs_served_rho = None if math.isnan(rho) else round(rho, 4)
    if report.isolated_vs_served_rho is not None:
        run.decide(f"isolated (in-process) vs served ranking: Spearman rho {rho:.2f} over {len(measured)} candidates; "
                   "selection uses the served figures only")
    selection = select(measured, spec.objective, _eligible(run), report.contrasts, spec.measure.confidence)
    for line in selection.log:
        run.decide(f"select (tuning split): {line}")
    report.selected_id = selection.winner_id
    winner = report.candidate(selection.winner_id) if selection.winner_id else baseline
    run.save()
    if run.options.repeat_check:
        _repeat_check(run, measured, selection, staging)

    chosen = baseline
    if winner.id != baseline.id:
        contenders = [winner, baseline]
        runner_up = report.candidate(selection.runner_up_id) if selection.runner_up_id else None
        if runner_up is not None and runner_up.id not in (winner.id, baseline.id):
            contenders.insert(1, runner_up)
        with open_server(run, staging, "remeasure") as server:
            loaded = deploy(run, server, contenders, staging, suffix="_r")
            if len(loaded) == len(contenders):
                with run.progress.bar(f"re-measuring {len(contenders)} candidates (windows)", None) as advance:
                    measurer = Measurer(server.grpc_url, run.tuning.inputs, spec.measure,
                                        spec.objective, metrics_url=server.metrics_url, progress=advance,
                                    processes=spec.measure.client_processes)
                    results = measurer.remeasure(contenders)
                estimate = None
                win_value = objective_value(winner.latency, spec.objective)
                base_value = objective_value(baseline.latency, spec.objective)
                if win_value and base_value:
                    estimate = base_value / win_value
                report.gain = gain(results[baseline.id], results[winner.id], spec.objective, spec.measure.confidence,
                                   spec.measure.bootstrap_resamples, estimate)
                report.gain.remeasured_baseline = results[baseline.id].stats
                report.gain.remeasured_winner = results[winner.id].stats
            unload(server, loaded)
        g: Gain | None = report.gain
        if g is not None:
            run.decide(
                f"re-measured on a fresh server, interleaved: baseline/winner {g.metric} ratio {g.ratio.value:.3f} "
                f"[{g.ratio.low:.3f}, {g.ratio.high:.3f}] (selection estimated {g.selection_estimate_ratio or float('nan'):.3f})"
            )
        if g is not None and (g.significant or not spec.promotion.require_gain):
            chosen = winner
        else:
            run.decide("the re-measured gain's interval does not exclude 1.0: the baseline is promoted")
    else:
        run.decide("selection picked the default route: the baseline is promoted")
    report.winner_id = chosen.id
    run.save()

    # The held-out split is opened exactly once, here, for the final acceptance of the chosen candidate.
    accepted = _accept_on_heldout(run, heldout, chosen, baseline, staging)
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
        _promote(run, accepted, repository, signing_key)




def _repeat_check(run: Run, measured: Sequence[Candidate], first: Selection, staging: Path) -> None:
    """Select a second time from an independent measurement on a fresh server; do they agree?"""
    from gpt_triton.measure.harness import Measurer
    from gpt_triton.select import select

    copies = [c.model_copy(deep=True) for c in measured]
    for copy in copies:
        copy.latency, copy.status = [], "built"
    with open_server(run, staging, "repeat") as server:
        loaded = deploy(run, server, copies, staging, suffix="_k")
        with run.progress.bar("repeat check: measuring again (windows)", None) as advance:
            measurer = Measurer(server.grpc_url, run.tuning.inputs, run.spec.measure, run.spec.objective,
                                metrics_url=server.metrics_url, progress=advance,
                                processes=run.spec.measure.client_processes)
            measurer.measure(loaded)
        unload(server, loaded)
    contrasts = [measurer.contrasts] if measurer.contrasts is not None else []
    second = select([c for c in copies if c.status == "measured"], run.spec.objective, _eligible(run), contrasts,
                    run.spec.measure.confidence)
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


def _accept_on_heldout(run: Run, heldout: HeldOut, chosen: Candidate, baseline: Candidate, staging: Path) -> Candidate | None:
    """Open the held-out split once; return what may be promoted: the chosen candidate if it passes,
    else the baseline if it passes, else None (the reference disagrees with the model itself)."""
    from gpt_triton.accuracy.compare import compare_requests, eligible
    from gpt_triton.accuracy.validate import infer_requests

    held = heldout.open_for_acceptance(f"final acceptance of {chosen.id} before promotion")
    if not held.inputs:
        run.decide("held-out split is empty: acceptance skipped (give more reference requests)")
        return chosen
    names = [t.name for t in run.info.outputs]
    contenders = [chosen] if chosen.id == baseline.id else [chosen, baseline]
    with open_server(run, staging, "heldout") as server:
        loaded = deploy(run, server, contenders, staging, suffix="_h")
        if len(loaded) != len(contenders):
            raise GptTritonError(f"could not load {chosen.id} for held-out acceptance; see {run.run_dir / 'report.json'}")
        produced = {c.id: infer_requests(server.grpc_url, c.deploy.model_name, held.inputs, names)  # type: ignore[union-attr]
                    for c in contenders}
        unload(server, loaded)
    if held.outputs is None:  # what the default route serves today is the reference
        held = held.with_outputs(produced[baseline.id])
    assert held.outputs is not None
    for candidate in contenders:
        result = compare_requests(held.outputs, produced[candidate.id], run.spec.accuracy, "heldout", inputs=held.inputs)
        ok, why = eligible(result, run.spec.accuracy)
        run.decide(
            f"held-out acceptance of {candidate.id} on {result.requests} requests: {'passed' if ok else 'FAILED: ' + why}; "
            f"{result.exceedances} exceedances, upper bound {result.exceedance_upper_bound:.2%} at {result.confidence:.0%} confidence"
        )
        if candidate.id == chosen.id:
            run.report.heldout = result
        if ok:
            return candidate
    return None


def _promote(run: Run, chosen: Candidate, repository: Path, signing_key: bytes | None) -> None:
    from gpt_triton.deploy import choose_backend, model_config, write_version_files
    from gpt_triton.promote.repository import promote

    assert chosen.artifact is not None
    name = run.spec.promotion.model_name or run.info.name
    # Production uses the backend production would use; the embedded server only has python.
    native = frozenset(run.spec.server.native_backends or [])
    backend = choose_backend(chosen.artifact, native)
    config = model_config(name, run.info, run.shapes, chosen.artifact, chosen.serving, backend)
    report = run.report
    provenance = {
        "run_id": report.run_id,
        "model_sha256": run.info.sha256,
        "model_path": run.info.path,
        "candidate_id": chosen.id,
        "route": chosen.route_text(),
        "is_baseline": chosen.is_baseline,
        "backend": backend,
        "triton_version": report.triton_version,
        "latency": [s.model_dump(mode="json", exclude={"windows"}) for s in chosen.latency],
        "gain": report.gain.model_dump(mode="json") if report.gain else None,
        "accuracy_tuning": chosen.accuracy.model_dump(mode="json") if chosen.accuracy else None,
        "accuracy_heldout": report.heldout.model_dump(mode="json") if report.heldout else None,
    }
    promoted = promote(
        repository, name, config, lambda version_dir: write_version_files(version_dir, chosen.artifact, backend),  # type: ignore[arg-type]
        provenance, keep_versions=run.spec.promotion.keep_versions, signing_key=signing_key,
    )
    report.promoted_version = promoted.version
    report.promoted_path = str(promoted.path)
    run.decide(f"promoted {chosen.id} as {name} version {promoted.version} into {repository}")
