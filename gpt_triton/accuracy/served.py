"""The accuracy stages of a tuning run, on the served path: screening on the tuning split (before any
candidate is timed) and acceptance on the held-out split (once, before promotion).

Both send the reference requests to the candidate as Triton serves it (same config, backend and
batching as the latency was measured on) and judge with the one policy,
:func:`gpt_triton.core.objective.accuracy_eligible`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpt_triton.accuracy.compare import compare_requests
from gpt_triton.accuracy.reference import ReferenceSet
from gpt_triton.accuracy.validate import infer_requests
from gpt_triton.core.objective import accuracy_eligible
from gpt_triton.core.outcomes import AcceptOutcome, ScreenOutcome
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import AccuracySpec

Outputs = list[dict[str, np.ndarray]]


def served_reference(grpc_url: str, baseline: Candidate, reference: ReferenceSet, output_names: Sequence[str]) -> ReferenceSet:
    """Without recorded outputs, what the default route serves today is the reference."""
    assert baseline.deploy is not None, "the baseline must be deployed to serve the reference"
    return reference.with_outputs(infer_requests(grpc_url, baseline.deploy.model_name, reference.inputs, output_names))


def screen(grpc_url: str, candidates: Sequence[Candidate], tuning: ReferenceSet, spec: AccuracySpec,
           output_names: Sequence[str]) -> list[ScreenOutcome]:
    """Accuracy on the tuning split through Triton: a passing candidate stays ``deployed`` with its
    result, a failing one is ``infeasible`` (never timed), one whose engine errors is ``failed``."""
    assert tuning.outputs is not None, "screening needs reference outputs (recorded, or the baseline's)"
    outcomes: list[ScreenOutcome] = []
    for candidate in candidates:
        assert candidate.deploy is not None, f"{candidate.id} is screened before it was deployed"
        try:
            produced = infer_requests(grpc_url, candidate.deploy.model_name, tuning.inputs, output_names)
        except Exception as exc:  # an engine that errors at inference is a failed route, not a crash of the run
            outcomes.append(ScreenOutcome(candidate_id=candidate.id, status="failed",
                                          reason=f"inference failed: {' '.join(str(exc).split())[:300]}"))
            continue
        result = compare_requests(tuning.outputs, produced, spec, "tuning", inputs=tuning.inputs,
                                  request_ids=tuning.indices)
        ok, why = accuracy_eligible(result, spec)
        outcomes.append(ScreenOutcome(candidate_id=candidate.id, status=candidate.status if ok else "infeasible",
                                      reason=None if ok else why, accuracy=result))
    return outcomes


def accept(heldout: ReferenceSet, produced: Mapping[str, Outputs], order: Sequence[str], baseline_id: str,
           spec: AccuracySpec) -> list[AcceptOutcome]:
    """Judge ``produced`` (candidate id -> its served outputs on the held-out inputs) in ``order``, up to
    and including the first that passes. Without recorded outputs the baseline's served outputs are the
    reference (so the baseline passes by construction and the chosen candidate is judged against it)."""
    if heldout.outputs is None:
        heldout = heldout.with_outputs(list(produced[baseline_id]))
    assert heldout.outputs is not None
    verdicts: list[AcceptOutcome] = []
    for candidate_id in order:
        result = compare_requests(heldout.outputs, list(produced[candidate_id]), spec, "heldout", inputs=heldout.inputs,
                                  request_ids=heldout.indices)
        ok, why = accuracy_eligible(result, spec)
        verdicts.append(AcceptOutcome(candidate_id=candidate_id, accuracy=result, passed=ok, reason=why))
        if ok:
            break
    return verdicts
