"""The lean concurrency-1 loop's gRPC connection: one unary call at a time on a plain HTTP/2 socket.

Python's gRPC (grpcio) spends more client CPU per blocking call than perf_analyzer's C++ client: on the
conv_attention variant tunes select (p50 about 1.15 ms) grpcio's loop ran 1.067x perf_analyzer's p50 on
the same server, and no channel option, poll strategy or GC setting closed it, nor did the pure-Python
``h2`` state machine (1.16x). At concurrency 1 the client needs almost none of what those stacks do:
one stream at a time, every request serialised before the window. So the request's HEADERS block is
encoded once (by the ``hpack`` library, literals never indexed, so the same bytes are valid on every
stream) and a call frames the message, sends, and reads frames until its stream ends. The response
headers go through ``hpack``'s decoder (the server indexes them, so its dynamic table must be
followed); the message is returned unparsed. ``benchmarks/lean_grpc.py``: 1.001x perf_analyzer's p50.

What a general client does that this one must still do (RFC 9113): acknowledge the server's SETTINGS
and PINGs, follow its frame size and send windows (a large request waits for WINDOW_UPDATE), open the
receive windows wide and top the connection's up, and treat GOAWAY, RST_STREAM and a non-zero
``grpc-status`` as failures. A failed call leaves the connection usable unless the socket itself failed;
then the next call reconnects.
"""

from __future__ import annotations

import socket
import struct
from urllib.parse import unquote

import hpack

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"  # Triton's unary inference method
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_SETTINGS_ENABLE_PUSH, _SETTINGS_INITIAL_WINDOW, _SETTINGS_MAX_FRAME = 2, 4, 5
_MAX_WINDOW = 2**31 - 1
_DEFAULT_WINDOW, _DEFAULT_FRAME = 65535, 16384
_LAST_STREAM_ID = 2**31 - 1
_CANCEL = 0x8  # RST_STREAM error code


class GrpcRequestFailed(Exception):
    """The server ended the call with a non-zero ``grpc-status`` or reset its stream (the request failed;
    the connection stays usable)."""


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload


def _unpadded(flags: int, payload: bytes, priority: bool = False) -> bytes:
    if flags & _PADDED:
        payload = payload[1:len(payload) - payload[0]]
    return payload[5:] if priority and flags & _PRIORITY else payload


class GrpcConnection:
    """One HTTP/2 connection to Triton's gRPC endpoint (``host:port``) for unary calls of ``method``."""

    def __init__(self, url: str, method: str = MODEL_INFER,
                 timeout_s: float = 60.0) -> None:
        authority = url.removeprefix("grpc://").removeprefix("dns:///")
        host, _, port = authority.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"expected a gRPC endpoint as host:port, got {url!r}")
        self.address = (host.strip("[]"), int(port))
        self.timeout_s = timeout_s
        literal = hpack.NeverIndexedHeaderTuple  # the same bytes are valid on every stream: no table entries
        self._block = hpack.Encoder().encode([
            (":method", "POST"), (":scheme", "http"), literal(":path", method), literal(":authority", authority),
            literal("content-type", "application/grpc"), literal("te", "trailers")])
        self._sock: socket.socket | None = None

    def _connect(self) -> None:
        sock = socket.create_connection(self.address, timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buffer, self._decoder = sock, bytearray(), hpack.Decoder()
        self._next_stream, self._unacknowledged = 1, 0
        self._peer_window, self._peer_frame, self._connection_window = _DEFAULT_WINDOW, _DEFAULT_FRAME, _DEFAULT_WINDOW
        settings = struct.pack(">HIHI", _SETTINGS_ENABLE_PUSH, 0, _SETTINGS_INITIAL_WINDOW, _MAX_WINDOW)
        sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0, settings)
                     + _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">I", _MAX_WINDOW - _DEFAULT_WINDOW)))

    def _read(self, count: int) -> bytes:
        assert self._sock is not None
        while len(self._buffer) < count:
            data = self._sock.recv(1 << 18)
            if not data:
                raise ConnectionError(f"Triton at {self.address[0]}:{self.address[1]} closed the gRPC connection")
            self._buffer += data
        out = bytes(self._buffer[:count])
        del self._buffer[:count]
        return out

    def call(self, message: bytes) -> bytes:
        """Send one serialised request, return the serialised response; raise :class:`GrpcRequestFailed`
        when the server fails the call, ``OSError`` when the connection does."""
        if self._sock is None or self._next_stream > _LAST_STREAM_ID:
            self.close()
            self._connect()
        try:
            return self._call(message)
        except OSError:
            self.close()
            raise

    def _call(self, message: bytes) -> bytes:
        assert self._sock is not None
        stream = self._next_stream
        self._next_stream += 2
        body = b"\x00" + struct.pack(">I", len(message)) + message
        out = [_frame(_HEADERS, _END_HEADERS, stream, self._block)]
        if self._unacknowledged > _MAX_WINDOW // 2:  # the receive window is wide; top it up before it runs dry
            out.append(_frame(_WINDOW_UPDATE, 0, 0, struct.pack(">I", self._unacknowledged)))
            self._unacknowledged = 0
        window, sent, ended = self._peer_window, 0, False
        chunks: list[bytes] = []
        headers: list[tuple[bytes, bytes]] = []
        block, block_flags = b"", 0
        while True:
            while sent < len(body) and not ended:
                room = min(window, self._connection_window, self._peer_frame, len(body) - sent)
                if room <= 0:
                    break  # blocked by flow control: read until the server opens its window
                last = sent + room == len(body)
                out.append(_frame(_DATA, _END_STREAM if last else 0, stream, body[sent:sent + room]))
                sent, window, self._connection_window = sent + room, window - room, self._connection_window - room
            if out:
                self._sock.sendall(b"".join(out))
                out = []
            if ended:
                if sent < len(body):  # the server answered before taking the whole request: stop sending
                    self._sock.sendall(_frame(_RST_STREAM, 0, stream, struct.pack(">I", _CANCEL)))
                break
            head = self._read(9)
            kind, flags, on = head[3], head[4], int.from_bytes(head[5:9], "big") & _LAST_STREAM_ID
            payload = self._read(int.from_bytes(head[:3], "big"))
            if kind == _DATA:
                self._unacknowledged += len(payload)
                if on == stream:
                    chunks.append(_unpadded(flags, payload))
                    ended = bool(flags & _END_STREAM)
            elif kind in (_HEADERS, _CONTINUATION):
                if kind == _HEADERS:
                    block, block_flags = _unpadded(flags, payload, priority=True), flags
                else:
                    block += payload
                if flags & _END_HEADERS:
                    decoded = self._decoder.decode(block, raw=True)
                    if on == stream:
                        headers += decoded  # type: ignore[arg-type]
                        ended = bool(block_flags & _END_STREAM)
            elif kind == _SETTINGS and not flags & _ACK:
                for offset in range(0, len(payload) - 5, 6):
                    ident, value = struct.unpack_from(">HI", payload, offset)
                    if ident == _SETTINGS_INITIAL_WINDOW:  # applies to open streams as a delta
                        window += value - self._peer_window
                        self._peer_window = value
                    elif ident == _SETTINGS_MAX_FRAME:
                        self._peer_frame = value
                out.append(_frame(_SETTINGS, _ACK, 0))
            elif kind == _WINDOW_UPDATE:
                increment = struct.unpack(">I", payload)[0] & _LAST_STREAM_ID
                if on == 0:
                    self._connection_window += increment
                elif on == stream:
                    window += increment
            elif kind == _PING and not flags & _ACK:
                out.append(_frame(_PING, _ACK, 0, payload))
            elif kind == _RST_STREAM and on == stream:
                raise GrpcRequestFailed(f"the server reset the stream (HTTP/2 error {struct.unpack('>I', payload)[0]})")
            elif kind == _GOAWAY:
                raise ConnectionError(f"Triton at {self.address[0]}:{self.address[1]} sent GOAWAY "
                                      f"(HTTP/2 error {struct.unpack_from('>I', payload, 4)[0]})")
        return _message(dict(headers), b"".join(chunks))

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


def _message(headers: dict[bytes, bytes], data: bytes) -> bytes:
    """The response message of a finished call, or :class:`GrpcRequestFailed` with the server's words."""
    http_status, status = headers.get(b":status", b""), headers.get(b"grpc-status")
    if http_status != b"200":
        raise GrpcRequestFailed(f"HTTP status {http_status.decode(errors='replace')} from the gRPC endpoint")
    if status != b"0":
        text = unquote(headers.get(b"grpc-message", b"").decode(errors="replace"))
        raise GrpcRequestFailed(f"gRPC status {(status or b'missing').decode(errors='replace')}: {text}")
    if len(data) < 5 or data[0] != 0:
        raise GrpcRequestFailed("the response is not one uncompressed gRPC message")
    return data[5:5 + int.from_bytes(data[1:5], "big")]
