"""deploy_candidates keeps several load requests in flight (real embedded Triton): the loads overlap on the
server, the outcomes still come in the candidates' order, and a deploy given up halfway on a user's server
leaves nothing loaded there that nobody would unload."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.outcomes import apply_outcomes
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Route
from gpt_triton.deploy import deploy_candidates, unload_candidates
from gpt_triton.server import EmbeddedTriton, RemoteTriton
from gpt_triton.testing.conformance.servers import artifact_for

pytestmark = pytest.mark.slow


def _candidates(model: Path, ids: list[str]) -> list[Candidate]:
    artifact = artifact_for(model, "onnxruntime", {})
    return [Candidate(id=cid, family="onnxruntime", route=Route(family="onnxruntime"),
                      serving=Route(family="serving"), status="built", artifact=artifact) for cid in ids]


def test_loads_overlap_on_the_server_and_outcomes_keep_the_candidates_order(
        triton_server: EmbeddedTriton, tmp_path: Path, tiny_model_path: Path) -> None:
    info = inspect_model(tiny_model_path)
    shapes = resolve_shapes(info, {})
    ids = ["par_c", "par_a", "par_b"]  # not sorted: the order given is the order reported
    candidates = _candidates(tiny_model_path, ids)
    announced: list[str] = []
    outcomes = list(deploy_candidates(triton_server, tmp_path / "staging", candidates, info, shapes,
                                      advance=announced.append))
    try:
        assert [o.candidate_id for o in outcomes] == ids
        assert announced == [f"c_{cid} loaded (python backend)" for cid in ids]
        apply_outcomes(candidates, outcomes)
        assert all(c.status == "deployed" and triton_server.model_state(f"c_{c.id}")[0] == "READY" for c in candidates)
        # Triton logs "loading: NAME:1" as a load thread takes the request: all three before the first ends.
        assert triton_server.log_path is not None
        events = [(m.group(1), m.group(2)) for m in re.finditer(
            r'(loading|successfully loaded)[:]? \'?(c_par_[abc])', triton_server.log_path.read_text())]
        first_done = next(i for i, (what, _) in enumerate(events) if what == "successfully loaded")
        assert {name for what, name in events[:first_done] if what == "loading"} == {f"c_{cid}" for cid in ids}, events
    finally:
        unload_candidates(triton_server, candidates)


def test_a_deploy_given_up_after_its_first_outcome_leaves_nothing_else_on_a_users_server(
        triton_server: EmbeddedTriton, tmp_path: Path, tiny_model_path: Path) -> None:
    info = inspect_model(tiny_model_path)
    shapes = resolve_shapes(info, {})
    candidates = _candidates(tiny_model_path, ["gone_a", "gone_b", "gone_c"])
    with RemoteTriton(triton_server.grpc_url) as remote:
        outcomes = deploy_candidates(remote, tmp_path / "staging", candidates, info, shapes)
        first = next(outcomes)
        outcomes.close()  # as an interrupt between two outcomes does
        # Every load request sent has now ended (deploy's worker threads exit once their request returns):
        # a load close() left in flight would show as a ready model below, not race past the check.
        for worker in [t for t in threading.enumerate() if t.name.startswith("triton-load")]:
            worker.join(timeout=60)
            assert not worker.is_alive(), f"{worker.name} still loading after 60 s"
        try:
            assert first.candidate_id == "gone_a" and first.status == "deployed"
            # A model loaded with a config override (as a remote load is) is missing from the repository
            # index: readiness is what tells.
            assert remote.client().is_model_ready("c_gone_a")  # reported: the caller unloads it
            for name in ("c_gone_b", "c_gone_c"):  # sent, never reported: unloaded before close() returned
                assert not remote.client().is_model_ready(name)
        finally:
            remote.unload("c_gone_a")
