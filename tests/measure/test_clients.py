"""The LoadClient seam: every client, over gRPC and over HTTP, keeps the same contract on the same real
Triton and model (gpt_triton/testing/conformance/load_clients.py), plus what only HTTP's lean loop does."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.clients import BuiltinClient, LoadClient
from gpt_triton.measure.crowding import RepeatCrowded
from gpt_triton.measure.http_lean import HttpConnection, HttpRequestFailed, http_request
from gpt_triton.measure.perf_analyzer import PerfAnalyzerClient, find_perf_analyzer, load_client
from gpt_triton.measure.server_watch import ServerWatch
from gpt_triton.server import EmbeddedTriton, TritonServer
from gpt_triton.testing.conformance.load_clients import DELAY_MODEL, LoadClientConformance, requests_x

TOOL = find_perf_analyzer()
needs_perf_analyzer = pytest.mark.skipif(TOOL is None,
                                         reason="perf_analyzer is not installed here: `make perf-analyzer` extracts it")


class TestBuiltinGrpcConformance(LoadClientConformance):
    def make(self, server: TritonServer) -> LoadClient:
        return BuiltinClient()


class TestBuiltinHttpConformance(LoadClientConformance):
    def make(self, server: TritonServer) -> LoadClient:
        return BuiltinClient(protocol="http", http_url=server.http_url)


class TestTunersEmbeddedClientConformance(LoadClientConformance):
    """What gpt_triton.serving.measurer gives an embedded server's measurer: the watched client, a window that
    other processes crowded measured again (gpt_triton/measure/crowding.py), the server's death asked after
    on a failed window (gpt_triton/measure/server_watch.py)."""

    def make(self, server: TritonServer) -> LoadClient:
        return ServerWatch(RepeatCrowded(load_client("builtin"), 0.25), server.exit_note)


@needs_perf_analyzer
class TestPerfAnalyzerGrpcConformance(LoadClientConformance):
    def make(self, server: TritonServer) -> LoadClient:
        assert TOOL is not None
        return PerfAnalyzerClient(TOOL)


@needs_perf_analyzer
class TestPerfAnalyzerHttpConformance(LoadClientConformance):
    def make(self, server: TritonServer) -> LoadClient:
        assert TOOL is not None
        return PerfAnalyzerClient(TOOL, "http", server.http_url)


@pytest.mark.slow
def test_the_http_loop_sends_binary_tensors_and_counts_rejected_requests(delay_models: EmbeddedTriton) -> None:
    """A request Triton rejects (wrong input name) is an error of the window with Triton's message, and
    the keep-alive connection survives it: the next good request succeeds."""
    connection = HttpConnection(delay_models.http_url)
    try:
        good = http_request(connection.host, DELAY_MODEL, requests_x(1)[0], None)
        assert b'"binary_data_size":64' in good and b'"binary_data_output":true' in good
        body = connection.exchange(good)
        assert body  # the JSON header (and binary outputs) of a 200 response
        bad = http_request(connection.host, DELAY_MODEL, {"nope": np.zeros((1, 16), np.float32)}, None)
        with pytest.raises(HttpRequestFailed, match="HTTP 400"):
            connection.exchange(bad)
        assert connection.exchange(good)
    finally:
        connection.close()
    sample = BuiltinClient(protocol="http", http_url=delay_models.http_url).window(
        delay_models.grpc_url, DELAY_MODEL, [{"nope": np.zeros((1, 16), np.float32)}], LoadProfile(concurrency=1),
        0.1, 3)
    assert sample.latencies_ms.size == 0 and sample.result.requests == sample.result.errors >= 3
    assert sample.first_error is not None and "HTTP 400" in sample.first_error


def test_http_without_an_endpoint_is_refused() -> None:
    client = BuiltinClient(protocol="http", http_url=None)
    with pytest.raises(GptTritonError, match="HTTP endpoint is unknown"):
        client.window("127.0.0.1:1", DELAY_MODEL, requests_x(1), LoadProfile(concurrency=1), 0.1, 1)
    if TOOL is not None:
        with pytest.raises(GptTritonError, match="HTTP endpoint is unknown"):
            PerfAnalyzerClient(TOOL, "http", None)
    with pytest.raises(ValueError, match="host:port"):
        HttpConnection("nonsense")
