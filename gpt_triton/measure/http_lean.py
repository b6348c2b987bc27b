"""The lean concurrency-1 loop over HTTP (``measure.protocol: http``): Triton's binary tensor extension on
one keep-alive socket.

Python's gRPC costs about 0.25 ms of client CPU per call on a 48 KiB request (measured here: the
blocking call's C core, not its Python layer), against about 0.16 ms for perf_analyzer's C++ client and
0.07 ms for this loop. On a machine where the client shares cores with Triton that CPU is taken from
the server, so it shows up as latency (issue 16: p50 10% above perf_analyzer's under load). Every
request is encoded once before the window - the HTTP head, the JSON inference header with each input's
``binary_data_size``, the raw tensor bytes - and each response is read by its Content-Length and
left unparsed unless it is an error. Outputs come back binary (``binary_data_output``), as
perf_analyzer asks, so the server does not spend the window writing JSON floats.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import BinaryIO
from urllib.parse import quote

import numpy as np
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

from gpt_triton.measure.sender import Job, Raw, lean_loop


class HttpRequestFailed(Exception):
    """Triton answered with an error status (the request failed; the connection stays usable)."""


def http_request(host: str, model_name: str, payload: dict[str, np.ndarray], outputs: list[str] | None) -> bytes:
    """The wire bytes of one inference request (HTTP/1.1, keep-alive, binary tensors)."""
    inputs, blobs = [], []
    for name, array in payload.items():
        datatype = np_to_triton_dtype(array.dtype)
        if datatype == "BYTES":
            packed = serialize_byte_tensor(array)
            blob = packed.item() if packed.size else b""
        else:
            blob = np.ascontiguousarray(array).tobytes()
        inputs.append({"name": name, "shape": list(array.shape), "datatype": datatype,
                       "parameters": {"binary_data_size": len(blob)}})
        blobs.append(blob)
    header: dict[str, object] = {"inputs": inputs}
    if outputs:
        header["outputs"] = [{"name": n, "parameters": {"binary_data": True}} for n in outputs]
    else:
        header["parameters"] = {"binary_data_output": True}
    head_json = json.dumps(header, separators=(",", ":")).encode()
    body_length = len(head_json) + sum(len(b) for b in blobs)
    head = (f"POST /v2/models/{quote(model_name)}/infer HTTP/1.1\r\nHost: {host}\r\n"
            f"Inference-Header-Content-Length: {len(head_json)}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {body_length}\r\n\r\n").encode()
    return b"".join([head, head_json, *blobs])


class HttpConnection:
    """One keep-alive connection to Triton's HTTP endpoint; reconnects when the server closes it."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        host, _, port = url.removeprefix("http://").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"expected an HTTP endpoint as host:port, got {url!r}")
        self.address = (host, int(port))
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None

    @property
    def host(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def _connect(self) -> None:
        sock = socket.create_connection(self.address, timeout=self.timeout_s)
        # Without TCP_NODELAY a small request's last segment waits for the previous ACK (Nagle + delayed ACK).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._reader = sock, sock.makefile("rb")

    def exchange(self, wire: bytes) -> bytes:
        """Send one request, return its response body; raise :class:`HttpRequestFailed` on an error status."""
        if self._sock is None:
            self._connect()
        assert self._sock is not None and self._reader is not None
        reader = self._reader
        try:
            self._sock.sendall(wire)
            status = reader.readline()
            length, close = None, False
            while True:
                line = reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                key, _, value = line.partition(b":")
                key = key.strip().lower()
                if key == b"content-length":
                    length = int(value)
                elif key == b"connection" and value.strip().lower() == b"close":
                    close = True
            if not status or length is None:
                raise ConnectionError(f"no framed response from Triton at {self.host} (status {status!r})")
            body = reader.read(length)
        except (OSError, ValueError):
            self.close()
            raise
        if close:
            self.close()
        code = status.split(b" ", 2)[1] if status.count(b" ") >= 1 else b""
        if code != b"200":
            try:
                message = json.loads(body).get("error", body[:200].decode(errors="replace"))
            except ValueError:
                message = body[:200].decode(errors="replace")
            raise HttpRequestFailed(f"HTTP {code.decode(errors='replace')}: {message}")
        return body

    def close(self) -> None:
        if self._sock is not None:
            try:
                if self._reader is not None:
                    self._reader.close()
                self._sock.close()
            finally:
                self._sock, self._reader = None, None


def drive_lean_http(job: Job, before_start: Callable[[], float | None] | None = None) -> Raw:
    """Closed loop at concurrency 1 over HTTP (``job.http_url``), the same loop as
    :func:`gpt_triton.measure.sender.drive_lean`."""
    if job.offsets is not None or job.concurrency != 1 or not job.http_url:
        raise ValueError("drive_lean_http runs a closed loop at concurrency 1 on a job with an http_url only")
    connection = HttpConnection(job.http_url)
    try:
        wire = [http_request(connection.host, job.model_name, p, job.outputs) for p in job.payloads]
        return lean_loop(job, lambda index: connection.exchange(wire[index % len(wire)]),
                         (HttpRequestFailed, OSError), str, before_start)
    finally:
        connection.close()
