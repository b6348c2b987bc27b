"""The re-measure: the winner (and runner-up) against the baseline on fresh servers of its own, the gain
the run claims; on its own after the finalist stage, or in turns with the finalist pair's estimate
(``measure.remeasure_in_turns``, gpt_triton/measure/relay.py); with ``measure.cross_check`` the other
load client measures the same pair on the re-measure's first server, in turns with it.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from typing import cast

from gpt_triton import __version__
from gpt_triton.core.errors import GptTritonError, ServerDiedError
from gpt_triton.core.measurements import Interval, WindowResult
from gpt_triton.core.objective import objective_value
from gpt_triton.core.outcomes import fresh_copy
from gpt_triton.core.records import Candidate, Gain
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.cross_check import client_cross_check
from gpt_triton.measure.gain_precision import GainPrecision
from gpt_triton.measure.machine_load import MachineLoad, load_contrast, machine_load, pace_contrast
from gpt_triton.measure.perf_analyzer import find_perf_analyzer
from gpt_triton.measure.relay import Relay, in_turns
from gpt_triton.measure.runs import CrossChecked, RemeasuredInTurns, RemeasureResult
from gpt_triton.run import Run
from gpt_triton.select import gain_over_servers
from gpt_triton.server import TritonServer
from gpt_triton.serving import measurer, serve


def pair_and_remeasure_in_turns(run: Run, design: Sequence[Candidate], pair: tuple[str, str], stage: MeasureSpec,
                                objective: ObjectiveSpec, notes: list[str]) -> GainPrecision | None:
    """:func:`pair_estimate` and the re-measure (``measure.remeasure_in_turns``): the pair's server and the
    re-measure's (``measure.remeasure_servers`` of them) started together, each holding its own copies of
    ``design``, their stages taking turns a round each (:mod:`gpt_triton.measure.relay`), every burn-in
    before any counted round, so that the estimate and the re-measure see the same spells of the machine.
    The re-measure's results wait in ``run.remeasured_in_turns`` for :func:`remeasure` to judge. Returns the
    pair's estimate; None (nothing measured, the re-measure left to run on its own) when a member would
    not load."""
    servers = run.spec.measure.remeasure_servers
    each_server = remeasure_spec(run.spec.measure)
    stages = [("finalists-pair", "_p"), *(remeasure_stage(i) for i in range(servers))]
    holders = [list(design), *([fresh_copy(c) for c in design] for _ in range(servers))]
    # The other client's rounds share the re-measure's first server; the two trade places every other
    # cycle, so that each client's rounds follow the pair server's as often as the other client's.
    order = [label for label, _ in stages]
    if (checking := cross_check_spec(run.spec.measure)) is not None:
        order.insert(2, CROSS_CHECK_STAGE)
    relay = Relay(order, alternate=(order[1], CROSS_CHECK_STAGE) if checking is not None else None)
    lines: list[list[str]] = [[] for _ in stages]
    with contextlib.ExitStack() as stack:
        served = [stack.enter_context(serve(run, held, label, suffix)) for (label, suffix), held in zip(stages, holders, strict=True)]
        if any(len(loaded) != len(design) for _, loaded in served):
            notes.append("finalists: the re-measure's candidates did not all load on the servers that were to take turns: "
                         "the estimate is the finalist run's, and the re-measure runs on its own")
            return None
        advance = stack.enter_context(run.progress.bar(
            f"re-measuring in turns with the finalists' pair: {len(design)} candidates on {len(stages)} servers (windows)", None))
        deadline = run.budget.deadline(1.0, keep_s=run.budget.heldout_s())  # the two share the time they both take
        judges = [measurer(run, server, advance, label, stage if index == 0 else each_server,
                           objective if index == 0 else None, seed=4_271 if index == 0 else 1_013 * (index - 1),
                           at_round=functools.partial(relay.turn, label))
                  for index, ((label, _), (server, _)) in enumerate(zip(stages, served, strict=True))]
        work: dict[str, Callable[[], object]] = {
            "finalists-pair": functools.partial(judges[0].measure_pair, holders[0], pair, lines[0], "finalists", deadline)}
        for index in range(1, len(stages)):
            work[stages[index][0]] = functools.partial(judges[index].remeasure, holders[index], pair, lines[index], deadline)
        if checking is not None:
            work[CROSS_CHECK_STAGE] = cross_check_work(run, checking, served[1][0], holders[1], pair, advance, deadline, relay)
        results = in_turns(relay, work)
        for judge in judges:
            run.budget.observe_windows(judge.objective_window_seconds)
    for index, (label, _) in enumerate(stages):
        if (load := stage_load(run, [label])) is not None:
            lines[index].append(f"finalists: the pair's server: {load_words(run, load)}" if index == 0
                                else f"re-measure: {load_words(run, load)}")
    notes.extend(lines[0])
    notes.append(f"finalists: the pair's rounds took turns with the re-measure's on {servers} fresh "
                 f"server{'s' if servers > 1 else ''} of its own ({len(relay.turns)} turns), so both saw the same "
                 "spells of the machine")
    run.remeasured_in_turns = RemeasuredInTurns(
        contenders=[c.id for c in design], notes=lines[1:],
        per_server=[cast("dict[str, RemeasureResult]", results[label]) for label, _ in stages[1:]],
        cross_checked=cast("CrossChecked | None", results.get(CROSS_CHECK_STAGE)))
    return cast("GainPrecision | None", results["finalists-pair"])


CROSS_CHECK_STAGE = "cross-check"  # the other client's stage: its windows.csv rows, its turn in the relay


def cross_check_spec(spec: MeasureSpec) -> MeasureSpec | None:
    """The other client's stage (``measure.cross_check``), or None when not asked: the re-measure's first
    server's design and stop rule, its load client swapped, and no burn-in of its own (it measures on the
    re-measure's server, after that server's burn-in); with ``measure.cross_check_window_s``, windows that
    long and no extension past ``remeasure_windows`` rounds."""
    if spec.cross_check == "none":
        return None
    update: dict[str, object] = {"client": spec.cross_check, "cross_check": "none", "burn_in_s": 0.0}
    if spec.cross_check_window_s is not None:  # the pair's remeasure_windows rounds of these windows, no extension
        update.update(window_s=spec.cross_check_window_s, gain_precision=0.0)
    return remeasure_spec(spec).model_copy(update=update)


def cross_checked_candidates(spec: MeasureSpec, held: Sequence[Candidate], pair: tuple[str, str]) -> list[Candidate]:
    """What the other client measures: the re-measure's models, or with ``measure.cross_check_window_s`` its
    pair alone (the two whose gain it checks; long windows on a third would double its time)."""
    return [c for c in held if spec.cross_check_window_s is None or c.id in pair]


def cross_check_work(run: Run, spec: MeasureSpec, server: TritonServer, held: Sequence[Candidate], pair: tuple[str, str],
                     advance: Callable[[str], None], deadline: float | None, relay: Relay) -> Callable[[], CrossChecked]:
    """The other client's re-measure of ``held`` (the re-measure's first server's models) on ``server``, with
    :func:`cross_check_spec`'s ``spec``, a round each turn in ``relay``. A failure of the client (not of the
    server) ends the cross-check alone: the gain stands on the re-measure, and the log says why it was not
    cross-checked."""
    judge = measurer(run, server, advance, CROSS_CHECK_STAGE, spec, seed=50_021,
                     at_round=functools.partial(relay.turn, CROSS_CHECK_STAGE))
    version = _client_version(spec.client)

    def work() -> CrossChecked:
        notes: list[str] = []
        try:
            results = judge.remeasure(cross_checked_candidates(spec, held, pair), pair, notes, deadline)
        except ServerDiedError:
            raise  # the re-measure's server: the stage is the run's failure, not the client's
        except GptTritonError as exc:
            notes.append(f"failed, so the gain is not cross-checked: {exc}")
            return CrossChecked(results=None, notes=notes, version=version)
        return CrossChecked(results=results, notes=notes, version=version)
    return work


def _client_version(client: str) -> str:
    if client == "perf_analyzer":
        tool = find_perf_analyzer(required=True)
        assert tool is not None  # required=True raises instead
        return tool.version()
    return f"gpt-triton {__version__} built-in client"


def judge_cross_check(run: Run, found: Gain, first_server: dict[str, RemeasureResult], checked: CrossChecked,
                      ids: tuple[str, str]) -> None:
    """The other client's gain for ``ids`` = (baseline, winner) beside the tuner's on the same server, into
    ``found.cross_check`` and the log."""
    spec = run.spec.measure
    for line in checked.notes:
        run.decide(f"cross-check ({spec.cross_check}): {line}")
    if checked.results is None:
        return
    found.cross_check = client_cross_check(
        (first_server[ids[0]], first_server[ids[1]]), (checked.results[ids[0]], checked.results[ids[1]]),
        found.metric, spec.gain_statistic, (spec.client, spec.cross_check), checked.version, spec.confidence,
        spec.bootstrap_resamples)
    run.decide(f"cross-check: {found.cross_check.describe(found.metric)}")


def remeasure_order(winner: Candidate, runner_up: Candidate | None, baseline: Candidate) -> list[Candidate]:
    """What the re-measure's server holds, in its A, B, C order; the estimate's server holds the same, so that
    the two stages are one design (a runner-up that is the winner or the baseline is not added twice)."""
    if runner_up is None or runner_up.id in (winner.id, baseline.id):
        return [winner, baseline]
    return [winner, runner_up, baseline]


def stage_load(run: Run, stages: Sequence[str]) -> MachineLoad | None:
    """What else the machine ran during the counted windows of ``stages`` (windows.csv's stage names)."""
    return machine_load(run.windows.counted(stages))


def load_words(run: Run, load: MachineLoad) -> str:
    remote = " (the server at --triton-url is not this run's process: it counts among them)" if run.options.triton_url else ""
    return load.describe() + remote


def remeasure(run: Run, winner: Candidate, baseline: Candidate, runner_up: Candidate | None,
              estimate: float | None = None, estimate_interval: Interval | None = None) -> Gain | None:
    """Winner (and runner-up) against the baseline on a fresh server, interleaved, with fresh seeds: the
    gain and its interval come from this run, not from the windows that selected the winner. With
    ``measure.remeasure_servers`` > 1 the whole re-measure runs on that many fresh servers in turn and the
    gain is pooled over them, their spread in its interval (:func:`gain_over_servers`). With
    ``measure.remeasure_in_turns`` the finalist stage has already run it, in turns with its pair
    (:func:`pair_and_remeasure_in_turns`), and this judges what it left in ``run.remeasured_in_turns``.
    ``estimate`` is what selection believed (baseline / winner objective; the finalist run's when it ran),
    reported beside the re-measured gain; default: from the candidates' search figures. With its
    ``estimate_interval`` (the finalist run's refined pair) the log says whether the two runs' gap is
    within what both widths allow."""
    spec = run.spec
    contenders = remeasure_order(winner, runner_up, baseline)
    servers = spec.measure.remeasure_servers
    if servers > 1 and run.options.triton_url:
        run.decide(f"re-measure: {servers} repetitions on the server at --triton-url, which is not restarted between "
                   "them: their spread is between loads of the models, not between servers")
    taken, run.remeasured_in_turns = run.remeasured_in_turns, None
    in_turns = taken is not None and taken.contenders == [c.id for c in contenders]
    if taken is not None and not in_turns:  # not expected: the finalist stage ran it for the pair it selected
        run.decide(f"re-measure: the one run in turns with the finalist pair held {', '.join(taken.contenders)}, "
                   "not these candidates: measured again on its own")
    measured = taken if taken is not None and in_turns else \
        _remeasure_one_after_another(run, contenders, (baseline.id, winner.id))
    if measured is None:
        return None
    per_server = measured.per_server
    decide_per_server(run, measured.notes)
    win_value = objective_value(winner.latency, spec.objective)
    base_value = objective_value(baseline.latency, spec.objective)
    if estimate is None:
        estimate = base_value / win_value if win_value and base_value else None
    found = gain_over_servers([(results[baseline.id], results[winner.id]) for results in per_server],
                              spec.objective, spec.measure, estimate, estimate_interval)
    found.estimate_in_turns = in_turns  # a gap beyond both widths is then the servers', not the minutes'
    where = ("a fresh server" if servers == 1 else f"{servers} fresh servers") + \
        (" in turns with the finalist pair's" if in_turns else "")
    run.decide(
        f"re-measured on {where}, interleaved: baseline/winner {found.metric} ratio"
        f"{' (paired by round)' if found.statistic == 'paired' else ''} {found.ratio.value:.3f} "
        f"[{found.ratio.low:.3f}, {found.ratio.high:.3f}] (selection estimated {found.selection_estimate_ratio or float('nan'):.3f}); "
        f"on {sum(r[baseline.id].stats.requests for r in per_server)} baseline and "
        f"{sum(r[winner.id].stats.requests for r in per_server)} winner requests"
    )
    if found.servers is not None:
        run.decide(f"re-measure over servers: {found.servers.describe()}")
    if found.tail is not None:
        run.decide(f"re-measure: tail: {found.tail.describe()}")
    if (between := found.between_runs()) is not None:
        # Whether the machine was as busy in both: a gap beyond the intervals with one stage crowded is
        # the machine's load, not the sampling (gpt_triton/measure/machine_load.py).
        remeasured = [remeasure_stage(i)[0] for i in range(servers)]
        loads = stage_load(run, ["finalists-pair"]), stage_load(run, remeasured)
        edge = "" if between.agree or found.tail is None or not found.tail.edge else \
            f"; the {found.metric} sits at the edge of a slow cluster, where a run's share of slow requests moves it (tail line)"
        def sides(stages: list[str]) -> dict[str, list[WindowResult]]:
            return {"baseline": run.windows.counted(stages, baseline.id), "winner": run.windows.counted(stages, winner.id)}

        pace = pace_contrast(sides(["finalists-pair"]), sides(remeasured), ("finalist pair", "re-measure"))
        run.decide(f"re-measure against the finalist run's estimate: {between.describe()}"
                   f"{load_contrast(*loads, ('finalist pair', 're-measure'))}{pace}{edge}")
    if measured.cross_checked is not None:
        judge_cross_check(run, found, per_server[0], measured.cross_checked, (baseline.id, winner.id))
    return found


def _remeasure_one_after_another(run: Run, contenders: Sequence[Candidate], pair: tuple[str, str],
                                 ) -> RemeasuredInTurns | None:
    """The re-measure on its ``measure.remeasure_servers`` fresh servers in turn, after the finalist stage:
    each server's results and decision lines (with ``measure.cross_check``, the other client's rounds in
    turns with the first server's); None when a contender would not load."""
    servers = run.spec.measure.remeasure_servers
    stage = remeasure_spec(run.spec.measure)
    per_server: list[dict[str, RemeasureResult]] = []
    lines: list[list[str]] = []
    checked: CrossChecked | None = None
    for index in range(servers):
        label, suffix = remeasure_stage(index)
        with serve(run, contenders, label, suffix) as (server, loaded):
            if len(loaded) != len(contenders):
                return None
            title = "re-measuring" + (f" on server {index + 1} of {servers}" if servers > 1 else "")
            with run.progress.bar(f"{title}: {len(contenders)} candidates (windows)", None) as advance:
                notes: list[str] = []
                # An equal share of what is left for each server still to run, after the others' least cost.
                later = (servers - 1 - index) * run.budget.remeasure_server_s()
                deadline = run.budget.deadline(1.0 / (servers - index), keep_s=run.budget.heldout_s() + later)
                checking = cross_check_spec(run.spec.measure) if index == 0 else None
                # Each client's rounds follow its own and the other's as often (relay.py).
                relay = Relay([label, CROSS_CHECK_STAGE], alternate=(label, CROSS_CHECK_STAGE)) \
                    if checking is not None else None
                # Fresh seeds per server (the first keeps the single re-measure's), so their windows are independent.
                judge = measurer(run, server, advance, label, stage, seed=1_013 * index,
                                 at_round=functools.partial(relay.turn, label) if relay else None)
                if checking is None or relay is None:  # both or neither: no cross-check on this server
                    per_server.append(judge.remeasure(contenders, pair, notes, deadline))
                else:
                    work: dict[str, Callable[[], object]] = {
                        label: functools.partial(judge.remeasure, contenders, pair, notes, deadline),
                        CROSS_CHECK_STAGE: cross_check_work(run, checking, server, contenders, pair, advance, deadline,
                                                            relay)}
                    results = in_turns(relay, work)
                    per_server.append(cast("dict[str, RemeasureResult]", results[label]))
                    checked = cast("CrossChecked", results[CROSS_CHECK_STAGE])
                if (load := stage_load(run, [label])) is not None:
                    notes.append(f"re-measure: {load_words(run, load)}")
        lines.append(notes)
    return RemeasuredInTurns(contenders=[c.id for c in contenders], per_server=per_server, notes=lines,
                             cross_checked=checked)


def remeasure_spec(spec: MeasureSpec) -> MeasureSpec:
    """Each re-measure server's spec: its pair to sqrt(servers) times the target, so that pooled over the
    servers the ratio is known to about the target (when they agree)."""
    return spec.model_copy(update={"gain_precision": spec.gain_precision * math.sqrt(spec.remeasure_servers)})


def decide_per_server(run: Run, lines: Sequence[Sequence[str]]) -> None:
    """The re-measure's decision lines, each server's named when there are several."""
    for index, notes in enumerate(lines):
        for line in notes:
            run.decide(line if len(lines) == 1 else f"server {index + 1} of {len(lines)}: {line}")


def remeasure_stage(index: int) -> tuple[str, str]:
    """The re-measure on its ``index``-th server (from 0): its stage name (server log, windows.csv) and the
    suffix of its model names."""
    return ("remeasure", "_r") if index == 0 else (f"remeasure-{index + 1}", f"_r{index + 1}")


