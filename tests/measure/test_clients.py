"""The LoadClient seam: every client keeps the same contract on the same real Triton and model."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.clients import BuiltinClient, LoadClient
from gpt_triton.measure.perf_analyzer import PerfAnalyzerClient, find_perf_analyzer
from gpt_triton.server import EmbeddedTriton

TOOL = find_perf_analyzer()


def clients() -> list[object]:
    pa = pytest.param("perf_analyzer", marks=pytest.mark.skipif(
        TOOL is None, reason="perf_analyzer is not installed here: `make perf-analyzer` extracts it"))
    return ["builtin", pa]


def make(name: str) -> LoadClient:
    if name == "perf_analyzer":
        assert TOOL is not None
        return PerfAnalyzerClient(TOOL)
    return BuiltinClient()


@pytest.mark.slow
@pytest.mark.parametrize("name", clients())
@pytest.mark.parametrize("load", [LoadProfile(concurrency=1), LoadProfile(concurrency=2),
                                  LoadProfile(kind="rate", rate=60)], ids=["c1", "c2", "rate60"])
def test_a_window_holds_what_was_asked_and_matches_the_server(name: str, load: LoadProfile,
                                                              delay_models: EmbeddedTriton) -> None:
    requests = [{"x": np.random.default_rng(k).random((1, 16), dtype=np.float32)} for k in range(3)]
    sample = make(name).window(delay_models.grpc_url, "measure_slow20", requests, load, 0.3, 12,
                               metrics_url=delay_models.metrics_url, seed=1)
    res = sample.result
    assert res.errors == 0 and res.requests == sample.latencies_ms.size >= 12
    assert np.all(sample.latencies_ms >= 20.0)  # the model sleeps 20 ms: no latency can be shorter
    assert res.p50_ms <= res.p90_ms <= res.p99_ms and res.throughput > 0
    assert res.server is not None and res.server.success_count >= res.requests
    assert res.server.compute_infer_ms >= 20.0
