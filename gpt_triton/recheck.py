"""``gpt-triton recheck RUN_DIR``: a finished tune's pair measured again by perf_analyzer, as users run it.

The tune's baseline and the candidate selection picked are served again from the run's artifacts, on an
embedded Triton (started and always stopped) or on the user's (``--triton-url``: loaded there through the
model-repository API, as the tune loads them, and unloaded afterwards), or perf_analyzer runs on models
the user's server already serves (``--models BASELINE WINNER``). Each round runs perf_analyzer once on each
at its own defaults (:mod:`gpt_triton.measure.as_run`) with the tune's tuning-split inputs. The answer is
written to ``RUN_DIR/rechecks/<time>.json`` whole or not at all, with perf_analyzer's gain pooled over this
and the earlier rechecks alike (:class:`gpt_triton.core.recheck.RecheckSeries`); report.json is never touched.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

from gpt_triton.core.cross_check import agreement_interval
from gpt_triton.core.errors import GptTritonError, TransientError
from gpt_triton.core.recheck import Recheck, RecheckRound, hours_between, pool_rechecks
from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.core.routes import BuildContext
from gpt_triton.deploy import deploy_candidates, unload_candidates
from gpt_triton.measure.as_run import Model, RoundResult, paired_gains, run_rounds
from gpt_triton.measure.machine_load import load_over
from gpt_triton.measure.perf_analyzer import PerfAnalyzer, find_perf_analyzer, input_data
from gpt_triton.report import load_rechecks, load_report
from gpt_triton.routes._common import iter_calibration
from gpt_triton.run import write_json_atomic
from gpt_triton.server import EmbeddedTriton, RemoteTriton, TritonServer

# perf_analyzer cycles through the tuning split's first this many requests (make demo's split holds 45):
# enough variety for a served model's caches, without a --input-data JSON of megabytes.
INPUTS = 64


def the_pair(report: RunReport) -> tuple[Candidate, Candidate]:
    """The baseline and the candidate the re-measure compared with it (selection's pick, promoted or not)."""
    picked = report.selected_id or report.winner_id
    if report.status != "done" or not report.baseline_id:
        raise GptTritonError(f"run {report.run_id} did not finish (status {report.status}): there is no gain to recheck")
    if not picked or picked == report.baseline_id:
        raise GptTritonError(f"run {report.run_id}: selection kept the baseline, so there is no pair to recheck")
    return report.candidate(report.baseline_id), report.candidate(picked)


def rebased(cand: Candidate, report: RunReport, run_dir: Path) -> Candidate:
    """``cand`` with its artifact's folder found under ``run_dir`` when it is not where the report says: a tune
    given a relative ``--out`` (``make demo``'s ``runs/demo``) records folders relative to where it ran, which
    need not be where recheck runs, and a run directory may have been copied or mounted elsewhere."""
    art = cand.artifact
    if art is None or Path(art.directory).is_dir() or not report.run_dir:
        return cand
    try:
        inside = Path(art.directory).relative_to(report.run_dir)
    except ValueError:
        return cand
    return cand.model_copy(update={"artifact": art.model_copy(update={"directory": str(run_dir / inside)})})


def tuning_inputs(run_dir: Path, report: RunReport) -> list[dict[str, np.ndarray]]:
    """The tuning split the tune measured with (never the held-out split), as one request each."""
    path = run_dir / "calibration.npz"
    if not path.is_file():
        raise GptTritonError(f"{path} not found: the run directory lost the tune's tuning inputs")
    context = BuildContext(model=report.model, shapes=report.shapes, calibration_npz=str(path))
    return list(iter_calibration(context, limit=INPUTS))


def parse_model(text: str) -> Model:
    """``NAME`` or ``NAME:VERSION`` as served."""
    name, _, version = text.partition(":")
    if not name or (version and not version.isdigit()):
        raise GptTritonError(f"--models takes NAME or NAME:VERSION (a number), not {text!r}")
    return Model(name=name, version=version)


@contextmanager
def _served_pair(report: RunReport, pair: Mapping[str, Candidate], server: TritonServer,
                 repository: Path) -> Iterator[dict[str, Model]]:
    """The pair's artifacts loaded on ``server`` (as ``c_<id>_recheck``), unloaded when the block ends."""
    for cand in pair.values():
        if cand.artifact is None or not (Path(cand.artifact.directory) / cand.artifact.files[0]).exists():
            where = cand.artifact.directory if cand.artifact else "none was built"
            raise GptTritonError(f"candidate {cand.id}'s artifact is gone ({where}): recheck serves the run's own "
                                 "artifacts, so it needs the run directory as the tune left it (or give --models)")
    loaded: list[Candidate] = []
    try:
        for outcome in deploy_candidates(server, repository, list(pair.values()), report.model, report.shapes, "_recheck"):
            if outcome.status == "failed" or outcome.deploy is None:
                raise GptTritonError(f"candidate {outcome.candidate_id} could not be served again: {outcome.reason}")
            loaded.append(next(c for c in pair.values() if c.id == outcome.candidate_id).model_copy(
                update={"deploy": outcome.deploy}))
        yield {role: Model(name=f"c_{cand.id}_recheck") for role, cand in pair.items()}
    finally:
        unload_candidates(server, loaded)


def _batch_axis(server: TritonServer, model: Model) -> bool:
    try:
        config = server.client().get_model_config(model.name, model.version, as_json=True)
    except InferenceServerException as exc:
        raise GptTritonError(f"Triton at {server.grpc_url} serves no model {model.name!r}: {exc.message()}") from None
    return int(config["config"].get("max_batch_size", 0)) > 0


def _as_record(result: RoundResult) -> RecheckRound:
    fields: dict[str, object] = {"first": result.first}
    notes = []
    for role, got in result.figures.items():
        if isinstance(got, str):
            notes.append(f"{role}: {got}")
        else:
            fields.update({f"{role}_p50_ms": got.p50_ms, f"{role}_p99_ms": got.p99_ms})
    retried = "; ".join(f"{role}: {why}" for role, why in result.retried.items())
    if (load := result.round_load()) is not None:
        fields.update(zip(("other_cores", "steal_cores", "seconds"), load, strict=True))
    return RecheckRound.model_validate({**fields, "note": "; ".join(notes), "retried": retried})


def machine_words(rounds: Sequence[RecheckRound], remote: bool) -> str:
    """What else the machine ran during the rounds, as the tune's decision log says it of its stages."""
    load = load_over([(r.other_cores, r.steal_cores or 0.0, r.seconds or 0.0) for r in rounds
                      if r.other_cores is not None], unit="rounds")
    if load is None:
        return ""
    # The user's server is not this process's child: on this machine its CPU counts among the others.
    return load.describe() + (" (the server at --triton-url is not this process's: on this machine it counts "
                              "among them)" if remote else "")


def recheck(run_dir: Path, rounds: int = 6, interval_ms: int = 5000, triton_url: str | None = None,
            models: tuple[str, str] | None = None, tool: PerfAnalyzer | None = None, retries: int = 1,
            say: Callable[[str], None] = print) -> tuple[Recheck, Path]:
    """Run the recheck, write ``RUN_DIR/rechecks/<time>.json``, return the record and its path."""
    if rounds < 2:
        raise GptTritonError(f"--rounds {rounds}: an interval needs at least 2 rounds")
    if retries < 0:
        raise GptTritonError(f"--retries {retries}: give 0 (an unsettled run is left out) or more")
    if interval_ms < 100:
        raise GptTritonError(f"--interval-ms {interval_ms}: perf_analyzer's windows need at least 100 ms (its default is 5000)")
    if models is not None and triton_url is None:
        raise GptTritonError("--models names models on a server you run: give --triton-url too")
    named = None if models is None else {"baseline": parse_model(models[0]), "winner": parse_model(models[1])}
    report = load_report(run_dir)
    baseline, winner = (rebased(c, report, run_dir) for c in the_pair(report))
    earlier = load_rechecks(run_dir)  # before anything runs: a record that does not read is one line, nothing measured
    requests = tuning_inputs(run_dir, report)
    tool = tool or find_perf_analyzer(required=True)
    assert tool is not None
    version = tool.version()
    say(f"{version}: {baseline.id} (baseline) against {winner.id}, {rounds} rounds of one perf_analyzer run each "
        f"(-p {interval_ms}, its default stability; an unsettled run is {_retry_words(retries)}), "
        f"{len(requests)} inputs")
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpt-triton-recheck-")))
        server: TritonServer = (RemoteTriton(triton_url) if triton_url else
                                EmbeddedTriton(repository=folder / "repo", workdir=folder / "work", signing_key=False))
        server.start()
        stack.callback(server.stop)  # the embedded server is stopped; the user's only disconnected from
        if named is not None:
            served = named
        else:
            served = stack.enter_context(_served_pair(report, {"baseline": baseline, "winner": winner}, server,
                                                      folder / "repo"))
        doc, batch = input_data(requests, _batch_axis(server, served["baseline"]))
        (folder / "input.json").write_text(json.dumps(doc))

        def show(r: int, result: RoundResult) -> None:
            row = _as_record(result)
            say(f"  round {r + 1}: " + (row.note + " (left out)" if row.note else
                f"baseline p50 {row.baseline_p50_ms:.3f} p99 {row.baseline_p99_ms:.3f} ms; "
                f"winner p50 {row.winner_p50_ms:.3f} p99 {row.winner_p99_ms:.3f} ms")
                + (f" (run again after {row.retried})" if row.retried else ""))

        results = run_rounds(tool, server.grpc_url, served, folder / "input.json", batch, rounds, interval_ms, folder,
                             on_round=show, retries=retries)
    gains = paired_gains(results)
    if not gains:
        raise TransientError(f"perf_analyzer found a stable measurement on both sides in fewer than 2 of {rounds} "
                             "rounds: the machine was too unsettled; run recheck again")
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kept = [_as_record(r) for r in results]
    gain = report.gain if report.gain is not None and report.gain.metric in gains else None
    agreement, z = agreement_interval(gain.ratio, gains[gain.metric]) if gain is not None else (None, 0.0)
    record = Recheck(
        created=now, run_id=report.run_id, tune_created=report.created, hours_after_tune=hours_between(report.created, now),
        baseline_id=baseline.id, winner_id=winner.id,
        baseline_model=_label(served["baseline"]), winner_model=_label(served["winner"]),
        triton_mode="remote" if triton_url else "embedded", server=server.grpc_url if triton_url else "",
        perf_analyzer=version, interval_ms=interval_ms,
        requests=len(requests), rounds=kept, gains=gains, machine=machine_words(kept, remote=triton_url is not None),
        metric=report.spec.objective.metric, tune_gain=gain.ratio if gain is not None else None,
        tune_statistic=gain.statistic if gain is not None else "", agreement=agreement, z=z,
    )
    record.series = pool_rechecks(earlier, record)
    path = run_dir / "rechecks" / f"{re.sub(r'[^0-9T]', '', now[:19])}Z.json"
    path.parent.mkdir(exist_ok=True)
    write_json_atomic(path, record.model_dump_json(indent=1))
    return record, path


def _retry_words(retries: int) -> str:
    return "left out" if retries == 0 else "run again once" if retries == 1 else f"run again up to {retries} times"


def _label(model: Model) -> str:
    return f"{model.name}:{model.version}" if model.version else model.name

