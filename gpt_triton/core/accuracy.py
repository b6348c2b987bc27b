"""Accuracy records: per-output comparison results and the verdict of a candidate on a data split."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class OutputResult(BaseModel):
    """One output, one metric, over all requests of a split."""

    output: str
    metric: str  # e.g. "max_abs", "max_rel", "cosine", "topk", "iou", "task:module:function"
    tolerance: float
    worst: float  # the worst per-request value of the metric
    quantile: float  # e.g. the 0.99 quantile of the per-request error
    margin: float  # distance from worst to the tolerance, in the passing direction (negative: fails)
    exceedances: int  # requests that fail this output's tolerance
    requests: int


class AccuracyResult(BaseModel):
    split: Literal["tuning", "heldout"]
    requests: int
    passed: bool
    exceedances: int  # requests failing any output
    exceedance_upper_bound: float  # one-sided Clopper-Pearson upper bound on the exceedance rate
    confidence: float = 0.95
    min_margin: float  # the smallest margin over outputs (relative to each tolerance)
    outputs: list[OutputResult] = Field(default_factory=list)
    reason: str | None = None  # e.g. "output logits has NaN in request 3"
