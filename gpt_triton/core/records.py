"""Cross-stage records: a candidate's life (planned -> built -> deployed -> measured) and the run report.

Every record is a pydantic model so a run can be saved after each stage, resumed, and reported.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.cross_check import ClientCrossCheck
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import (
    Interval,
    IsolatedStats,
    LatencyStats,
    ObjectiveContrasts,
    RatioGap,
    ServerSpread,
    TailEdge,
    ratio_gap,
)
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.core.spec import GainStatistic, TuneSpec

CandidateStatus = Literal["planned", "built", "crashed", "deployed", "measured", "infeasible", "failed"]


class BuildCost(BaseModel):
    seconds: float = 0.0
    peak_rss_bytes: int = 0
    cached: bool = False  # reused from the tuning cache or an identical artifact


class DeployInfo(BaseModel):
    model_name: str  # the Triton model name in the staging repository
    backend: str  # "python" (our adapter) or a native backend: "onnxruntime", "openvino", "tensorrt"
    adapter: bool  # True when the python-backend runtime adapter serves the artifact
    config_pbtxt: str = ""
    # Where the written config serves differently from what the serving route asked, and why (e.g. the
    # dynamic batcher Triton's native backends add to every batched config without a scheduler).
    notes: list[str] = Field(default_factory=list)


class Candidate(BaseModel):
    id: str
    # family + the knobs that differ from the baseline (gpt_triton.core.naming), set when planned; "" in
    # reports saved before names existed (the report then computes one). The id stays the stable key.
    name: str = ""
    family: str  # the compiler family
    route: Route  # compiler knobs
    graph: Route | None = None  # graph rewrites applied before the compiler
    serving: Route  # Triton serving settings
    is_baseline: bool = False
    status: CandidateStatus = "planned"
    reason: str | None = None  # why crashed / infeasible / failed
    artifact: Artifact | None = None
    build: BuildCost = Field(default_factory=BuildCost)
    deploy: DeployInfo | None = None
    latency: list[LatencyStats] = Field(default_factory=list)  # one per load profile
    accuracy: AccuracyResult | None = None  # screening, on the tuning split
    isolated: IsolatedStats | None = None

    def served_model(self, doing: str) -> str:
        """The model name this candidate is served under; a candidate not deployed fails the step ``doing``."""
        if self.deploy is None:
            raise GptTritonError(f"candidate {self.id} is not deployed: deploy it before {doing}")
        return self.deploy.model_name

    def route_text(self) -> str:
        parts = [self.route.key()]
        if self.graph and self.graph.knobs:
            parts.append(self.graph.key())
        parts.append(self.serving.key())
        return " | ".join(parts)


class Gain(BaseModel):
    """Re-measured baseline/winner ratio of the objective (>1 means the winner is faster)."""

    metric: str
    ratio: Interval
    winner_ms: float  # the candidates' own figures: the metric over each side's pooled requests
    baseline_ms: float
    # How ``ratio`` (and the selection estimate) were formed from the pair's windows (measure.gain_statistic):
    # paired, the geometric mean of the rounds' window ratios; pooled, the ratio of baseline_ms / winner_ms's
    # pooled statistics. A report written before the field was pooled.
    statistic: GainStatistic = "pooled"
    selection_estimate_ratio: float | None = None  # what selection believed: the winner's-curse gap
    # Its interval, when the finalist run measured the pair to one: the two runs' gap is then judged
    # against both widths (core.measurements.ratio_gap).
    selection_estimate: Interval | None = None
    significant: bool = False  # the interval excludes 1.0
    # The separate re-measurement's own stats (windows, intervals), for the report's re-measurement plot.
    remeasured_baseline: LatencyStats | None = None
    remeasured_winner: LatencyStats | None = None
    # With measure.remeasure_servers > 1: each server's own ratio and their spread; ``ratio`` is then pooled
    # over them (core.measurements.between_servers), the stats above over every server's windows.
    servers: ServerSpread | None = None
    # The pair's tails around a p90/p99 objective over the re-measure's requests: whether the quantile sits at
    # the edge of a slow cluster, where the gain moves with the machine (gpt_triton/measure/tail_edge.py).
    tail: TailEdge | None = None
    # The finalist pair's rounds took turns with this re-measure's (measure.remeasure_in_turns): the estimate
    # and the re-measure saw the same minutes, each on its own server.
    estimate_in_turns: bool = False
    # The other load client's gain for the same pair on the re-measure's first server, in turns with the
    # re-measure (measure.cross_check), and how far the two are apart; None when not asked or not run.
    cross_check: ClientCrossCheck | None = None

    def pooled_ratio(self) -> float | None:
        """``baseline_ms / winner_ms``: one figure a side over every request, the statistic perf_analyzer prints
        (for a throughput objective the two are p99s, not the gain's metric); None without a winner figure."""
        return self.baseline_ms / self.winner_ms if self.winner_ms > 0 else None

    def between_runs(self) -> RatioGap | None:
        """The selection estimate against this re-measure, when the finalist run gave it an interval."""
        return None if self.selection_estimate is None else \
            ratio_gap(self.selection_estimate, self.ratio, same_minutes=self.estimate_in_turns)


class Machine(BaseModel):
    hostname: str
    cpu: str
    cores: int
    memory_bytes: int
    gpu: str | None = None
    runtime_versions: dict[str, str] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)


class RunReport(BaseModel):
    run_id: str
    run_dir: str = ""
    tool_version: str
    created: str
    model: ModelInfo
    shapes: dict[str, list[int]]
    spec: TuneSpec  # saved as the same JSON object the YAML spec validates to
    machine: Machine
    triton_version: str = ""
    triton_mode: Literal["embedded", "remote"] = "embedded"
    reference: dict[str, Any] = Field(default_factory=dict)  # source, synthetic, split seed and sizes
    candidates: list[Candidate] = Field(default_factory=list)
    baseline_id: str | None = None
    winner_id: str | None = None
    selected_id: str | None = None  # what selection picked before the gain check
    gain: Gain | None = None
    heldout: AccuracyResult | None = None
    promoted_version: int | None = None
    promoted_path: str | None = None
    isolated_vs_served_rho: float | None = None  # Spearman rank correlation, isolated vs served ordering
    repeat_check: dict[str, Any] | None = None  # --repeat-check: the two selections and whether they agree
    # One per interleaved measurement run (search batch): the drift model selection's tie test reads.
    contrasts: list[ObjectiveContrasts] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)  # human-readable log: what each decision used
    tuning_seconds: float = 0.0
    status: Literal["running", "done", "failed"] = "running"
    error: str | None = None

    def candidate(self, candidate_id: str) -> Candidate:
        for candidate in self.candidates:
            if candidate.id == candidate_id:
                return candidate
        raise KeyError(candidate_id)
