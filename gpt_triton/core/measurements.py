"""Measurement records: one window, and the statistics of a candidate at one load level."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, Field
from scipy import stats


class LoadProfile(BaseModel):
    kind: Literal["concurrency", "rate", "replay"] = "concurrency"
    concurrency: int = 1
    rate: float = 0.0  # requests per second, for kind="rate"
    arrivals: Literal["poisson", "constant"] = "poisson"
    replay_file: str | None = None  # JSONL or perf_analyzer input-data JSON, for kind="replay"

    def label(self) -> str:
        if self.kind == "concurrency":
            return f"concurrency={self.concurrency}"
        if self.kind == "rate":
            return f"rate={self.rate:g}/s ({self.arrivals})"
        return f"replay={self.replay_file}"


class Interval(BaseModel):
    """A point estimate with a bootstrap confidence interval."""

    value: float
    low: float
    high: float
    level: float = 0.95


class ServerBreakdown(BaseModel):
    """Mean per-request server-side times (ms) from Triton's statistics API deltas."""

    queue_ms: float = 0.0
    compute_input_ms: float = 0.0
    compute_infer_ms: float = 0.0
    compute_output_ms: float = 0.0
    success_count: int = 0
    execution_count: int = 0  # fewer than success_count when Triton batched requests
    metrics_delta: dict[str, float] | None = None  # nv_inference_* counter deltas from /metrics, if scraped


class WindowResult(BaseModel):
    duration_s: float
    requests: int
    errors: int
    throughput: float  # successful requests per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    server: ServerBreakdown | None = None
    rate_target: float | None = None  # open-loop: what was asked
    send_lag_p99_ms: float | None = None  # open-loop: scheduled vs actual send time
    rate_achieved: float | None = None  # open-loop: requests sent per second of the schedule's span
    rate_held: bool | None = None  # open-loop: achieved >= 98% of target, send lag p99 <= 20 ms, not growing


class LatencyStats(BaseModel):
    """A candidate at one load level, over its repeated windows."""

    load: LoadProfile
    windows: list[WindowResult] = Field(default_factory=list)
    stable: bool = False
    p50_ms: Interval | None = None
    p90_ms: Interval | None = None
    p99_ms: Interval | None = None
    mean_ms: Interval | None = None
    throughput: Interval | None = None
    errors: int = 0
    server: ServerBreakdown | None = None
    rate_held: bool | None = None  # open-loop: did the generator hold the requested rate
    requests: int = 0  # successful requests every latency estimate above rests on (pooled over windows)
    # Quantiles ("p99") too far in the tail for this many requests: no order statistic bounds them from
    # above, so their intervals are widened to the largest sample and selection refuses them.
    unbounded: list[str] = Field(default_factory=list)


class IsolatedStats(BaseModel):
    """In-process estimates, reported only for comparison with the served figures."""

    single_request_ms: float | None = None
    profiler_op_sum_ms: float | None = None


class ObjectiveContrasts(BaseModel):
    """The drift model of one interleaved run at the objective's load (log objective, lower is better):
    candidate effects and their covariance, so two candidates measured in that run are compared on
    their *difference*, where drift shared by both cancels, instead of by overlap of their marginal
    intervals (which each carry the whole drift and so call a 30% gap a tie on a noisy machine)."""

    ids: list[str]
    mu: list[float]
    cov: list[list[float]]  # covariance of mu (already scaled by the innovation variance)
    df: int
    aliases: dict[str, str] = Field(default_factory=dict)  # duplicate candidate -> the one measured

    def covers(self, a: str, b: str) -> bool:
        ids = set(self.ids)
        return self.aliases.get(a, a) in ids and self.aliases.get(b, b) in ids

    def contrast(self, a: str, b: str) -> tuple[float, float]:
        """log(objective a / objective b) and its standard error."""
        i, j = self.ids.index(self.aliases.get(a, a)), self.ids.index(self.aliases.get(b, b))
        if i == j:
            return 0.0, 0.0
        var = self.cov[i][i] + self.cov[j][j] - 2.0 * self.cov[i][j]
        return self.mu[i] - self.mu[j], float(np.sqrt(max(var, 0.0)))

    def tied(self, a: str, b: str, level: float) -> bool:
        """True when the two-sided ``level`` interval of the contrast contains 0."""
        diff, se = self.contrast(a, b)
        return abs(diff) <= float(stats.t.ppf(0.5 + level / 2.0, max(self.df, 1))) * se
