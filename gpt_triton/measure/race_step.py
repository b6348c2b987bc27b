"""One racing step of the harness's interleaved run (:class:`gpt_triton.measure.harness.Measurer`): after a
round, drop the contenders clearly worse than the leader (:func:`gpt_triton.measure.racing.race_round`)
and, for a throughput objective with an SLO, those whose p99 is clearly above it."""

from __future__ import annotations

from collections.abc import Callable

from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.racing import race_alpha, race_round
from gpt_triton.measure.runs import LoadRun
from gpt_triton.measure.stats import window_bootstrap_interval

RACING_RESAMPLES = 1000  # the SLO drop reads extreme quantiles (Bonferroni levels); final stats use the spec's


def race_step(run: LoadRun, spec: MeasureSpec, objective: ObjectiveSpec, max_windows: int, done: set[str],
              say: Callable[[str], None]) -> bool:
    """Drop (in ``run.dropped``, each said) the contenders clearly worse than the leader; True when the rest
    cannot be separated within ``max_windows`` (racing is futile: stop and let selection declare the tie).
    ``done``: contenders that have finished and are compared but no longer measured."""
    contenders = [cid for cid in run.samples if cid not in run.dropped and cid not in run.failed]
    alpha = race_alpha(spec.confidence, len(run.samples), spec.max_windows)
    slo = objective.slo_p99_ms
    if objective.metric == "throughput" and slo is not None:
        for cid in list(contenders):
            windows = [s.latencies_ms for s in run.samples[cid] if s.latencies_ms.size]
            if not windows:
                continue
            p99 = window_bootstrap_interval(windows, "p99", 1.0 - 2.0 * alpha, RACING_RESAMPLES)
            if p99.low > slo:
                run.dropped[cid] = f"p99 {p99.value:.3g} ms [{p99.low:.3g}, {p99.high:.3g}] clearly above the SLO {slo:g} ms"
                say(f"racing: dropped {cid}: {run.dropped[cid]}")
                contenders.remove(cid)
    state = race_round(run.windows, contenders, alpha, max_windows=max_windows, frozen=frozenset(done))
    if state is None:
        return False
    metric = "1/throughput" if objective.metric == "throughput" else objective.metric
    for cid in [c for c, v in state.verdicts.items() if v.drop]:
        run.dropped[cid] = state.drop_note(cid, metric, alpha)
        say(f"racing: dropped {cid}: {run.dropped[cid]}")
    if state.futile:
        say(f"racing: {state.futile_note(max_windows)}")
    return state.futile
