"""The conformance suite every :class:`~gpt_triton.measure.clients.LoadClient` passes (the built-in client
and perf_analyzer, over gRPC and over HTTP).

A subclass implements :meth:`LoadClientConformance.make` (the client under test, given the started
server) and the test module provides the fixture ``delay_models``: a started
:class:`~gpt_triton.server.TritonServer` serving ``measure_slow20``, a python-backend model that sleeps
20 ms per request (input ``x``, FP32 ``[batch, 16]``). Every test drives a real Triton: all are slow.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.clients import LoadClient
from gpt_triton.server import TritonServer

DELAY_MODEL, DELAY_MS = "measure_slow20", 20.0
LOADS = [LoadProfile(concurrency=1), LoadProfile(concurrency=2), LoadProfile(kind="rate", rate=60)]


def requests_x(count: int = 3) -> list[dict[str, np.ndarray]]:
    return [{"x": np.random.default_rng(k).random((1, 16), dtype=np.float32)} for k in range(count)]


class LoadClientConformance:
    """Contract: a window holds at least what was asked, every latency covers the server's own time,
    the percentiles are ordered, the server-side breakdown counts the window's requests, and a model
    the server does not have is one :class:`GptTritonError` naming it."""

    def make(self, server: TritonServer) -> LoadClient:
        raise NotImplementedError

    @pytest.mark.slow
    @pytest.mark.parametrize("load", LOADS, ids=["c1", "c2", "rate60"])
    def test_a_window_holds_what_was_asked_and_matches_the_server(self, load: LoadProfile,
                                                                  delay_models: TritonServer) -> None:
        sample = self.make(delay_models).window(delay_models.grpc_url, DELAY_MODEL, requests_x(), load, 0.3, 12,
                                                metrics_url=delay_models.metrics_url, seed=1)
        res = sample.result
        assert res.errors == 0 and res.requests == sample.latencies_ms.size >= 12
        assert np.all(sample.latencies_ms >= DELAY_MS)  # the model sleeps 20 ms: no latency can be shorter
        assert res.p50_ms <= res.p90_ms <= res.p99_ms and res.throughput > 0
        assert res.server is not None and res.server.success_count >= res.requests
        assert res.server.compute_infer_ms >= DELAY_MS

    @pytest.mark.slow
    def test_a_model_the_server_lacks_is_one_clear_error(self, delay_models: TritonServer) -> None:
        with pytest.raises(GptTritonError, match="no_such_model"):
            self.make(delay_models).window(delay_models.grpc_url, "no_such_model", requests_x(), LOADS[0], 0.2, 5,
                                           metrics_url=delay_models.metrics_url)
