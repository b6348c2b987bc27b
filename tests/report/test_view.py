"""The view model decides objective and eligibility exactly as selection does: both read
gpt_triton.core.objective with the run's saved spec, so the report cannot contradict the run."""

from __future__ import annotations

from typing import Any

import pytest

from gpt_triton.core.objective import candidate_eligible
from gpt_triton.core.records import RunReport
from gpt_triton.report import build_view
from gpt_triton.select import Selection, select

from .conftest import LOADS, make_report, spec


def _select(report: RunReport) -> Selection:
    return select(report.candidates, report.spec.objective, lambda c: candidate_eligible(c, report.spec.accuracy))


@pytest.mark.parametrize(
    "sections",
    [
        {},  # p99 at the first load level, the default accuracy policy
        {"accuracy": {"min_margin": 0.5}},  # c05 passes its tolerances but not the run's margin
        {"objective": {"metric": "throughput", "load_index": 1}},
        {"objective": {"metric": "throughput", "load_index": 0, "slo_p99_ms": 3.0}},
        {"objective": {"metric": "mean", "load_index": 1}, "accuracy": {"max_exceedance_rate": 0.2}},
    ],
)
def test_eligible_rows_are_selections_pool(sections: dict[str, Any]) -> None:
    report = make_report(spec=spec(measure={"loads": [load.model_dump() for load in LOADS]}, **sections))
    selection, view = _select(report), build_view(report)
    assert selection.values, "the case should leave selection something to choose from"
    assert {r.id: r.score for r in view.rows if r.eligible} == selection.values
    # Each family's best is the family's lowest objective in selection's (lower is better) terms.
    for family in view.families.families:
        scores = {cid: v for cid, v in selection.values.items() if report.candidate(cid).family == family.family}
        assert family.best_id == (min(scores, key=scores.__getitem__) if scores else None)
        assert family.eligible == len(scores)
    # Shown sign: a throughput is positive (selection negates it); a latency is as measured.
    for row in view.rows:
        if row.score is not None:
            assert row.objective is not None
            expected = -row.score if report.spec.objective.metric == "throughput" else row.score
            assert row.objective.value == expected > 0


def test_requests_dropped_at_the_objective_load_make_a_candidate_ineligible() -> None:
    report = make_report()
    report.candidate("c05").latency[0].errors = 3  # the winner of the fixture dropped requests there
    view = build_view(report)
    row = view.row("c05")
    assert row is not None and row.stats is not None and row.objective is None and not row.eligible
    assert "c05" not in _select(report).values
    openvino = next(f for f in view.families.families if f.family == "openvino")
    assert openvino.best_id == "c04"  # the next fastest eligible openvino candidate
    assert view.families.union is not None and view.families.union.winner_value is None


def test_accuracy_cell_gives_the_policys_reason() -> None:
    report = make_report(spec=spec(accuracy={"max_exceedance_bound": 0.05}))  # every bound is 0.064 or more
    view = build_view(report)
    for row in view.rows:
        acc = row.candidate.accuracy
        if acc is None:
            assert row.accuracy == "-" and row.accuracy_ok is None
        elif acc.passed:
            assert row.accuracy_ok is False and "ineligible: exceedance bound 0.064" in row.accuracy
        else:
            assert row.accuracy.startswith("FAIL 7/45") and row.accuracy_ok is False
    assert not any(r.eligible for r in view.rows) and not _select(report).values
