"""What each stage says about a candidate, and the one place that applies it.

Stages (build, deploy, screen, measure, the tuning cache on ``--resume``) never set a candidate's
status: each returns a typed outcome, and :func:`apply_outcome` moves the candidate through the explicit
table :data:`TRANSITIONS`. A stage that claims a move the table does not allow (say, measuring a
candidate that never loaded) is a bug, and it fails loudly instead of leaving a report that lies.

The life of a candidate::

    planned -> built -> deployed -> measured
         \\-> crashed    \\-> failed  \\-> infeasible | failed

``measured`` and ``infeasible`` may also follow ``built`` directly when ``--resume`` reuses an earlier
screening and measurement from the tuning cache. An outcome whose status equals the current one changes
only its fields (a measured candidate deployed again on a fresh server for the re-measurement).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel, Field

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.measurements import IsolatedStats, LatencyStats
from gpt_triton.core.records import BuildCost, Candidate, CandidateStatus, DeployInfo
from gpt_triton.core.routes import Artifact

TRANSITIONS: dict[CandidateStatus, frozenset[CandidateStatus]] = {
    "planned": frozenset({"built", "crashed"}),
    "built": frozenset({"deployed", "failed", "measured", "infeasible"}),
    "deployed": frozenset({"measured", "infeasible", "failed"}),
    "measured": frozenset(),
    "crashed": frozenset(),
    "infeasible": frozenset(),
    "failed": frozenset(),
}


class IllegalTransition(RuntimeError):
    """A stage claimed a status change the candidate's life does not allow (a bug, not bad input)."""


class StageOutcome(BaseModel):
    """The base of every outcome: which candidate, the status it moves to, and why (for failures)."""

    stage: str
    candidate_id: str
    status: CandidateStatus
    reason: str | None = None

    def fields(self) -> dict[str, object]:
        """The candidate fields this outcome sets besides status and reason."""
        return {}


class BuildOutcome(StageOutcome):
    stage: Literal["build"] = "build"
    status: Literal["built", "crashed"]
    artifact: Artifact | None = None
    build: BuildCost = Field(default_factory=BuildCost)

    def fields(self) -> dict[str, object]:
        return {"artifact": self.artifact, "build": self.build}


class DeployOutcome(StageOutcome):
    """A load into Triton: ``deployed`` (or the current status, for a candidate loaded again) or
    ``failed`` with the server's reason."""

    stage: Literal["deploy"] = "deploy"
    deploy: DeployInfo | None = None

    def fields(self) -> dict[str, object]:
        return {"deploy": self.deploy} if self.deploy is not None else {}


class ScreenOutcome(StageOutcome):
    """Accuracy on the tuning split: passed (status stays ``deployed``), ``infeasible`` or ``failed``
    (the engine errored at inference)."""

    stage: Literal["screen"] = "screen"
    accuracy: AccuracyResult | None = None

    def fields(self) -> dict[str, object]:
        return {"accuracy": self.accuracy} if self.accuracy is not None else {}


class MeasureOutcome(StageOutcome):
    stage: Literal["measure"] = "measure"
    status: Literal["measured", "failed"]
    latency: list[LatencyStats] = Field(default_factory=list)

    def fields(self) -> dict[str, object]:
        return {"latency": [s.model_copy(deep=True) for s in self.latency]}


class ReuseOutcome(StageOutcome):
    """``--resume``: an earlier screening and measurement of the same candidate, from the tuning cache."""

    stage: Literal["reuse"] = "reuse"
    status: Literal["measured", "infeasible"]
    latency: list[LatencyStats] = Field(default_factory=list)
    accuracy: AccuracyResult | None = None
    isolated: IsolatedStats | None = None

    def fields(self) -> dict[str, object]:
        return {"latency": self.latency, "accuracy": self.accuracy, "isolated": self.isolated}


def apply_outcome(candidate: Candidate, outcome: StageOutcome) -> None:
    """Move ``candidate`` as ``outcome`` says, if :data:`TRANSITIONS` allows it; else raise."""
    if outcome.candidate_id != candidate.id:
        raise IllegalTransition(f"{outcome.stage} outcome for {outcome.candidate_id} applied to {candidate.id}")
    if outcome.status != candidate.status and outcome.status not in TRANSITIONS[candidate.status]:
        raise IllegalTransition(
            f"{outcome.stage} cannot move {candidate.id} from {candidate.status} to {outcome.status} "
            f"(allowed: {', '.join(sorted(TRANSITIONS[candidate.status])) or 'none, it is final'})"
        )
    for name, value in outcome.fields().items():
        setattr(candidate, name, value)
    candidate.status = outcome.status
    candidate.reason = outcome.reason


def apply_outcomes(
    candidates: Iterable[Candidate], outcomes: Iterable[StageOutcome],
    after: Callable[[Candidate, StageOutcome], None] | None = None,
) -> None:
    """Apply each outcome to the candidate it names, as the outcomes come (a stage may yield them while it
    works); ``after`` sees each candidate with its outcome once applied (to record it, log, count progress)."""
    by_id = {c.id: c for c in candidates}
    for outcome in outcomes:
        candidate = by_id[outcome.candidate_id]
        apply_outcome(candidate, outcome)
        if after is not None:
            after(candidate, outcome)


def fresh_copy(candidate: Candidate) -> Candidate:
    """A built candidate's copy with no measurement, deployment or screening: for an independent
    second measurement (``--repeat-check``), which must not see the first one's results."""
    return candidate.model_copy(deep=True, update={
        "status": "built", "reason": None, "latency": [], "deploy": None,
    })


class AcceptOutcome(BaseModel):
    """Held-out acceptance of one candidate: a verdict, not a status change (the candidate was chosen
    on the tuning split; this decides only whether it may be promoted)."""

    candidate_id: str
    accuracy: AccuracyResult
    passed: bool
    reason: str  # the policy's one-line reason, pass or fail
