"""The launcher interface shared by the embedded and the remote Triton.

A :class:`TritonServer` is a context manager: ``with EmbeddedTriton(repo) as server:`` starts it and
stops it whatever happens inside. Both modes talk to Triton only through tritonclient (gRPC for the
model-repository API and inference, HTTP only for the embedded readiness probe), so the rest of the
tool never needs to know which mode it runs in.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from gpt_triton.core.errors import GptTritonError

# How long Triton may take to finish unloading a model (the python stub process has to exit).
UNLOAD_TIMEOUT_S = 30.0
# Generous: a 25 MB ONNX model opened by OpenVINO with a cold cache takes a few seconds on 2 cores.
LOAD_TIMEOUT_S = 300.0


def clean_reason(name: str, reason: str) -> str:
    """Triton's load error without the parts that repeat what we say or only locate the adapter's
    code: the "load failed for model 'x': version 1 is at UNAVAILABLE state:" prefix and the python
    backend's " At: file(line): function" traceback tail."""
    text = " ".join(reason.split())
    text = re.sub(rf"^load failed for model '{re.escape(name)}': ", "", text)
    text = re.sub(r"^version \d+ is at UNAVAILABLE state: ", "", text)
    text = re.sub(r" At: \S+\(\d+\): .*$", "", text)
    return text.rstrip(" ;") or "no reason given"


_Server = TypeVar("_Server", bound="TritonServer")


class ModelLoadError(GptTritonError):
    """A candidate failed to load; the message carries the server's reason. The server keeps running."""

    def __init__(self, name: str, reason: str) -> None:
        self.model_name = name
        self.reason = clean_reason(name, reason)
        super().__init__(f"Triton could not load model {name!r}: {self.reason}")


def _exception_text(exc: BaseException) -> str:
    if isinstance(exc, InferenceServerException):
        return str(exc.message() or exc)
    return str(exc)


class TritonServer(ABC):
    """One Triton, local or remote. Subclasses implement start, stop and load."""

    mode: Literal["embedded", "remote"]
    grpc_url: str = ""
    http_url: str = ""
    metrics_url: str | None = None
    native_backends: frozenset[str] = frozenset()
    repository: Path | None = None
    # Load requests deploy keeps in flight at once: tritonserver's own --model-load-thread-count default,
    # so no request waits on the server that a thread of its own would not.
    parallel_loads: int = 4

    def __init__(self) -> None:
        self._client: grpcclient.InferenceServerClient | None = None
        self._client_lock = threading.Lock()  # load generators call client() from many threads

    # -- lifecycle -------------------------------------------------------------------------------
    @abstractmethod
    def start(self) -> None:
        """Make the server usable (start it, or check that it is reachable)."""

    @abstractmethod
    def stop(self) -> None:
        """Release what start() acquired. Idempotent."""

    @abstractmethod
    def load(self, model_dir: Path) -> None:
        """Load (or reload) the model in ``model_dir`` = ``<name>/{config.pbtxt, <version>/...}``."""

    def exit_note(self, wait_s: float = 0.0) -> str | None:
        """How this run's own server ended, when it has (waiting up to ``wait_s`` for it to finish dying:
        its sockets close before the kernel reports its exit); None while it lives. A remote server is not
        this run's process: its end shows only as failed requests, so the default says nothing."""
        return None

    def __enter__(self: _Server) -> _Server:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- shared operations over gRPC --------------------------------------------------------------
    def client(self) -> grpcclient.InferenceServerClient:
        """The server's shared gRPC client (one channel, thread-safe; reused so requests skip the
        connection set-up). Closed by stop(); do not close it yourself."""
        with self._client_lock:
            if self._client is None:
                if not self.grpc_url:
                    raise GptTritonError("Triton server is not started; use it inside `with server:` or call start()")
                self._client = grpcclient.InferenceServerClient(self.grpc_url)
            return self._client

    def _close_client(self) -> None:
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # closing a channel to a dead server must not mask the real error
                client.close()

    def version(self) -> str:
        metadata = self.client().get_server_metadata(as_json=True)
        return str(metadata.get("version", ""))

    def model_state(self, name: str) -> tuple[str, str]:
        """(state, reason) from the repository index; ("", "") when the server does not know the model."""
        index = self.client().get_model_repository_index(as_json=True)
        states = [m for m in index.get("models", []) if m.get("name") == name]
        if not states:
            return "", ""
        # Several versions may be listed; any version still READY/LOADING/UNLOADING counts.
        for wanted in ("UNLOADING", "LOADING", "READY"):
            for entry in states:
                if entry.get("state") == wanted:
                    return wanted, str(entry.get("reason", ""))
        return str(states[0].get("state", "")), str(states[0].get("reason", ""))

    def unload(self, name: str, timeout_s: float = UNLOAD_TIMEOUT_S) -> None:
        """Unload ``name`` and wait until Triton has really released it (its stub process exited)."""
        self.unload_many([name], timeout_s)

    def unload_many(self, names: Sequence[str], timeout_s: float = UNLOAD_TIMEOUT_S) -> None:
        """Ask Triton to unload every one of ``names``, then wait until each is released: the stub
        processes exit together instead of one after another (~1.3 s each here)."""
        for name in names:
            try:
                self.client().unload_model(name)
            except InferenceServerException as exc:
                raise GptTritonError(f"Triton could not unload model {name!r}: {_exception_text(exc)}") from exc
        deadline = time.monotonic() + timeout_s
        for name in names:
            self._wait_released(name, deadline, timeout_s)

    def _wait_released(self, name: str, deadline: float, timeout_s: float) -> None:
        while True:
            state, _ = self.model_state(name)
            # Models loaded with a config override are missing from the index: readiness covers them.
            busy = state in ("READY", "LOADING", "UNLOADING") or (not state and self.client().is_model_ready(name))
            if not busy and self._released(name):
                return
            if time.monotonic() > deadline:
                raise GptTritonError(f"model {name!r} is still {state or 'loaded'} {timeout_s:.0f} s after unload")
            time.sleep(0.02)  # polling interval of a condition with a deadline, not synchronisation

    def _released(self, name: str) -> bool:
        """Whether the server has freed the model's resources; the embedded server also checks that
        the model's python stub processes are gone (Triton reports an unload before they exit)."""
        return True

    def _load_request(self, name: str, config: dict[str, Any] | None = None, files: dict[str, bytes] | None = None) -> None:
        """Ask Triton to load ``name``; a failure becomes ModelLoadError with the server's reason."""
        try:
            self.client().load_model(
                name,
                config=json.dumps(config) if config is not None else None,
                files=files,
                client_timeout=LOAD_TIMEOUT_S,
            )
        except InferenceServerException as exc:
            raise ModelLoadError(name, _exception_text(exc)) from exc
        if not self.client().is_model_ready(name):
            state, reason = self.model_state(name)
            raise ModelLoadError(name, reason or f"model is {state or 'unknown'} after load")
