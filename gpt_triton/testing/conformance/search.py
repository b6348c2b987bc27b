"""The conformance suite every :class:`~gpt_triton.search.SearchStrategy` passes. A strategy's test class
subclasses :class:`SearchStrategyConformance` and sets ``strategy`` (the class).

The suite drives the strategy as the pipeline does - ask a batch, tell its scores, ask again - over a
small but complete space: two compilers, the graph rewrite and the serving knobs, with conditional knobs
(fp16 block list, batching delays) so canonical routes matter. ``families`` and ``search`` may be
overridden to shape it; the space is enumerated in full by some strategies, so keep it to hundreds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gpt_triton.core.model_info import ModelInfo, inspect_model
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import TuneSpec
from gpt_triton.routes import FAMILIES
from gpt_triton.search import Budget, SearchStrategy, build_space, candidate_id
from gpt_triton.testing.models import build_tiny_mlp

MAX_ROUNDS = 20  # ask/tell rounds before a strategy that never returns [] fails; every mode needs 3 at most


def no_score(candidate: Candidate) -> float | None:
    """Every candidate crashed or was infeasible."""
    return None


def some_scores(candidate: Candidate) -> float | None:
    """A deterministic mix: about a third None, the rest spread over [0, 1) (so some beat their start)."""
    if int(candidate.id[:2], 16) % 3 == 0:
        return None
    return int(candidate.id[2:6], 16) / 65536


class SearchStrategyConformance:
    strategy: ClassVar[type[SearchStrategy]]
    model_builder: ClassVar[Callable[..., Path]] = staticmethod(build_tiny_mlp)
    # Sweeps: onnxruntime graph level x precision (with its conditional knobs), openvino precision x
    # streams, graph constant folding, serving dynamic batching (with its conditional knobs).
    families: ClassVar[dict[str, Any]] = {
        "onnxruntime": {"knobs": {"allow_spinning": True, "execution_mode": "sequential", "enable_mem_arena": True,
                                  "enable_mem_pattern": True, "inter_op_threads": 0, "intra_op_threads": 0}},
        "openvino": {"knobs": {"performance_hint": "LATENCY", "static_shape": False, "quantization": "none"}},
        "graph": {"knobs": {"simplify": "none", "shape_inference": False}},
        "serving": {"knobs": {"instance_count": 1, "max_batch_size": None}},
    }
    search: ClassVar[dict[str, Any]] = {"random_routes": 12, "seed": 7}

    @pytest.fixture(scope="class")
    def model(self, tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
        return inspect_model(type(self).model_builder(tmp_path_factory.mktemp("search") / "model.onnx"))

    def make(self, model: ModelInfo, max_builds: int = 10_000) -> tuple[SearchStrategy, list[str]]:
        """A fresh strategy over the suite's space, and the decisions log it writes to."""
        spec = TuneSpec.model_validate({
            "search": {**self.search, "mode": self.strategy.mode, "max_builds": max_builds}, "families": self.families,
        })
        decisions: list[str] = []
        space = build_space(spec, model, FAMILIES, decisions)
        return self.strategy(space, Budget(max_builds, decisions), spec.search), decisions

    @staticmethod
    def run(strategy: SearchStrategy, score: Callable[[Candidate], float | None]) -> list[list[Candidate]]:
        """Ask and tell until the strategy returns []: the batches, in order."""
        batches: list[list[Candidate]] = []
        for _ in range(MAX_ROUNDS):
            batch = strategy.ask()
            if not batch:
                return batches
            strategy.tell(batch, score)
            batches.append(batch)
        raise AssertionError(f"{type(strategy).__name__} still planned candidates after {MAX_ROUNDS} rounds")

    def test_asking_terminates_and_stays_done(self, model: ModelInfo) -> None:
        strategy, _ = self.make(model)
        assert self.run(strategy, some_scores), "a strategy plans at least the baseline"
        assert strategy.ask() == []
        assert strategy.ask() == []

    def test_no_candidate_is_planned_twice(self, model: ModelInfo) -> None:
        strategy, _ = self.make(model)
        planned = [c for batch in self.run(strategy, some_scores) for c in batch]
        ids = [c.id for c in planned]
        assert len(set(ids)) == len(ids)
        for c in planned:  # the id is the routes' identity, so "not twice" means "no route twice"
            assert c.id == candidate_id(c.route, c.graph, c.serving)

    def test_baseline_comes_first(self, model: ModelInfo) -> None:
        strategy, _ = self.make(model)
        planned = [c for batch in self.run(strategy, some_scores) for c in batch]
        assert planned[0] is strategy.space.baseline and planned[0].is_baseline
        assert not any(c.is_baseline for c in planned[1:])
        assert planned[0].family == "onnxruntime" and planned[0].graph is None
        assert planned[0].route.knobs == FAMILIES["onnxruntime"].default_route(model).knobs

    def test_tell_accepts_none_scores(self, model: ModelInfo) -> None:
        strategy, _ = self.make(model)
        batches = self.run(strategy, no_score)  # every candidate crashed: the strategy must not fail
        assert batches and batches[0][0].is_baseline
        strategy.tell(batches[0], some_scores)  # late or repeated feedback is accepted too

    def test_plan_count_matches_what_is_asked(self, model: ModelInfo) -> None:
        strategy, _ = self.make(model)
        count = strategy.plan_count()
        if count is None:
            pytest.skip(f"{self.strategy.__name__} cannot count its plan ahead")
        assert count <= 10_000, "the suite's space must stay small enough that max_builds cuts nothing"
        # Without feedback (no score), the plan is exactly what plan_count promised.
        assert sum(len(b) for b in self.run(strategy, no_score)) == count

    def test_max_builds_caps_every_batch_and_is_logged(self, model: ModelInfo) -> None:
        strategy, decisions = self.make(model, max_builds=3)
        planned = [c for batch in self.run(strategy, some_scores) for c in batch]
        assert len(planned) <= 3 and planned[0].is_baseline
        count = strategy.plan_count()
        if count is not None and count > 3:
            assert any("max_builds=3" in d for d in decisions), decisions

    def test_same_spec_same_plan(self, model: ModelInfo) -> None:
        first, _ = self.make(model)
        second, _ = self.make(model)
        ids = [[c.id for c in b] for b in self.run(first, some_scores)]
        assert ids == [[c.id for c in b] for b in self.run(second, some_scores)]
