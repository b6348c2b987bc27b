"""Selection: the objective, ties within the noise, and the re-measured gain with its interval.

Unlike TensorRT's tuner (strict less-than on one mean, no noise margin), the winner is the best point
estimate only when its confidence interval separates it from the rest. Candidates within the noise of
the best one are a *tie* (judged on their paired, drift-adjusted difference when one interleaved run
measured both, else by overlapping intervals); a tie is broken by the larger accuracy margin, then the
lower build cost, then the point estimate - so a rewrite that is not measurably faster does not win
over a more exact or cheaper candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field

from gpt_triton.core.measurements import Interval, ObjectiveContrasts, between_servers, pooled_contrasts
from gpt_triton.core.naming import named
from gpt_triton.core.objective import objective_interval
from gpt_triton.core.records import Candidate, Gain
from gpt_triton.core.spec import GainStatistic, MeasureSpec, ObjectiveSpec
from gpt_triton.measure.paired import pair_ratio_interval
from gpt_triton.measure.quantiles import requests_needed
from gpt_triton.measure.runs import RemeasureResult, remeasure_result
from gpt_triton.measure.stats import overlaps, ratio_interval, statistic_fn
from gpt_triton.measure.tail_edge import tail_edge


class Selection(BaseModel):
    winner_id: str | None = None
    runner_up_id: str | None = None
    ties: list[str] = Field(default_factory=list)  # overlapping the best candidate's interval (winner excluded)
    log: list[str] = Field(default_factory=list)
    values: dict[str, float] = Field(default_factory=dict)  # objective point values (lower is better)
    # What selection believed: objective(baseline) / objective(winner) from the selection windows.
    estimate_ratio: float | None = None
    estimate: Interval | None = None  # its interval, when the finalist run refined the pair


# The tie-break compares accuracy margins and build costs at a resolution: a margin (the fraction of
# the tolerance left) 1e-5 larger, or a build 0.4 s cheaper, is float noise, not a reason to give up
# speed. Seen in `make demo`: fourteen candidates tied on p99, all with margin ~1.0, and unrounded
# keys handed the win to a 4.8 ms serving variant (build 0.0 s) over a 2.5 ms engine (build 1.3 s).
MARGIN_RESOLUTION = 0.01
BUILD_COST_RESOLUTION_S = 10.0
# With fewer residual degrees of freedom the drift model's noise estimate is itself a guess (t quantile
# 12.7 at df 1): two candidates x three windows give df 1, and the paired test would call a 20x gap a
# tie. Below this, the intervals' overlap decides.
MIN_PAIRED_DF = 4


def _margin(candidate: Candidate) -> float:
    return candidate.accuracy.min_margin if candidate.accuracy is not None else float("-inf")


def _break_tie(tied: list[tuple[Candidate, Interval]], speed: Mapping[str, float]) -> list[tuple[Candidate, Interval]]:
    """The tied candidates in tie-break order: first those within MARGIN_RESOLUTION of the largest
    margin, among them those within BUILD_COST_RESOLUTION_S of the cheapest build, fastest (lowest
    ``speed``) first; then the rest by the same rule (so the order is total and the log can show it)."""
    best_margin = max(_margin(c) for c, _ in tied)
    by_margin = [t for t in tied if _margin(t[0]) >= best_margin - MARGIN_RESOLUTION]
    cheapest = min(c.build.seconds for c, _ in by_margin)
    by_cost = sorted((t for t in by_margin if t[0].build.seconds <= cheapest + BUILD_COST_RESOLUTION_S),
                     key=lambda t: speed[t[0].id])
    chosen = {c.id for c, _ in by_cost}
    rest = [t for t in tied if t[0].id not in chosen]
    return by_cost + (_break_tie(rest, speed) if rest else [])


def _tied(a: tuple[Candidate, Interval], best: tuple[Candidate, Interval],
          contrasts: Sequence[ObjectiveContrasts], level: float) -> tuple[bool, str]:
    """Is ``a`` within the noise of ``best``? On their difference in the drift model of a run that
    measured both (drift shared by the two cancels); else by overlap of their own intervals."""
    record = next((r for r in contrasts if r.covers(a[0].id, best[0].id) and r.df >= MIN_PAIRED_DF), None)
    if record is not None:
        return record.tied(a[0].id, best[0].id, level), "paired"
    return overlaps(a[1], best[1]), "overlap"


def select(
    candidates: Sequence[Candidate],
    objective: ObjectiveSpec,
    eligible: Callable[[Candidate], tuple[bool, str]],
    contrasts: Sequence[ObjectiveContrasts] = (),
    level: float = 0.95,
    ranking: ObjectiveContrasts | None = None,
) -> Selection:
    """The winner among eligible measured candidates (see the module docstring).

    ``contrasts`` are the drift models of the interleaved runs that measured the candidates
    (:attr:`gpt_triton.measure.harness.Measurer.contrasts`): two candidates measured in the same run are
    a tie when the ``level`` interval of their paired difference contains 0; candidates from different
    runs, without a record, or from a run whose model has fewer than MIN_PAIRED_DF residual degrees of
    freedom fall back to overlap of their own intervals.

    ``ranking`` (the finalist stage's effects pooled over its run and the search's,
    :func:`gpt_triton.core.measurements.pooled_contrasts`), when it covers every eligible candidate,
    orders them instead of their pooled point values: who is best, and "then faster" in the tie-break.
    """
    out = Selection()
    pool: list[tuple[Candidate, Interval]] = []
    for cand in candidates:
        if cand.status != "measured":
            out.log.append(f"{named(cand)}: not considered (status {cand.status})")
            continue
        ok, why = eligible(cand)
        if not ok:
            out.log.append(f"{named(cand)}: not eligible ({why})")
            continue
        stats = cand.latency[objective.load_index] if objective.load_index < len(cand.latency) else None
        if stats is not None and objective.metric in stats.unbounded:
            out.log.append(
                f"{named(cand)}: refused: its {objective.metric} rests on {stats.requests} requests, too few for any "
                f"order statistic to bound it from above (needs {requests_needed(objective.metric)}+)")
            continue
        interval = objective_interval(cand.latency, objective)
        if interval is None:
            out.log.append(f"{named(cand)}: infeasible for objective {objective.metric} (SLO, errors or no data)")
            continue
        pool.append((cand, interval))
        out.values[cand.id] = interval.value
    if not pool:
        out.log.append("no eligible measured candidate: nothing selected")
        return out
    speed = {c.id: iv.value for c, iv in pool}
    ranked = False
    if ranking is not None and all(ranking.covers(c.id, c.id) for c, _ in pool):
        ranked, speed = True, {c.id: ranking.effect(c.id) for c, _ in pool}
        out.log.append(f"ordered by the drift-adjusted effects of {len(pool)} candidates pooled over the runs that "
                       "measured them, not by this run's point values alone")
    pool.sort(key=lambda item: speed[item[0].id])
    best, best_iv = pool[0]
    verdicts = {c.id: _tied((c, iv), (best, best_iv), contrasts, level) for c, iv in pool}
    tied = [(c, iv) for c, iv in pool if verdicts[c.id][0]]
    unit = "req/s (negated)" if objective.metric == "throughput" else "ms"
    out.log.append(
        f"best {'by the pooled effects' if ranked else 'point estimate'} {named(best)}: "
        f"{'this run: ' if ranked else ''}{objective.metric} {best_iv.value:.4g} {unit} [{best_iv.low:.4g}, {best_iv.high:.4g}]"
    )
    if len(tied) > 1:
        # Within the noise: prefer the larger accuracy margin, then the cheaper build, then speed.
        tied = _break_tie(tied, speed)
        out.log.append(
            "tie within the noise among " + ", ".join(
                f"{named(c)} {iv.value:.4g} [{iv.low:.4g}, {iv.high:.4g}] margin {_margin(c):.3g} build {c.build.seconds:.1f}s"
                + (f" ({verdicts[c.id][1]})" if c.id != best.id else "")
                for c, iv in tied)
            + f" -> {named(tied[0][0])} (larger accuracy margin, then lower build cost, then faster; margins within "
            f"{MARGIN_RESOLUTION:g} and builds within {BUILD_COST_RESOLUTION_S:g} s count as equal)"
        )
    winner = tied[0][0]
    out.winner_id = winner.id
    out.ties = [c.id for c, _ in tied if c.id != winner.id]
    rest = [c for c, _ in pool if c.id != winner.id]
    out.runner_up_id = rest[0].id if rest else None
    baseline = next((c for c, _ in pool if c.is_baseline), None)
    if baseline is not None and out.values[winner.id] != 0.0:
        out.estimate_ratio = out.values[baseline.id] / out.values[winner.id]
        if objective.metric == "throughput":
            out.estimate_ratio = 1.0 / out.estimate_ratio  # keep ">1: winner better"; both negated
    out.log.append(f"selected {named(winner)}" + (f", runner-up {named(rest[0])}" if rest else ""))
    return out


def select_finalists(
    candidates: Sequence[Candidate],
    objective: ObjectiveSpec,
    eligible: Callable[[Candidate], tuple[bool, str]],
    search: Sequence[ObjectiveContrasts],
    finalists: ObjectiveContrasts | None,
    level: float = 0.95,
) -> Selection:
    """The finalist stage's choice on the evidence of its own run and the search's together.

    The finalist run alone gives each contender a few windows; the search gave them more. Pooled
    (:func:`pooled_contrasts`), the contenders are ordered and their ties judged on both, as a
    screen-then-select procedure's final choice uses both stages' data. The search's windows favour
    whoever was lucky in them, but the fresh run's windows weigh in with their full precision, and on
    the ResNet-style CNN's figures (24 candidates, four within 5%, window noise ~10%) seeded draws
    chose a candidate more than 2% slower than the best in 9% of 300 on both runs, against 21% on the
    finalist run alone (``tests/test_select_pooled.py``). The gain selection reports stays the finalist run's own (then refined and
    re-measured), so this does not carry the search's bias into any figure."""
    pooled = (pooled_contrasts([*search, finalists], [c.id for c in candidates])
              if finalists is not None else None)
    contrasts = [pooled] if pooled is not None else [finalists] if finalists is not None else []
    chosen = select(candidates, objective, eligible, contrasts, level, ranking=pooled)
    if pooled is None:  # say why the search's windows did not count (a run separated in two rounds, say)
        why = ("the finalist run left no drift model (too few windows for one)" if finalists is None
               else "the runs' drift models could not be pooled over these contenders")
        chosen.log.insert(0, f"{why}: ordered by this run's point values alone")
    return chosen


def after_refinement(chosen: Selection, baseline_id: str, refined: Interval, requests: tuple[int, int]) -> Selection:
    """The finalist stage's choice once the selected candidate and the baseline were measured on (the
    refinement): ``refined`` is their baseline/selected latency ratio over all the pair's windows of
    that run, resting on ``requests`` (baseline, selected).

    The choice was made on fewer windows. When the pair's ratio now puts the baseline ahead by point
    (below 1), the baseline is selected: in a tie the tie-break ranks the default route first on accuracy
    margin (the tuning split's reference is its own output) and build cost, so speed decides, and on the
    most data about the pair the baseline is the faster one. Seen on the ResNet CNN: the finalists picked
    a candidate 3% ahead, the refinement found the baseline 18% ahead, and the re-measure then spent its
    budget confirming a tie. Otherwise the choice stands, with the refined ratio as its estimate."""
    if chosen.winner_id is None or chosen.winner_id == baseline_id:
        return chosen
    if refined.value >= 1.0 or baseline_id not in chosen.values:  # not eligible (an SLO it misses): the choice stands
        return chosen.model_copy(update={"estimate_ratio": refined.value, "estimate": refined})
    line = (f"the selected {chosen.winner_id} against the baseline over all their windows: ratio {refined.value:.3f} "
            f"[{refined.low:.3f}, {refined.high:.3f}] on {requests[0]} + {requests[1]} requests puts the baseline ahead: "
            f"the baseline {baseline_id} is selected, runner-up {chosen.winner_id}")
    return chosen.model_copy(update={
        "winner_id": baseline_id, "runner_up_id": chosen.winner_id, "estimate_ratio": 1.0,
        "ties": [cid for cid in chosen.ties if cid != baseline_id], "log": [*chosen.log, line]})


def gain(
    baseline: RemeasureResult,
    winner: RemeasureResult,
    objective: ObjectiveSpec,
    level: float = 0.95,
    resamples: int = 2000,
    selection_estimate_ratio: float | None = None,
    selection_estimate: Interval | None = None,
    ratio: Interval | None = None,
    statistic: GainStatistic = "paired",
) -> Gain:
    """The re-measured gain (>1: the winner is better) with an interval over the separate run, or with
    ``ratio`` when the caller has it (pooled over servers: :func:`gain_over_servers`). ``statistic``
    (``measure.gain_statistic``): ``paired``, the geometric mean of the rounds' window ratios with a t
    interval (gpt_triton/measure/paired.py); ``pooled``, the ratio of the pooled statistics with a
    two-stage bootstrap over windows. Either needs 3 windows a side, else the pooled latencies' bootstrap.

    ``significant`` is True only when the interval lies entirely above 1.0 - a winner measurably
    *slower* than the baseline is not a significant gain.
    """
    metric = objective.metric
    fn = statistic_fn("p99" if metric == "throughput" else metric)  # Gain's *_ms are p99s for a throughput objective
    if ratio is None:
        ratio = _ratio(baseline, winner, objective, level, resamples, statistic)

    def point(samples: np.ndarray) -> float:
        return float(fn(samples, axis=-1)) if samples.size else 0.0

    return Gain(
        metric=metric, ratio=ratio, statistic="paired" if _paired(baseline, winner, metric, statistic) else "pooled",
        winner_ms=point(winner.latencies_ms), baseline_ms=point(baseline.latencies_ms),
        selection_estimate_ratio=selection_estimate_ratio, selection_estimate=selection_estimate,
        significant=ratio.low > 1.0,
    )


def _paired(baseline: RemeasureResult, winner: RemeasureResult, metric: str, statistic: GainStatistic) -> bool:
    """Whether :func:`_ratio` pairs by round: asked to, a latency objective, and 3 windows a side."""
    return (statistic == "paired" and metric != "throughput"
            and min(len(baseline.window_latencies_ms), len(winner.window_latencies_ms)) >= 3)


def _ratio(baseline: RemeasureResult, winner: RemeasureResult, objective: ObjectiveSpec, level: float,
           resamples: int, statistic: GainStatistic = "paired") -> Interval:
    if objective.metric == "throughput":
        b_tp = [w.throughput for w in baseline.stats.windows]
        w_tp = [w.throughput for w in winner.stats.windows]
        return ratio_interval(w_tp, b_tp, "mean", level, resamples)  # winner / baseline
    if len(baseline.window_latencies_ms) >= 3 and len(winner.window_latencies_ms) >= 3:
        return pair_ratio_interval(baseline.window_latencies_ms, winner.window_latencies_ms,
                                   objective.metric, statistic, level, resamples)  # type: ignore[arg-type]
    return ratio_interval(baseline.latencies_ms, winner.latencies_ms, objective.metric, level, resamples)


def gain_over_servers(
    per_server: Sequence[tuple[RemeasureResult, RemeasureResult]],
    objective: ObjectiveSpec,
    measure: MeasureSpec,
    selection_estimate_ratio: float | None = None,
    selection_estimate: Interval | None = None,
) -> Gain:
    """The re-measured gain from one or more servers' (baseline, winner) re-measures. One server: :func:`gain`
    on its run. Several: the stats and the point figures over every server's windows, and the ratio pooled
    over the servers' own intervals with their spread (:func:`between_servers`), kept in ``Gain.servers``."""
    if not per_server:
        raise ValueError("gain_over_servers needs at least one server's re-measure")
    level, resamples, statistic = measure.confidence, measure.bootstrap_resamples, measure.gain_statistic
    if len(per_server) == 1:
        baseline, winner = per_server[0]
        found = gain(baseline, winner, objective, level, resamples, selection_estimate_ratio, selection_estimate,
                     statistic=statistic)
    else:
        load = per_server[0][0].stats.load
        baseline, winner = (remeasure_result(load, [s for pair in per_server for s in pair[side].samples], measure, 0)
                            for side in (0, 1))
        ratio, spread = between_servers([_ratio(b, w, objective, level, resamples, statistic) for b, w in per_server],
                                        level)
        found = gain(baseline, winner, objective, level, resamples, selection_estimate_ratio, selection_estimate, ratio,
                     statistic)
        found.servers = spread
    found.remeasured_baseline, found.remeasured_winner = baseline.stats, winner.stats
    found.tail = tail_edge(baseline.window_latencies_ms, winner.window_latencies_ms, objective.metric)
    return found
