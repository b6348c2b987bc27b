"""The objective and the eligibility policy: one definition, read by selection, the search's feedback,
the report and the metrics, so no view of a run can disagree with what selection did.

Every value here is *lower is better*: throughput is negated. A candidate is infeasible for the
objective (``None``) when it was not measured at the objective's load, dropped requests there, or (for
throughput) held no load profile within the p99 SLO.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.measurements import Interval, LatencyStats
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import AccuracySpec, ObjectiveSpec

_FIELDS = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "mean": "mean_ms", "throughput": "throughput"}


def lower_is_better(metric: str) -> bool:
    return metric != "throughput"


def metric_interval(stats: LatencyStats | None, metric: str) -> Interval | None:
    """One statistic of one load level as measured (throughput not negated)."""
    if stats is None:
        return None
    value = getattr(stats, _FIELDS.get(metric, "p99_ms"))
    return value if isinstance(value, Interval) else None


def _feasible_throughput(stats_list: Sequence[LatencyStats], objective: ObjectiveSpec) -> LatencyStats | None:
    index = objective.load_index
    pool = [stats_list[index]] if stats_list[index].load.kind == "concurrency" else [
        s for s in stats_list if s.load.kind != "concurrency"]  # rate profiles: the highest one held
    feasible = [
        s for s in pool
        if s.throughput is not None and s.p99_ms is not None and s.errors == 0 and s.rate_held is not False
        and (objective.slo_p99_ms is None or s.p99_ms.value <= objective.slo_p99_ms)
    ]
    return max(feasible, key=lambda s: s.throughput.value if s.throughput else 0.0, default=None)


def objective_interval(stats_list: Sequence[LatencyStats], objective: ObjectiveSpec) -> Interval | None:
    """The objective as an interval, lower is better (throughput negated); None if infeasible/missing."""
    if objective.load_index >= len(stats_list):
        return None
    if objective.metric == "throughput":
        best = _feasible_throughput(stats_list, objective)
        if best is None or best.throughput is None:
            return None
        tp = best.throughput
        return Interval(value=-tp.value, low=-tp.high, high=-tp.low, level=tp.level)
    stats = stats_list[objective.load_index]
    if stats.errors:
        return None  # a candidate that drops requests under the load is not a contender
    return metric_interval(stats, objective.metric)


def objective_value(stats_list: Sequence[LatencyStats], objective: ObjectiveSpec) -> float | None:
    """Lower is better (throughput negated); None if infeasible (SLO violated, errors, not measured)."""
    interval = objective_interval(stats_list, objective)
    return None if interval is None else interval.value


def measured_value(candidate: Candidate, objective: ObjectiveSpec) -> float | None:
    """The search's feedback: the objective of a measured candidate, None for any other status."""
    return objective_value(candidate.latency, objective) if candidate.status == "measured" else None


def accuracy_eligible(result: AccuracyResult, spec: AccuracySpec) -> tuple[bool, str]:
    """The selection policy on an accuracy result: (eligible, the one-line reason).

    ``min_margin`` is enforced only when no exceedances are allowed: with ``max_exceedance_rate > 0``
    the worst request is allowed to exceed, so its margin is negative by design and the exceedance
    rate and bound govern instead.
    """
    if not result.passed and result.exceedances == result.requests and not result.outputs:
        return False, result.reason or "failed"
    rate = result.exceedances / result.requests if result.requests else 1.0
    if rate > spec.max_exceedance_rate:
        return False, f"exceedance rate {rate:.3g} > allowed {spec.max_exceedance_rate:.3g} ({result.reason})"
    if not result.passed:
        return False, result.reason or "failed"
    if spec.max_exceedance_rate == 0 and result.min_margin < spec.min_margin:
        return False, f"margin {result.min_margin:.3g} to the tolerance < required {spec.min_margin:.3g}"
    if spec.max_exceedance_bound is not None and result.exceedance_upper_bound > spec.max_exceedance_bound:
        return False, (
            f"exceedance bound {result.exceedance_upper_bound:.3g} at {result.confidence:.0%} confidence > "
            f"allowed {spec.max_exceedance_bound:.3g} ({result.requests} requests; add reference requests to tighten it)"
        )
    return True, (
        f"{result.exceedances}/{result.requests} exceedances, bound {result.exceedance_upper_bound:.3g}, "
        f"min margin {result.min_margin:.3g}"
    )


def candidate_eligible(candidate: Candidate, spec: AccuracySpec) -> tuple[bool, str]:
    """Selection's rule for a candidate: it has an accuracy result and that result is eligible."""
    if candidate.accuracy is None:
        return False, "no accuracy result"
    return accuracy_eligible(candidate.accuracy, spec)
