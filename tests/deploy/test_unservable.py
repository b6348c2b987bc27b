"""A candidate the server cannot serve fails alone; the run goes on (real embedded Triton: python only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.fake_plans import build_plan, plan_artifact
from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.outcomes import apply_outcomes
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.deploy import deploy_candidates, unload_candidates
from gpt_triton.server import EmbeddedTriton
from gpt_triton.testing import fake_tensorrt

pytestmark = pytest.mark.slow


def _candidate(cid: str, artifact: Artifact, **serving: object) -> Candidate:
    return Candidate(id=cid, family=artifact.family, route=Route(family=artifact.family),
                     serving=Route(family="serving", knobs=serving), status="built", artifact=artifact)


def test_a_plan_on_a_server_without_tensorrt_fails_alone(triton_server: EmbeddedTriton, tmp_path: Path,
                                                          tiny_model_path: Path) -> None:
    info = inspect_model(tiny_model_path)
    shapes = resolve_shapes(info, {})
    plan = build_plan(fake_tensorrt.module("10.13"), info, shapes, 8, tmp_path / "plan").parent
    ort = Artifact(family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"),
                   directory=str(tiny_model_path.parent), files=[tiny_model_path.name])
    candidates = [
        _candidate("plan", plan_artifact(plan)),
        _candidate("graphs", ort, cuda_graphs=True),  # a GPU serving knob the python backend cannot apply
        _candidate("ort", ort),
    ]
    assert triton_server.native_backends == frozenset()
    outcomes = list(deploy_candidates(triton_server, tmp_path / "staging", candidates, info, shapes))
    try:
        apply_outcomes(candidates, outcomes)
        by_id = {c.id: c for c in candidates}
        assert by_id["plan"].status == "failed"
        assert by_id["plan"].reason == ("not servable here: a tensorrt artifact needs a Triton with the tensorrt backend "
                                        "and a GPU; point server.triton_url at one or disable the tensorrt family")
        assert by_id["graphs"].status == "failed" and "CUDA graphs" in (by_id["graphs"].reason or "")
        assert by_id["ort"].status == "deployed" and by_id["ort"].deploy is not None
        assert by_id["ort"].deploy.backend == "python" and by_id["ort"].deploy.notes == []
        assert triton_server.model_state("c_ort")[0] == "READY"
        assert not (tmp_path / "staging" / "c_plan").exists()
    finally:
        unload_candidates(triton_server, candidates)
