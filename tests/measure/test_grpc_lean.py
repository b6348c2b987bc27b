"""The lean loop's HTTP/2 gRPC connection against the real embedded Triton: responses as the server
sent them, flow control on requests larger than Triton's send windows, failures named, the connection
kept after a failed call (a failed socket and the frames Triton does not send on demand: in
test_grpc_lean_frames.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from gpt_triton.measure.grpc_lean import GrpcConnection, GrpcRequestFailed
from gpt_triton.measure.sender import serialised_request
from gpt_triton.server import EmbeddedTriton


def _y(response: bytes) -> np.ndarray:
    parsed = service_pb2.ModelInferResponse.FromString(response)
    assert [o.name for o in parsed.outputs] == ["y"]
    return np.frombuffer(parsed.raw_output_contents[0], np.float32).reshape(list(parsed.outputs[0].shape))


@pytest.mark.slow
def test_calls_return_the_servers_responses_small_and_beyond_the_default_windows(delay_models: EmbeddedTriton) -> None:
    """5 MB requests and 1.3 MB responses, then small ones again, on one connection. Triton's gRPC
    server opens 4 MiB send windows (and frames), so a 5 MB request must wait for its WINDOW_UPDATE."""
    connection = GrpcConnection(delay_models.grpc_url)
    rng = np.random.default_rng(0)
    try:
        for rows in (1, 80_000, 3, 80_000, 1):
            x = rng.random((rows, 16), dtype=np.float32)
            y = _y(connection.call(serialised_request("measure_fast", {"x": x}, None)))
            assert np.array_equal(y, 2.0 * x[:, :4])
    finally:
        connection.close()


@pytest.mark.slow
def test_a_failed_call_carries_tritons_words_and_the_connection_survives(delay_models: EmbeddedTriton) -> None:
    connection = GrpcConnection(delay_models.grpc_url)
    good = serialised_request("measure_fast", {"x": np.ones((1, 16), np.float32)}, None)
    try:
        with pytest.raises(GrpcRequestFailed, match=r"gRPC status \d+: .*nope"):
            connection.call(serialised_request("measure_fast", {"nope": np.ones((1, 16), np.float32)}, None))
        with pytest.raises(GrpcRequestFailed, match=r"gRPC status \d+: .*no_such_model"):
            connection.call(serialised_request("no_such_model", {"x": np.ones((1, 16), np.float32)}, None))
        assert np.array_equal(_y(connection.call(good)), np.full((1, 4), 2.0, np.float32))
    finally:
        connection.close()


def test_an_endpoint_that_is_not_host_port_is_refused() -> None:
    with pytest.raises(ValueError, match="host:port"):
        GrpcConnection("nonsense")
