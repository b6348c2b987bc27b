"""Remote mode: a Triton someone else runs (e.g. the NGC image in a pod). Never started or stopped here.

Models are loaded through the model-repository API with a config override and the version files
uploaded in the request (``load_model(name, config=json, files={"file:1/model.onnx": bytes})``), so the
tool and the server need no shared filesystem.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from gpt_triton.core.errors import GptTritonError, TransientError
from gpt_triton.server._base import TritonServer, _exception_text

LIVENESS_TIMEOUT_S = 3.0
PROBE_BACKENDS = ("onnxruntime", "openvino", "tensorrt")
_MISSING_BACKEND = re.compile(r"unable to find (backend library|'libtriton_)", re.IGNORECASE)


def _split_url(url: str) -> tuple[str, int]:
    text = re.sub(r"^(grpc|http)s?://", "", url.strip()).rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise GptTritonError(f"bad Triton URL {url!r}: expected HOST:PORT of its gRPC endpoint, e.g. triton:8001")
    return host, int(port)


class RemoteTriton(TritonServer):
    """A running Triton reached over gRPC at ``url`` (HOST:PORT)."""

    mode = "remote"

    def __init__(
        self,
        url: str,
        native_backends: Iterable[str] | None = None,
        http_url: str | None = None,
        metrics_url: str | None = None,
    ) -> None:
        super().__init__()
        host, port = _split_url(url)
        self.grpc_url = f"{host}:{port}"
        # Triton's conventional layout puts HTTP and metrics next to gRPC (8000/8001/8002).
        self.http_url = http_url or (f"{host}:8000" if port == 8001 else "")
        self.metrics_url = metrics_url or (f"http://{host}:8002/metrics" if port == 8001 else None)
        self._given_backends = frozenset(native_backends) if native_backends is not None else None
        self.native_backends = self._given_backends or frozenset()
        self.repository = None

    def start(self) -> None:
        try:
            live = self.client().is_server_live(client_timeout=LIVENESS_TIMEOUT_S)
        except InferenceServerException as exc:
            self._close_client()
            raise TransientError(f"cannot reach Triton at {self.grpc_url}: {_exception_text(exc)}") from exc
        if not live:
            self._close_client()
            raise TransientError(f"cannot reach Triton at {self.grpc_url}: the server reports it is not live")
        if self._given_backends is None:
            self.native_backends = self.probe_backends()

    def stop(self) -> None:
        self._close_client()  # the server is not ours: leave it running

    def probe_backends(self) -> frozenset[str]:
        """Which native backends the server has. Triton has no API that lists them, so try to load a
        model with a deliberately invalid file on each: a missing backend fails with "unable to find
        backend library", a present one fails while parsing the file. Nothing stays loaded."""
        found = set()
        for backend in PROBE_BACKENDS:
            name = f"gpt_triton_probe_{backend}"
            config = {"name": name, "backend": backend, "max_batch_size": 0,
                      "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1]}],
                      "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}]}
            try:
                self.client().load_model(name, config=json.dumps(config), files={"file:1/model.bin": b"not a model"})
            except InferenceServerException as exc:
                if not _MISSING_BACKEND.search(_exception_text(exc)):
                    found.add(backend)
            else:  # cannot happen with a garbage file, but never leave a probe model behind
                found.add(backend)
            with contextlib.suppress(InferenceServerException):
                self.client().unload_model(name)
        return frozenset(found)

    def load(self, model_dir: Path) -> None:
        """Upload ``model_dir``'s config (as a JSON override) and every version file, then load it."""
        model_dir = Path(model_dir)
        config_path = model_dir / "config.pbtxt"
        if not config_path.is_file():
            raise GptTritonError(f"{model_dir} has no config.pbtxt; write it with gpt_triton.deploy.write_model")
        config = text_format.Parse(config_path.read_text(), mc.ModelConfig())
        config.name = model_dir.name
        files: dict[str, bytes] = {}
        for path in sorted(model_dir.rglob("*")):
            rel = path.relative_to(model_dir)
            if path.is_file() and rel.parts[0].isdigit() and "__pycache__" not in rel.parts:
                files[f"file:{rel.as_posix()}"] = path.read_bytes()
        if not files:
            raise GptTritonError(f"{model_dir} has no version directory with files; write the model first")
        override = json.loads(json_format.MessageToJson(config, preserving_proto_field_name=True))
        self._load_request(model_dir.name, config=override, files=files)

