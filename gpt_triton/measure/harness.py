"""The measurement harness: interleaved windows across candidates, racing, and the separate re-measure.

* Interleaving: windows go round-robin across candidates (A, B, C, A, B, C, ...) so slow drift of a
  shared, noisy machine (other tenants, thermal, page cache) hits every candidate alike instead of
  whichever happened to be measured last. Each candidate gets a short warm-up before its first window.
* Racing: every candidate first gets one full window (nothing is pruned before it was timed); after
  each round, a candidate is dropped when its drift-adjusted objective is clearly worse than the
  leader's (:func:`gpt_triton.measure.racing.race_round`: one model over ALL windows of the run in
  order, candidate and round effects, errors correlated between neighbouring windows, the error
  Bonferroni-split over comparisons and rounds). After the first round the order is shuffled each
  round. The rest of the budget goes to the contenders until each is stable (perf_analyzer's rule),
  separated from every other candidate, or at ``max_windows``.
* Re-measure: a *separate* interleaved run of the finalists with fresh windows and seeds; the gain is
  computed on it, not on the windows that picked the winner (the winner's curse).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from gpt_triton.core.errors import GptTritonError, ServerDiedError
from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.core.outcomes import MeasureOutcome
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.burn_in import burn_in
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.crowding import set_aside_note
from gpt_triton.measure.gain_precision import (
    GainPrecision,
    gain_precision,
    next_check,
    precision_note,
    rule_applies,
)
from gpt_triton.measure.loadgen import WindowSample, pinned
from gpt_triton.measure.perf_analyzer import load_client
from gpt_triton.measure.quantiles import sizing_note, window_requests
from gpt_triton.measure.race_step import race_step
from gpt_triton.measure.racing import (
    RaceWindow,
    contrasts_from_fit,
    drift_fit,
    window_log_stat,
)
from gpt_triton.measure.runs import LoadRun, MeasureRun, RemeasureResult, dedupe_key, remeasure_result
from gpt_triton.measure.window_log import WindowSink
from gpt_triton.measure.windows import is_stable, summarise

# When a stage should end (monotonic), or a function giving it: the search's moves as the run learns how
# long its windows take. None: no time budget.
Deadline = float | Callable[[], float | None] | None


def _past(deadline: Deadline) -> bool:
    when = deadline() if callable(deadline) else deadline
    return when is not None and time.monotonic() >= when


class Measurer:
    def __init__(
        self,
        grpc_url: str,
        requests: Sequence[dict[str, np.ndarray]],
        spec: MeasureSpec,
        objective: ObjectiveSpec,
        metrics_url: str | None = None,
        progress: Callable[[str], None] | None = None,
        *,
        processes: int = 1,
        server_pid: int | None = None,
        outputs: Sequence[str] | None = None,
        seed: int = 0,
        race_after: int = 1,
        client: LoadClient | None = None,
        http_url: str | None = None,
        on_window: WindowSink | None = None,
        at_round: Callable[[], None] | None = None,
    ) -> None:
        if not requests:
            raise GptTritonError("no requests to measure with: the tuning split is empty")
        if objective.load_index >= len(spec.loads):
            raise GptTritonError(
                f"objective.load_index {objective.load_index} but measure.loads has {len(spec.loads)} entries")
        self.grpc_url = grpc_url
        self.requests = list(requests)
        self.spec = spec
        self.objective = objective
        self.metrics_url = metrics_url
        self.progress = progress or (lambda _msg: None)
        self.on_window = on_window  # every counted window (not warm-ups), as it ends: the run's windows.csv
        # Called as each round of windows starts: a stage measured in turns with another waits there (.relay).
        self.at_round = at_round or (lambda: None)
        self.processes = processes
        self.server_pid = server_pid
        self.outputs = list(outputs) if outputs else None
        self.seed = seed
        # Who sends the requests: measure.client (the built-in generator or perf_analyzer), or the caller's.
        self.client = client if client is not None else load_client(spec.client, processes, spec.protocol, http_url)
        # Racing may drop after this many interleaved rounds; never before every candidate has one full
        # window (the interval is drift-pooled across candidates, so it does not need min_windows each).
        self.race_after = max(1, race_after)
        # Every window this measurer ran, (candidate id, load label) in order: its history across runs,
        # which also seeds each run's shuffle so two runs never share an order.
        self.window_order: list[tuple[str, str]] = []
        self._windows_run = 0
        # Wall seconds of every window at the objective's load (warm-ups excluded): what the run's time
        # budget plans the later stages with (gpt_triton.budget).
        self.objective_window_seconds: list[float] = []
        # Counted windows, and those measured again in their place (gpt_triton/measure/crowding.py), in order.
        self.counted: list[WindowResult] = []
        self.set_aside: list[WindowResult] = []

    @property
    def tail_metric(self) -> str:
        """The statistic the objective reads per window: a throughput objective's SLO reads the p99."""
        if self.objective.metric == "throughput":
            return "p99" if self.objective.slo_p99_ms is not None else "mean"
        return self.objective.metric

    @property
    def window_min_requests(self) -> int:
        """Requests every window holds: enough for the objective's quantile (p99: 500 with the default
        ``tail_requests``), so a window's length follows from the quantile and the rate it runs at."""
        return window_requests(self.tail_metric, self.spec.window_min_requests, self.spec.tail_requests)

    @property
    def windows_run(self) -> int:
        """Windows this measurer has run so far, warm-ups included (a measure of the time spent)."""
        return self._windows_run

    def _window(self, model: str, load: LoadProfile, duration_s: float, min_requests: int) -> WindowSample:
        self._windows_run += 1
        began = time.monotonic()
        sample = self.client.window(
            self.grpc_url, model, self.requests, load, duration_s, min_requests, outputs=self.outputs,
            metrics_url=self.metrics_url, seed=self.seed * 1_000_003 + self._windows_run,
            payload_start=self._windows_run * 131, settle_s=self.spec.settle_s,
        )
        self._windows_run += len(sample.set_aside)  # measured again in its place (gpt_triton/measure/crowding.py)
        if min_requests > 0 and load == self.spec.loads[self.objective.load_index]:
            self.objective_window_seconds.append(time.monotonic() - began)
        return sample

    def _window_done(self, cid: str, load: LoadProfile, round_no: int, sample: WindowSample) -> None:
        res = sample.result
        self.set_aside.extend(sample.set_aside)
        self.counted.append(res)
        if self.on_window is not None:
            for done in [*sample.set_aside, res]:  # the requests' latencies of the counted one only
                self.on_window(cid, load.label(), round_no, done, sample.latencies_ms if done is res else None)
        self.progress(f"{cid} {load.label()} window {round_no}: p50 {res.p50_ms:.3g} ms p99 "
                      f"{res.p99_ms:.3g} ms {res.throughput:.4g} req/s errors {res.errors}")

    def _say(self, log: list[str], message: str) -> None:
        log.append(message)
        self.progress(message)

    def _record(self, run: LoadRun, cid: str, round_no: int, sample: WindowSample) -> None:
        """The window's log objective (lower is better) and its in-window variance, for racing."""
        if self.objective.metric == "throughput":
            if sample.result.throughput > 0:  # no in-window estimate for a rate
                run.windows.append(RaceWindow(cid, round_no, -float(np.log(sample.result.throughput))))
            return
        if sample.latencies_ms.size:
            value, var = window_log_stat(sample.latencies_ms, self.objective.metric,
                                         seed=self.seed * 7919 + self._windows_run)
            run.windows.append(RaceWindow(cid, round_no, value, var))

    def _interleave(self, models: dict[str, str], load: LoadProfile, racing: bool, min_windows: int,
                    max_windows: int, stop_when_stable: bool, log: list[str], shuffle: bool = True,
                    min_requests: int | None = None, deadline: Deadline = None) -> LoadRun:
        """Interleaved rounds over ``models`` at ``load``; each window holds at least ``min_requests``
        (default: what the objective's quantile needs); past ``deadline`` (monotonic) it ends at ``min_windows``."""
        min_requests = self.window_min_requests if min_requests is None else min_requests
        run = LoadRun(samples={cid: [] for cid in models})
        max_windows = max(max_windows, min_windows)
        done: set[str] = set()
        ended_by = "max_windows"
        rng = np.random.default_rng(self.seed * 31 + len(self.window_order))
        for round_no in range(1, max_windows + 1):
            todo = [cid for cid in models if cid not in done and cid not in run.dropped and cid not in run.failed]
            if not todo:
                break
            self.at_round()
            if shuffle and round_no > 1:
                # A fresh order each round: a candidate does not always follow the same neighbour, so a
                # carry-over (a previous model's threads still spinning, its cache footprint) is noise
                # that the drift model sees, not a bias on one candidate.
                todo = [todo[k] for k in rng.permutation(len(todo))]
            for cid in todo:
                try:
                    if not run.samples[cid] and self.spec.warmup_s > 0:
                        self._window(models[cid], load, self.spec.warmup_s, 0)  # discarded
                    sample = self._window(models[cid], load, self.spec.window_s, min_requests)
                except ServerDiedError:
                    raise  # not this candidate's failure: the stage ends
                except GptTritonError as exc:
                    run.failed[cid] = str(exc)
                    self._say(log, f"{cid}: measurement failed at {load.label()}: {exc}")
                    continue
                self.window_order.append((cid, load.label()))
                res = sample.result
                if res.requests > 0 and res.errors == res.requests:
                    run.failed[cid] = f"every request failed at {load.label()}: {sample.first_error}"
                    self._say(log, f"{cid}: {run.failed[cid]}")
                    continue
                run.samples[cid].append(sample)
                self._record(run, cid, round_no, sample)
                self._window_done(cid, load, round_no, sample)
            if racing and round_no >= self.race_after:
                futile = race_step(run, self.spec, self.objective, max_windows, done, lambda m: self._say(log, m))
                left = [c for c in models if c not in run.dropped and c not in run.failed]
                if len(left) == 1 and len(run.samples) > 1 and left[0] not in done:
                    done.add(left[0])  # separated from every other candidate: nothing left to compare
                    self._say(log, f"{left[0]} separated from every other candidate after {round_no} windows")
                    continue
                if futile and round_no >= min_windows:
                    done.update(left)  # the remaining budget could only confirm the tie
                    continue
            if round_no < min_windows:
                continue
            if stop_when_stable:
                for cid in todo:
                    if cid not in run.failed and is_stable([s.result for s in run.samples[cid]], self.spec.stability):
                        done.add(cid)
                        self._say(log, f"{cid} stable at {load.label()} after {len(run.samples[cid])} windows")
            if round_no < max_windows and _past(deadline):
                ended_by = "time budget"
                self._say(log, f"time budget: {load.label()} ended after {round_no} rounds (min_windows {min_windows})")
                break
        for cid in models:
            if cid not in done and cid not in run.dropped and cid not in run.failed and stop_when_stable:
                self._say(log, f"{cid} not stable at {load.label()} after {len(run.samples[cid])} windows ({ended_by})")
        return run

    def _until_precise(self, run: LoadRun, models: dict[str, str], pair: tuple[str, str], load: LoadProfile,
                       log: list[str], doing: str, deadline: float | None) -> GainPrecision | None:
        """Go on with ``pair`` = (baseline, selected), alternating, until their ratio is known to ``gain_precision``,
        each has ``gain_max_windows`` windows, or ``deadline`` (monotonic) has passed (:mod:`.gain_precision`)."""
        target, cap = self.spec.gain_precision, self.spec.gain_max_windows

        def check() -> GainPrecision | None:
            return gain_precision([s.latencies_ms for s in run.samples[pair[0]]],
                                  [s.latencies_ms for s in run.samples[pair[1]]], self.objective.metric, target,
                                  seed=self.seed + self._windows_run, statistic=self.spec.gain_statistic)

        def windows() -> int:
            return min(len(run.samples[c]) for c in pair)

        found, checked_at = check(), windows()
        round_no = max(len(samples) for samples in run.samples.values())
        stopped_by = "window cap"
        while (found is None or not found.reached) and windows() < cap:
            if _past(deadline):
                stopped_by = "time budget"
                break
            round_no += 1
            self.at_round()
            for cid in (pair if round_no % 2 else pair[::-1]):
                try:
                    sample = self._window(models[cid], load, self.spec.window_s, self.window_min_requests)
                except ServerDiedError:
                    raise  # not this candidate's failure: the stage ends
                except GptTritonError as exc:
                    run.failed[cid] = str(exc)
                    self._say(log, f"{doing}: {cid}: measurement failed at {load.label()}: {exc}")
                    return found
                self.window_order.append((cid, load.label()))
                run.samples[cid].append(sample)
                self._record(run, cid, round_no, sample)
                self._window_done(cid, load, round_no, sample)
            if windows() >= min(cap, next_check(checked_at, found, target)):
                found, checked_at = check(), windows()
        if checked_at != windows():  # the time budget ended it between checks: the note reads every window
            found = check()
        recent = self.objective_window_seconds[-8:]  # the pair's last rounds: what one more would cost
        round_s = 2 * float(np.median(recent)) if recent else None
        self._say(log, precision_note(doing, pair, found, target, stopped_by, round_s))
        return found

    def measure_pair(self, candidates: Sequence[Candidate], pair: tuple[str, str], log: list[str],
                     doing: str = "finalists", deadline: float | None = None) -> GainPrecision | None:
        """The selection's estimate: ``candidates`` (the re-measure's, in its order) through the re-measure's
        design (:meth:`_replicate`), so that the estimate and the re-measure are two runs of one design on
        two fresh servers; its ratio for ``pair`` = (baseline, selected). None, measuring nothing, when the
        rule does not apply (``gain_precision`` 0, a throughput objective)."""
        if not rule_applies(self.spec.gain_precision, self.objective.metric):
            return None
        return self._replicate(candidates, pair, log, doing, deadline)[1]

    def _replicate(self, candidates: Sequence[Candidate], pair: tuple[str, str] | None, log: list[str], doing: str,
                   deadline: float | None) -> tuple[LoadRun, GainPrecision | None]:
        """The burn-in (:meth:`burn_in`), ``remeasure_windows`` rounds of every candidate (A, B, C, A, ...:
        the classic alternation, not shuffled) with fresh seeds, then ``pair`` alone until its ratio is
        known (:meth:`_extend`)."""
        self.burn_in(candidates, log, doing)
        marks = self._marks()
        run = self._separate_run(candidates, self.spec.remeasure_windows, False, doing)
        found = self._extend(run, candidates, pair, log, doing, deadline) if pair is not None else None
        self._note_set_aside(log, doing, marks)
        return run, found

    def _marks(self) -> tuple[int, int]:
        return len(self.counted), len(self.set_aside)

    def _note_set_aside(self, log: list[str], doing: str, since: tuple[int, int]) -> None:
        note = set_aside_note(doing, self.set_aside[since[1]:], self.counted[since[0]:])
        if note:
            self._say(log, note)

    def _extend(self, run: LoadRun, candidates: Sequence[Candidate], pair: tuple[str, str], log: list[str],
                doing: str, deadline: float | None) -> GainPrecision | None:
        """:meth:`_until_precise` on ``run`` when the rule applies (a latency objective, ``gain_precision`` >
        0); a pair member that is not deployed, or whose window fails, fails the step."""
        if not rule_applies(self.spec.gain_precision, self.objective.metric):
            return None
        models = {c.id: c.deploy.model_name for c in candidates if c.id in pair and c.deploy is not None}
        if set(models) != set(pair):
            raise GptTritonError(f"{doing}: {', '.join(sorted(set(pair) - set(models)))} is not deployed")
        with pinned(self.server_pid):
            found = self._until_precise(run, models, pair, self.spec.loads[self.objective.load_index], log, doing,
                                        deadline)
        if run.failed:
            cid, why = next(iter(run.failed.items()))
            raise GptTritonError(f"{doing}: {cid} failed: {why}")
        return found

    def measure(self, candidates: Sequence[Candidate], until_separated: bool = False,
                deadline: Deadline = None) -> MeasureRun:
        """Measure every deployed candidate at every load in ``spec.loads``; candidates are read, never
        changed: each gets a :class:`MeasureOutcome` (``measured``, or ``failed`` with the reason).
        ``until_separated`` (the finalist stage): windows do not stop at stability; the run goes on until
        racing has separated the candidates, found them futile to separate (a tie that holds), or
        ``max_windows``. Past ``deadline`` (monotonic: the time budget) a load ends at ``min_windows``."""
        log: list[str] = []
        windows_before, marks = self._windows_run, self._marks()
        groups: dict[str, list[Candidate]] = {}
        for cand in candidates:
            if cand.deploy is None:
                self._say(log, f"{cand.id}: not deployed, not measured")
                continue
            groups.setdefault(dedupe_key(cand), []).append(cand)
        reps = {group[0].id: group[0] for group in groups.values()}
        for group in groups.values():
            if len(group) > 1:
                self._say(log, f"{', '.join(c.id for c in group[1:])}: same artifact, runtime options and serving "
                               f"route as {group[0].id}: measured once, results copied")
        models = {cid: c.deploy.model_name for cid, c in reps.items() if c.deploy is not None}
        spec, obj_index = self.spec, self.objective.load_index
        # Racing compares one number per candidate; with rate profiles the throughput objective spans
        # several loads, so it cannot race on one.
        race = spec.racing and not (self.objective.metric == "throughput" and spec.loads[obj_index].kind != "concurrency")
        if spec.racing and not race:
            self._say(log, "racing off: the throughput objective over rate profiles spans several loads")
        order = [obj_index] + [i for i in range(len(spec.loads)) if i != obj_index]
        runs: dict[int, LoadRun] = {}
        race_windows: dict[str, list[RaceWindow]] = {}
        with pinned(self.server_pid) as sharing:
            self._say(log, f"machine: {sharing['note']}")
            excluded: set[str] = set()
            for i in order:
                live = {cid: m for cid, m in models.items() if cid not in excluded}
                # Only the objective's load needs windows sized for its quantile (a throughput objective
                # reads every load); the others are reported and keep the configured minimum.
                sized = i == obj_index or self.objective.metric == "throughput"
                runs[i] = self._interleave(live, spec.loads[i], race and i == obj_index, spec.min_windows,
                                           spec.max_windows, not until_separated, log,
                                           min_requests=None if sized else spec.window_min_requests,
                                           deadline=deadline)
                excluded |= set(runs[i].dropped) | set(runs[i].failed)
                race_windows[spec.loads[i].label()] = runs[i].windows
        obj_samples = [s for samples in runs[obj_index].samples.values() for s in samples]
        rate = float(np.median([s.result.throughput for s in obj_samples])) if obj_samples else None
        self._say(log, sizing_note(self.tail_metric, spec.window_min_requests, spec.window_s, rate,
                                   spec.tail_requests))
        fit = drift_fit(runs[obj_index].windows)
        if self.objective.metric == "throughput" and spec.loads[obj_index].kind != "concurrency":
            fit = None  # the objective is the best held rate over several loads, not one load's windows
        aliases = {c.id: group[0].id for group in groups.values() for c in group[1:]}
        outcomes: list[MeasureOutcome] = []
        for cid, rep in reps.items():
            failed = next((runs[i].failed[cid] for i in order if cid in runs[i].failed), None)
            stats = [
                summarise(load, runs[i].samples.get(cid, []), spec.stability, spec.confidence,
                          spec.bootstrap_resamples, self.seed)
                for i, load in enumerate(spec.loads)
            ]
            reason = failed or (f"dropped by racing: {runs[obj_index].dropped[cid]}"
                                if cid in runs[obj_index].dropped else None)
            outcomes.extend(MeasureOutcome(candidate_id=cand.id, status="failed" if failed else "measured",
                                           reason=reason, latency=stats)
                            for cand in groups[dedupe_key(rep)])
        windows = self._windows_run - windows_before
        self._note_set_aside(log, "measured", marks)
        self._say(log, f"measured {len(reps)} distinct candidates in {windows} windows (warm-ups included)")
        return MeasureRun(outcomes=outcomes, log=log, contrasts=contrasts_from_fit(fit, aliases) if fit else None,
                          race_windows=race_windows, machine_sharing=sharing, windows=windows)

    def burn_in(self, candidates: Sequence[Candidate], log: list[str], doing: str) -> None:
        """``measure.burn_in_s`` of uncounted traffic for each of ``candidates`` (:mod:`.burn_in`), in windows.csv
        as round 0; one not deployed fails it before anything is sent, as the run after it would."""
        models = {c.id: c.served_model(doing) for c in candidates}
        if self.spec.burn_in_s <= 0 or not models:
            return
        load = self.spec.loads[self.objective.load_index]

        def send(cid: str, seconds: float) -> WindowResult:
            result = self._window(models[cid], load, seconds, 0).result
            if self.on_window is not None:
                self.on_window(cid, load.label(), 0, result, None)
            return result

        self.at_round()  # in turns, every stage's burn-in comes before any counted round
        with pinned(self.server_pid):
            done = burn_in(send, list(models), self.spec.burn_in_s * len(models), self.spec.window_s)
        self._say(log, f"{doing}: {done.describe(self.spec.burn_in_s)}")

    def _separate_run(self, candidates: Sequence[Candidate], windows: int, shuffle: bool, doing: str) -> LoadRun:
        """A run of exactly ``windows`` windows each at the objective's load, no racing, with fresh seeds
        (independent of the windows that selected anyone); a failed candidate fails the whole run."""
        models = {c.id: c.served_model(doing) for c in candidates}
        load = self.spec.loads[self.objective.load_index]
        self.seed += 7_777
        with pinned(self.server_pid):
            run = self._interleave(models, load, False, windows, windows, False, [], shuffle=shuffle)
        if run.failed:
            cid, why = next(iter(run.failed.items()))
            raise GptTritonError(f"{doing} {cid} failed: {why}")
        return run

    def compare(self, candidates: Sequence[Candidate], windows: int) -> list[RaceWindow]:
        """A separate run of exactly ``windows`` windows each at the objective's load, interleaved in a
        fresh order each round and with fresh seeds, no racing; returns every window's log objective in
        the order run, for :func:`gpt_triton.measure.racing.drift_fit` (a judge of finalists)."""
        return self._separate_run(candidates, windows, True, "comparing").windows

    def remeasure(self, candidates: Sequence[Candidate], pair: tuple[str, str] | None = None,
                  log: list[str] | None = None, deadline: float | None = None) -> dict[str, RemeasureResult]:
        """A separate run of :meth:`_replicate`'s design at the objective's load, with fresh seeds; the basis
        for the gain's interval. With ``pair`` = (baseline, winner) the two go on until their ratio is known
        to ``gain_precision`` (or the window cap, or ``deadline``: the ``remeasure_windows`` always run);
        the decision lines go to ``log``."""
        run, _ = self._replicate(candidates, pair, log if log is not None else [], "re-measure", deadline)
        load = self.spec.loads[self.objective.load_index]
        return {cid: remeasure_result(load, samples, self.spec, self.seed) for cid, samples in run.samples.items()}
