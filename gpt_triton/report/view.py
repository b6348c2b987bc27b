"""The report's view model: everything the terminal table, report.md and the plots show about a run,
computed once from its RunReport.

No rich, no Markdown, no matplotlib here; renderers only format these values, so no two views of a run
can disagree on a number. Every objective and eligibility decision is ``gpt_triton.core.objective``'s,
read with the run's own saved spec, i.e. what selection did. The one thing this module adds is the sign
for display: core's objective is lower-is-better (throughput negated); people read throughput positive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpt_triton.core.measurements import Interval, LatencyStats
from gpt_triton.core.naming import unique_names
from gpt_triton.core.objective import (
    accuracy_eligible,
    candidate_eligible,
    lower_is_better,
    objective_interval,
)
from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.core.routes import Route
from gpt_triton.report.fmt import fmt_ratio, knob_text
from gpt_triton.report.verdict import verdict_lines

# Statuses that never produced a measurement: their row carries the reason instead of numbers.
FAILED_STATUSES = ("crashed", "infeasible", "failed")
# The marks column's symbols, in the order a row's marks are written.
MARKS = (("★", "winner"), ("B", "baseline"), ("s", "selected, not confirmed by re-measurement"))


def shown(interval: Interval, metric: str) -> Interval:
    """core.objective's interval (lower is better) as people read it: a throughput positive again."""
    if lower_is_better(metric):
        return interval
    return Interval(value=-interval.value, low=-interval.high, high=-interval.low, level=interval.level)


def speedup(metric: str, reference: float, value: float) -> float | None:
    """How many times better ``value`` is than ``reference`` (both as shown): >1 means better, either direction."""
    if lower_is_better(metric):
        return reference / value if value > 0 else None
    return value / reference if reference > 0 else None


@dataclass(frozen=True)
class ObjectiveView:
    metric: str  # p50 | p90 | p99 | mean | throughput
    load_index: int  # which of the run's load levels it is read at
    load_label: str  # that level, e.g. "concurrency=4"
    confidence: float  # the level of the run's bootstrap intervals

    @property
    def unit(self) -> str:
        return "req/s" if self.metric == "throughput" else "ms"


@dataclass(frozen=True)
class CandidateRow:
    candidate: Candidate
    name: str  # family + the knobs that differ from the baseline, unique in the run (core.naming)
    marks: str  # see MARKS
    route: str  # the knobs that set it apart from its family (untruncated; fmt.truncate for a column)
    stats: LatencyStats | None  # at the objective's load level
    objective: Interval | None  # as shown (throughput positive); None when infeasible (SLO, errors, no data)
    accuracy: str  # the accuracy cell: FAIL n/N, or margin and bound, and why the run's policy rejects it
    accuracy_ok: bool | None  # the run's accuracy policy on the screening result; None without one
    eligible: bool  # in selection's pool: measured, accuracy-eligible, feasible for the objective
    score: float | None  # core's objective value (lower is better) when eligible, else None

    @property
    def id(self) -> str:
        return self.candidate.id

    @property
    def failed(self) -> bool:
        return self.candidate.status in FAILED_STATUSES

    @property
    def failure(self) -> str | None:
        """Why a crashed, infeasible or failed candidate has no numbers."""
        return self.candidate.reason if self.failed else None


@dataclass(frozen=True)
class FamilyRow:
    """One compiler family: its counts and its best eligible candidate (the one selection would rank first)."""

    family: str
    candidates: int
    measured: int
    failed: int
    eligible: int
    best_id: str | None = None
    best_name: str | None = None
    best_value: float | None = None  # as shown
    vs_baseline: float | None = None  # >1: the family's best beats the baseline


@dataclass(frozen=True)
class UnionRow:
    """What searching across families bought: the run's winner against the best family other than its own."""

    metric: str
    winner_id: str | None = None
    winner_family: str | None = None
    winner_value: float | None = None
    best_single_family: str | None = None
    best_single_id: str | None = None
    best_single_value: float | None = None
    runner_up_family: str | None = None
    runner_up_id: str | None = None
    runner_up_value: float | None = None
    vs_runner_up: float | None = None  # >1: the winner beats the runner-up family's best
    winner_name: str | None = None
    runner_up_name: str | None = None

    def text(self) -> str:
        if self.winner_id is None:
            return "no winner"
        text = f"winner {self.winner_name or self.winner_family} ({self.winner_id})"
        if self.runner_up_id is not None and self.vs_runner_up is not None:
            text += (
                f"; best other family {self.runner_up_family}: {self.runner_up_name or self.runner_up_family} "
                f"({self.runner_up_id}): "
                f"winner is {fmt_ratio(self.vs_runner_up)} on {self.metric}"
            )
        else:
            text += "; no other family had an eligible candidate"
        return text


@dataclass(frozen=True)
class FamilySummary:
    families: list[FamilyRow]
    union: UnionRow | None  # None when the run has no candidates


@dataclass(frozen=True)
class ReportView:
    report: RunReport
    objective: ObjectiveView
    rows: list[CandidateRow]  # one per candidate, in the report's order
    common: dict[str, dict[str, Any]]  # route family -> knobs every candidate of it shares
    families: FamilySummary
    verdict: list[tuple[str, str]]  # (label, text)
    verdict_ok: bool  # the run finished and nothing failed held-out acceptance

    def row(self, candidate_id: str | None) -> CandidateRow | None:
        return next((r for r in self.rows if r.id == candidate_id), None)

    def name(self, candidate_id: str | None) -> str:
        """The candidate's name (its id when the run has no such candidate, "-" for none)."""
        row = self.row(candidate_id)
        return row.name if row is not None else (candidate_id or "-")


# --------------------------------------------------------------------------------------------- builders
def load_stats(candidate: Candidate, load_index: int) -> LatencyStats | None:
    return candidate.latency[load_index] if load_index < len(candidate.latency) else None


def common_knobs(report: RunReport) -> dict[str, dict[str, Any]]:
    """Per route family (compiler, graph, serving), the knob values every candidate of it shares.

    Routes spell out every knob, defaults included, so the full key of a real run runs to hundreds of
    characters; a table only needs the knobs that vary. report.md lists the shared ones once.
    """
    routes: dict[str, list[Route]] = {}
    for c in report.candidates:
        for route in (c.route, c.graph, c.serving):
            if route is not None:
                routes.setdefault(route.family, []).append(route)
    common: dict[str, dict[str, Any]] = {}
    for family, members in routes.items():
        if len(members) < 2:
            continue  # a lone route has nothing to be compared with: show it whole
        first = members[0].knobs
        common[family] = {k: v for k, v in first.items() if all(k in r.knobs and r.knobs[k] == v for r in members[1:])}
    return common


def distinguishing_route(candidate: Candidate, common: dict[str, dict[str, Any]]) -> str:
    """The knobs that set this candidate apart (the family has its own column): ``compiler | graph | serve``."""

    def varying(route: Route) -> str:
        shared = common.get(route.family, {})
        return knob_text({k: v for k, v in route.knobs.items() if k not in shared})

    parts = [varying(candidate.route) or "shared knobs"]
    if candidate.graph and candidate.graph.knobs and (graph := varying(candidate.graph)):
        parts.append(f"{candidate.graph.family}: {graph}")
    if candidate.serving.knobs and (serving := varying(candidate.serving)):
        parts.append("serve " + serving)
    return " | ".join(parts)


def marks(report: RunReport, candidate: Candidate) -> str:
    out = ""
    if candidate.id == report.winner_id:
        out += MARKS[0][0]
    if candidate.id == report.baseline_id or candidate.is_baseline:
        out += MARKS[1][0]
    if candidate.id == report.selected_id and candidate.id != report.winner_id:
        out += MARKS[2][0]  # selection's pick that the gain check did not confirm
    return out


def _row(report: RunReport, candidate: Candidate, common: dict[str, dict[str, Any]], name: str) -> CandidateRow:
    spec = report.spec
    acc = candidate.accuracy
    accuracy_ok, why = accuracy_eligible(acc, spec.accuracy) if acc is not None else (None, "")
    if acc is None:
        accuracy = "-"
    elif not acc.passed:
        accuracy = f"FAIL {acc.exceedances}/{acc.requests}" + (f" ({acc.reason})" if acc.reason else "")
    else:
        accuracy = f"m={acc.min_margin:.2g} ub={acc.exceedance_upper_bound:.2g}"
        accuracy += "" if accuracy_ok else f" ineligible: {why}"
    interval = objective_interval(candidate.latency, spec.objective) if candidate.latency else None
    # Selection's pool, in selection's order of checks: measured, then eligible, then feasible.
    eligible = (candidate.status == "measured" and candidate_eligible(candidate, spec.accuracy)[0]
                and interval is not None)
    return CandidateRow(
        candidate=candidate, name=name, marks=marks(report, candidate), route=distinguishing_route(candidate, common),
        stats=load_stats(candidate, spec.objective.load_index),
        objective=None if interval is None else shown(interval, spec.objective.metric),
        accuracy=accuracy, accuracy_ok=accuracy_ok, eligible=eligible,
        score=interval.value if eligible and interval is not None else None,
    )


def _objective(report: RunReport) -> ObjectiveView:
    objective = report.spec.objective
    index = objective.load_index
    # The label of the level as measured; the spec's own profile when nothing was measured there.
    label = next((s.load.label() for c in report.candidates if (s := load_stats(c, index)) is not None), None)
    if label is None:
        loads = report.spec.measure.loads
        label = loads[index].label() if index < len(loads) else "-"
    return ObjectiveView(metric=objective.metric, load_index=index, load_label=label,
                         confidence=report.spec.measure.confidence)


def _score(row: CandidateRow) -> float:
    return math.inf if row.score is None else row.score


def per_family(report: RunReport, rows: list[CandidateRow]) -> FamilySummary:
    """One row per compiler family (its best eligible candidate), and the union row.

    The union compares the run's winner with the best single-family winner and with the runner-up
    family (the best family other than the winner's): that ratio is what searching across families bought.
    """
    metric = report.spec.objective.metric
    by_id = {r.id: r for r in rows}
    baseline = by_id.get(report.baseline_id or "")
    baseline_value = baseline.objective.value if baseline and baseline.objective else None
    families: list[FamilyRow] = []
    best_rows: dict[str, CandidateRow] = {}
    for family in dict.fromkeys(r.candidate.family for r in rows):
        members = [r for r in rows if r.candidate.family == family]
        scored = [r for r in members if r.score is not None]
        best = min(scored, key=_score, default=None)  # lower is better: core's sign
        value = best.objective.value if best and best.objective else None
        if best is not None:
            best_rows[family] = best
        families.append(FamilyRow(
            family=family, candidates=len(members), measured=sum(r.candidate.status == "measured" for r in members),
            failed=sum(r.failed for r in members), eligible=len(scored), best_id=best.id if best else None,
            best_name=best.name if best else None,
            best_value=value,
            vs_baseline=speedup(metric, baseline_value, value) if baseline_value and value is not None else None,
        ))
    if not families:
        return FamilySummary(families=[], union=None)
    winner = by_id.get(report.winner_id or "")
    union: dict[str, Any] = {"metric": metric, "winner_id": report.winner_id}
    if winner is not None:
        union.update(winner_family=winner.candidate.family, winner_name=winner.name,
                     winner_value=winner.objective.value if winner.objective else None)
    ranked = sorted(best_rows.values(), key=_score)
    if ranked:
        top = ranked[0]
        union.update(best_single_family=top.candidate.family, best_single_id=top.id,
                     best_single_value=top.objective.value if top.objective else None)
        runner = next((r for r in ranked if r.candidate.family != union.get("winner_family")), None)
        if runner is not None and runner.objective is not None:
            union.update(runner_up_family=runner.candidate.family, runner_up_id=runner.id, runner_up_name=runner.name,
                         runner_up_value=runner.objective.value)
            if union.get("winner_value") is not None:
                union["vs_runner_up"] = speedup(metric, runner.objective.value, union["winner_value"])
    return FamilySummary(families=families, union=UnionRow(**union))


@dataclass(frozen=True)
class MixedPrecisionRow:
    """A candidate that keeps layer groups in fp32 and lowers the rest (the precision search's mixes,
    gpt_triton.precision): the groups it keeps, its task margin on the tuning split, its objective."""

    row: CandidateRow
    kept: list[str]
    tuning: str  # "margin 0.93, 0/34 fail" or why it has no screening result
    heldout: str  # the held-out verdict when it is the run's winner, else "-"


def mixed_precision_rows(view: ReportView) -> list[MixedPrecisionRow]:
    """One row per candidate whose route keeps layer groups (``fp32_groups``), in the report's order."""
    out = []
    for row in view.rows:
        kept = row.candidate.route.knobs.get("fp32_groups") or []
        if not kept:
            continue
        acc = row.candidate.accuracy
        tuning = (f"margin {acc.min_margin:.3g}, {acc.exceedances}/{acc.requests} fail" if acc is not None
                  else row.failure or "not screened")
        heldout = "-"
        if row.id == view.report.winner_id and view.report.heldout is not None:
            held = view.report.heldout
            heldout = f"{'passed' if held.passed else 'FAILED'} ({held.exceedances}/{held.requests} fail)"
        out.append(MixedPrecisionRow(row=row, kept=[str(k) for k in kept], tuning=tuning, heldout=heldout))
    return out


def build_view(report: RunReport) -> ReportView:
    common = common_knobs(report)
    names = unique_names(report.candidates, report.baseline_id)
    rows = [_row(report, c, common, names[c.id]) for c in report.candidates]
    good = report.status == "done" and (report.heldout is None or report.heldout.passed)
    return ReportView(report=report, objective=_objective(report), rows=rows, common=common,
                      families=per_family(report, rows), verdict=verdict_lines(report), verdict_ok=good)


def per_family_summary(report: RunReport) -> FamilySummary:
    """The per-family rows and the union row of a run (see :func:`per_family`)."""
    return build_view(report).families
