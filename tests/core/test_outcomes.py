"""The candidate's life: outcomes move it only along the transition table, and carry their fields."""

from __future__ import annotations

import pytest

from gpt_triton.core.measurements import LatencyStats, LoadProfile
from gpt_triton.core.outcomes import (
    TRANSITIONS,
    BuildOutcome,
    DeployOutcome,
    IllegalTransition,
    MeasureOutcome,
    ScreenOutcome,
    apply_outcome,
    apply_outcomes,
    fresh_copy,
)
from gpt_triton.core.records import Candidate, CandidateStatus, DeployInfo
from gpt_triton.core.routes import Artifact, Route


def candidate(cid: str = "c1", status: CandidateStatus = "planned") -> Candidate:
    return Candidate(id=cid, family="onnxruntime", route=Route(family="onnxruntime"), serving=Route(family="serving"),
                     status=status)


def artifact() -> Artifact:
    return Artifact(family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"), directory="/x",
                    files=["model.onnx"])


def test_the_table_names_every_status_and_only_final_ones_lead_nowhere() -> None:
    assert set(TRANSITIONS) == set(CandidateStatus.__args__)  # type: ignore[attr-defined]
    assert {s for s, nxt in TRANSITIONS.items() if not nxt} == {"measured", "crashed", "infeasible", "failed"}
    for targets in TRANSITIONS.values():
        assert targets <= set(TRANSITIONS)


def test_a_candidate_lives_planned_built_deployed_measured() -> None:
    c = candidate()
    apply_outcome(c, BuildOutcome(candidate_id="c1", status="built", artifact=artifact()))
    assert c.status == "built" and c.artifact is not None and c.reason is None
    info = DeployInfo(model_name="c_c1", backend="python", adapter=True)
    apply_outcome(c, DeployOutcome(candidate_id="c1", status="deployed", deploy=info))
    assert c.status == "deployed" and c.deploy == info
    apply_outcome(c, ScreenOutcome(candidate_id="c1", status="deployed"))  # passed screening: status unchanged
    stats = LatencyStats(load=LoadProfile(), errors=1)
    apply_outcome(c, MeasureOutcome(candidate_id="c1", status="measured", reason="dropped by racing: x", latency=[stats]))
    assert c.status == "measured" and c.reason == "dropped by racing: x" and c.latency == [stats]
    assert c.latency[0] is not stats  # the outcome's copy, so two candidates measured once do not share it
    # Deployed again on a fresh server (the re-measurement): fields change, the status stays.
    apply_outcome(c, DeployOutcome(candidate_id="c1", status="measured", deploy=info.model_copy(update={"model_name": "r"})))
    assert c.status == "measured" and c.deploy is not None and c.deploy.model_name == "r"


@pytest.mark.parametrize(("start", "outcome"), [
    ("planned", MeasureOutcome(candidate_id="c1", status="measured")),  # never built, never loaded
    ("crashed", DeployOutcome(candidate_id="c1", status="deployed")),  # a crash is final
    ("infeasible", MeasureOutcome(candidate_id="c1", status="measured")),  # screened out: never timed
    ("measured", ScreenOutcome(candidate_id="c1", status="infeasible")),
    ("failed", BuildOutcome(candidate_id="c1", status="built")),
])
def test_moves_outside_the_table_raise_and_change_nothing(start: CandidateStatus, outcome: object) -> None:
    c = candidate(status=start)
    before = c.model_copy(deep=True)
    with pytest.raises(IllegalTransition, match=f"from {start} to"):
        apply_outcome(c, outcome)  # type: ignore[arg-type]
    assert c == before


def test_an_outcome_for_another_candidate_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="applied to"):
        apply_outcome(candidate("a"), BuildOutcome(candidate_id="b", status="built"))


def test_apply_outcomes_follows_a_stage_as_it_yields() -> None:
    cands = [candidate("a"), candidate("b")]
    seen: list[tuple[str, str]] = []

    def stage():  # a stage yields while it works; each outcome is applied before the next is made
        yield BuildOutcome(candidate_id="b", status="crashed", reason="killed by SIGSEGV")
        assert cands[1].status == "crashed"
        yield BuildOutcome(candidate_id="a", status="built", artifact=artifact())

    apply_outcomes(cands, stage(), after=lambda c, o: seen.append((c.id, o.status)))
    assert seen == [("b", "crashed"), ("a", "built")]
    assert cands[1].reason == "killed by SIGSEGV"


def test_fresh_copy_forgets_measurement_and_deployment_but_keeps_the_build_and_screening() -> None:
    c = candidate(status="measured").model_copy(update={
        "artifact": artifact(), "latency": [LatencyStats(load=LoadProfile(), stable=True)], "reason": "x",
        "deploy": DeployInfo(model_name="m", backend="python", adapter=True)})
    copy = fresh_copy(c)
    assert copy.status == "built" and copy.latency == [] and copy.deploy is None and copy.reason is None
    assert copy.artifact == c.artifact and c.status == "measured" and c.latency
