"""Candidate search as ask/tell, like Model Analyzer's generators: plan routes, learn from scores, plan more.

The space (``_space.py``), per enabled and available compiler family: its knobs, the graph-rewrite knobs
and the serving knobs, as the spec fixes or sweeps them. The strategies (``_strategies.py``), one class
per ``search.mode``: fast, full, mixed, random. :class:`CandidateSearch` is the entry the pipeline and
``gpt-triton routes`` use: it builds the space, picks the strategy for the spec's mode from
:data:`STRATEGIES`, and keeps one log of decisions. The baseline (ONNX Runtime defaults, no graph rewrite,
serving defaults) is always the first candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import TuneSpec
from gpt_triton.routes import FAMILIES
from gpt_triton.routes._base import RouteFamily
from gpt_triton.routes.baseline import BaselineRoute
from gpt_triton.search._space import (
    BASELINE_FAMILY,
    KnobSpace,
    SearchSpace,
    build_space,
    candidate_id,
    knob_space,
)
from gpt_triton.search._strategies import (
    STRATEGIES,
    Budget,
    FastSearch,
    FullSearch,
    MixedSearch,
    RandomSearch,
    Score,
    SearchStrategy,
    one_knob_at_a_time,
)


class CandidateSearch:
    """Plans candidates in batches (:meth:`ask`) and learns from their scores (:meth:`tell`)."""

    def __init__(self, spec: TuneSpec, model: ModelInfo, families: Mapping[str, RouteFamily] = FAMILIES,
                 unavailable: Mapping[str, str] | None = None, baseline: BaselineRoute | None = None) -> None:
        """``unavailable``: families that are available here but that this run cannot use, with the reason
        (the pipeline names those whose artifacts the server it opened cannot serve). ``baseline``: the
        production route of a served model (``tune --model-repository``), planned as the baseline."""
        self.spec = spec
        self.model = model
        self.families = families
        self.decisions: list[str] = []  # one line per choice the search made (logged in the run's report)
        self.space: SearchSpace = build_space(spec, model, families, self.decisions, unavailable, baseline)
        self.strategy: SearchStrategy = STRATEGIES[spec.search.mode](
            self.space, Budget(spec.search.max_builds, self.decisions), spec.search
        )

    @property
    def baseline(self) -> Candidate:
        return self.space.baseline

    def ask(self) -> list[Candidate]:
        """The next batch of new planned candidates; [] when the mode is done or the budget is used."""
        return self.strategy.ask()

    def tell(self, candidates: Sequence[Candidate], score: Score) -> None:
        """Record scores (lower is better; None = crashed or infeasible) for planned candidates."""
        self.strategy.tell(candidates, score)

    def plan_counts(self) -> dict[str, Any]:
        """Routes each mode would plan for this model and spec before any feedback and before max_builds,
        per mode and per family (for ``gpt-triton routes``). Plans nothing: this search's budget is untouched."""
        space = self.space
        modes: dict[str, int] = {}
        for mode, strategy in STRATEGIES.items():
            count = strategy(space, Budget(self.spec.search.max_builds, []), self.spec.search).plan_count()
            if count is not None:
                modes[mode] = count
        fast = one_knob_at_a_time(space)
        families: dict[str, dict[str, int]] = {}
        for name in space.compilers:
            families[name] = {"fast": len({c.id for c, n, _ in fast if n == name}), "full": space.full_count(name)}
        families[space.graph.family.name] = {"values": space.graph.count()}
        families[space.serving.family.name] = {"values": space.serving.count()}
        return {"modes": modes, "max_builds": self.spec.search.max_builds, "families": families}


__all__ = [
    "BASELINE_FAMILY", "STRATEGIES", "Budget", "CandidateSearch", "FastSearch", "FullSearch", "KnobSpace",
    "MixedSearch", "RandomSearch", "Score", "SearchSpace", "SearchStrategy", "build_space", "candidate_id",
    "knob_space",
]
