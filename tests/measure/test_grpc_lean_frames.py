"""The lean gRPC connection against a scripted HTTP/2 peer: the frames RFC 9113 allows a server to send
that Triton does not send on demand (a small send window, mid-call SETTINGS and PING, padded DATA,
CONTINUATION, trailers-only errors, RST_STREAM, GOAWAY, a closed socket). The peer checks what the
client sent back; the real Triton is in test_grpc_lean.py."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

import hpack
import pytest

from gpt_triton.measure.grpc_lean import GrpcConnection, GrpcRequestFailed

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


class Peer:
    """One accepted connection, read frame by frame."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.acks: list[str] = []  # the client's SETTINGS and PING acknowledgements, in order

    def read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            data = self.sock.recv(65536)
            assert data, "the client closed the connection"
            self.buffer += data
        out, self.buffer = self.buffer[:count], self.buffer[count:]
        return out

    def frame(self) -> tuple[int, int, int, bytes]:
        head = self.read(9)
        payload = self.read(int.from_bytes(head[:3], "big"))
        if head[3] in (SETTINGS, PING) and head[4] & ACK:
            self.acks.append("settings" if head[3] == SETTINGS else payload.decode())
        return head[3], head[4], int.from_bytes(head[5:9], "big"), payload

    def until(self, kind: int) -> tuple[int, int, bytes]:
        while True:
            got, flags, stream, payload = self.frame()
            if got == kind:
                return flags, stream, payload

    def request(self) -> tuple[int, bytes]:
        """A call's HEADERS and all its DATA: (stream, the message's bytes with their 5-byte prefix)."""
        _, stream, block = self.until(HEADERS)
        assert (b":path", b"/inference.GRPCInferenceService/ModelInfer") in self.decoder.decode(block, raw=True)
        body = b""
        while True:
            flags, on, payload = self.until(DATA)
            assert on == stream
            body += payload
            if flags & END_STREAM:
                return stream, body

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def headers(self, pairs: list[tuple[str, str]]) -> bytes:
        return self.encoder.encode(pairs)  # with indexing: the client must follow the dynamic table

    def respond(self, stream: int, message: bytes) -> None:
        self.send(frame(HEADERS, END_HEADERS, stream, self.headers([(":status", "200"), ("content-type", "application/grpc")])),
                  frame(DATA, 0, stream, b"\x00" + struct.pack(">I", len(message)) + message),
                  frame(HEADERS, END_STREAM | END_HEADERS, stream, self.headers([("grpc-status", "0")])))


@pytest.fixture
def scripted() -> Iterator[Callable[[Callable[[Peer, int], None]], str]]:
    """``scripted(script)``: an endpoint whose n-th accepted connection runs ``script(peer, n)``;
    failures inside the script are raised here after the test."""
    server = socket.create_server(("127.0.0.1", 0))
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def start(script: Callable[[Peer, int], None]) -> str:
        def serve() -> None:
            for n in range(2):
                try:
                    sock, _ = server.accept()
                except OSError:
                    return
                peer = Peer(sock)
                try:
                    assert peer.read(len(PREFACE)) == PREFACE
                    script(peer, n)
                except BaseException as exc:  # reported by the fixture, after the test
                    errors.append(exc)
                finally:
                    sock.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return f"127.0.0.1:{server.getsockname()[1]}"

    try:
        yield start
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        for thread in threads:
            thread.join(timeout=10)
            assert not thread.is_alive()
    if errors:
        raise errors[0]


def test_flow_control_settings_ping_padding_and_continuation(scripted: Callable[..., str]) -> None:
    message = bytes(range(100))
    answer = b"response-message"
    seen: dict[str, object] = {}

    def script(peer: Peer, n: int) -> None:
        # A 10-byte send window: learnt during the first call, it holds the second to 10 bytes at first.
        peer.send(frame(SETTINGS, 0, 0, struct.pack(">HIHI", 4, 10, 5, 16384)))
        stream, _ = peer.request()
        peer.respond(stream, b"first")
        _, stream, _ = peer.until(HEADERS)
        flags, _, first = peer.until(DATA)
        seen["first data"] = (len(first), flags & END_STREAM)
        peer.send(frame(PING, 0, 0, b"12345678"), frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", 1000)))
        body = first
        while True:
            flags, _, payload = peer.until(DATA)
            body += payload
            if flags & END_STREAM:
                break
        seen["body"], seen["acks"] = body, list(peer.acks)
        framed = b"\x00" + struct.pack(">I", len(answer)) + answer
        head = peer.headers([(":status", "200"), ("content-type", "application/grpc")])
        trailers = peer.headers([("grpc-status", "0"), ("grpc-message", "")])  # encoded in the order sent
        peer.send(frame(HEADERS, END_HEADERS, stream, head),
                  frame(DATA, PADDED, stream, bytes([3]) + framed[:7] + b"\x00\x00\x00"),  # padded, split in two
                  frame(DATA, 0, stream, framed[7:]),
                  frame(HEADERS, END_STREAM, stream, trailers[:2]),  # the trailers split by CONTINUATION
                  frame(CONTINUATION, END_HEADERS, stream, trailers[2:]))

    connection = GrpcConnection(scripted(script), timeout_s=10)
    try:
        assert connection.call(b"x") == b"first"
        assert connection.call(message) == answer
    finally:
        connection.close()
    assert seen["first data"] == (10, 0)  # held to the 10-byte window, not ended
    assert seen["body"] == b"\x00" + struct.pack(">I", len(message)) + message
    assert seen["acks"] == ["settings", "12345678"]


def test_trailers_only_errors_and_resets_fail_the_call_goaway_fails_the_connection(
        scripted: Callable[..., str]) -> None:
    def script(peer: Peer, n: int) -> None:
        peer.send(frame(SETTINGS, 0, 0))
        if n == 1:  # the reconnection after GOAWAY: answer normally
            stream, _ = peer.request()
            peer.respond(stream, b"ok")
            return
        stream, _ = peer.request()
        peer.send(frame(HEADERS, END_STREAM | END_HEADERS, stream, peer.headers(
            [(":status", "200"), ("grpc-status", "3"), ("grpc-message", "unexpected%20input%20'nope'")])))
        stream, _ = peer.request()
        peer.send(frame(RST_STREAM, 0, stream, struct.pack(">I", 2)))
        stream, _ = peer.request()
        peer.send(frame(GOAWAY, 0, 0, struct.pack(">II", stream, 0)))

    connection = GrpcConnection(scripted(script), timeout_s=10)
    try:
        with pytest.raises(GrpcRequestFailed, match="gRPC status 3: unexpected input 'nope'"):
            connection.call(b"a")
        with pytest.raises(GrpcRequestFailed, match="reset the stream"):
            connection.call(b"b")  # the same connection, a new stream
        with pytest.raises(ConnectionError, match="GOAWAY"):
            connection.call(b"c")
        assert connection.call(b"d") == b"ok"  # a new connection
    finally:
        connection.close()


def test_a_connection_the_server_closes_is_an_os_error_and_the_next_call_reconnects(
        scripted: Callable[..., str]) -> None:
    accepted: list[int] = []
    connection = GrpcConnection(scripted(lambda peer, n: accepted.append(n)), timeout_s=5)  # then closes
    try:
        for _ in range(2):
            with pytest.raises(OSError):
                connection.call(b"m")
    finally:
        connection.close()
    assert accepted == [0, 1]  # the failed socket was dropped, not reused
