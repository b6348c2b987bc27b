"""Canary rollout: weighted client-side router, PromQL gates on Triton metrics, rollback or promotion."""

from gpt_triton.canary.controller import (
    CanaryController,
    CanaryMetrics,
    CanaryPolicy,
    CanaryResult,
    DecisionLog,
    TritonVersions,
    VersionServer,
)
from gpt_triton.canary.gates import GateConfig, GateResult, PromQLGates, combine
from gpt_triton.canary.router import LocalRouterShifter, TrafficLoop, TrafficShifter, WeightedRouter

__all__ = [
    "CanaryController", "CanaryMetrics", "CanaryPolicy", "CanaryResult", "DecisionLog", "GateConfig", "GateResult",
    "LocalRouterShifter", "PromQLGates", "TrafficLoop", "TrafficShifter", "TritonVersions", "VersionServer",
    "WeightedRouter", "combine",
]
