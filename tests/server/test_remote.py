"""RemoteTriton: the conformance suite against an embedded server treated as remote (file upload)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.server import EmbeddedTriton, RemoteTriton, TritonServer
from gpt_triton.testing.conformance.servers import ServerConformance, artifact_for, deploy, unique


class TestRemoteConformance(ServerConformance):
    @pytest.fixture
    def server(self, triton_server: EmbeddedTriton) -> Iterator[TritonServer]:
        with RemoteTriton(triton_server.grpc_url) as remote:
            yield remote


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed on exit: nothing listens there


def test_unreachable_url_fails_fast() -> None:
    remote = RemoteTriton(f"127.0.0.1:{_closed_port()}")
    started = time.monotonic()
    with pytest.raises(GptTritonError, match=r"cannot reach Triton at 127\.0\.0\.1:\d+"):
        remote.start()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("url", ["triton", "http://:8001", "host:port"])
def test_bad_url_is_a_user_error(url: str) -> None:
    with pytest.raises(GptTritonError, match="bad Triton URL"):
        RemoteTriton(url)


def test_conventional_ports_are_derived() -> None:
    remote = RemoteTriton("grpc://triton.example:8001")
    assert remote.grpc_url == "triton.example:8001"
    assert remote.http_url == "triton.example:8000"
    assert remote.metrics_url == "http://triton.example:8002/metrics"


@pytest.mark.slow
def test_probe_finds_no_native_backend_on_the_wheel_server(triton_server: EmbeddedTriton) -> None:
    with RemoteTriton(triton_server.grpc_url) as remote:
        assert remote.native_backends == frozenset()
        # Probe models must not stay behind.
        assert not [n for n in ("onnxruntime", "openvino", "tensorrt")
                    if remote.client().is_model_ready(f"gpt_triton_probe_{n}")]
    with RemoteTriton(triton_server.grpc_url, native_backends=["onnxruntime"]) as given:
        assert given.native_backends == frozenset({"onnxruntime"})


@pytest.mark.slow
def test_upload_needs_no_shared_filesystem_and_stop_leaves_server_running(
    triton_server: EmbeddedTriton, tmp_path: Path, tiny_model_path: Path
) -> None:
    name = unique("upload")
    with RemoteTriton(triton_server.grpc_url) as remote:
        deploy(remote, tmp_path / "elsewhere", name, tiny_model_path, artifact_for(tiny_model_path, "onnxruntime", {}))
        assert remote.client().is_model_ready(name)
        assert triton_server.repository is not None
        assert not (triton_server.repository / name).exists()  # uploaded, not copied into the repository
        remote.unload(name)
    assert triton_server.client().is_server_live()


def test_load_error_reason_drops_triton_boilerplate() -> None:
    from gpt_triton.server import ModelLoadError

    raw = ("load failed for model 'cand': version 1 is at UNAVAILABLE state: Internal: RuntimeError: "
           "signature verification failed: tampered file /r/cand/1/model.onnx At: /r/cand/1/model.py(45): "
           "_verify_signatures /r/cand/1/model.py(98): initialize ;")
    error = ModelLoadError("cand", raw)
    assert error.reason == "Internal: RuntimeError: signature verification failed: tampered file /r/cand/1/model.onnx"
    assert str(error) == f"Triton could not load model 'cand': {error.reason}"
