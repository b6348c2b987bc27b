"""Measurement under realistic load: load generator, windows, bootstrap intervals, racing, re-measure.

Names are resolved lazily (PEP 562): ``gpt_triton.core.records`` imports ``gpt_triton.core.measurements``,
which runs this file first, and the harness imports ``gpt_triton.core.records`` back - an eager import here
would be circular.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run_window": "loadgen", "WindowSample": "loadgen", "load_replay": "loadgen", "schedule": "loadgen",
    "scrape_metrics": "loadgen", "pinned": "loadgen",
    "is_stable": "windows", "summarise": "windows",
    "bootstrap_interval": "stats", "ratio_interval": "stats", "throughput_interval": "stats",
    "window_bootstrap_interval": "stats", "window_ratio_interval": "stats",
    "Measurer": "harness", "MeasureRun": "runs", "RemeasureResult": "runs", "dedupe_key": "runs",
    "isolated_estimate": "isolated", "rank_correlation": "isolated",
    "LoadClient": "clients", "BuiltinClient": "clients", "load_client": "perf_analyzer",
    "PerfAnalyzerClient": "perf_analyzer", "find_perf_analyzer": "perf_analyzer",
    "requests_needed": "quantiles", "order_statistic_interval": "quantiles",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
