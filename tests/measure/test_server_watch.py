"""A window that fails because the server died ends the stage (exit 3), and fails no candidate."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from delay_model import write_delay_model
from test_harness import cand, spec

from gpt_triton.core.errors import EXIT_TRANSIENT, GptTritonError, ServerDiedError
from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.core.spec import ObjectiveSpec
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.driver import WindowSample
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.perf_analyzer import load_client
from gpt_triton.measure.server_watch import ServerWatch
from gpt_triton.server import EmbeddedTriton
from gpt_triton.server._embedded import _process_group

DEAD = "the embedded Triton (pid 4242) was killed by signal 11 (SIGSEGV); its log: /run/triton-remeasure.log"


class ScriptedClient(LoadClient):
    """Each window raises ``failure`` if set, else returns ``errors`` failed requests out of 10."""

    def __init__(self, failure: GptTritonError | None = None, errors: int = 0) -> None:
        self.failure, self.errors = failure, errors

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        if self.failure is not None:
            raise self.failure
        result = WindowResult(duration_s=duration_s, requests=10, errors=self.errors, throughput=1.0, p50_ms=1.0,
                              p90_ms=1.0, p99_ms=1.0, mean_ms=1.0)
        return WindowSample(result=result, latencies_ms=np.ones(10 - self.errors))


class ExitNotes:
    """A server's exit_note: ``note`` once dead, and the waits it was asked with."""

    def __init__(self, note: str | None) -> None:
        self.note = note
        self.asked: list[float] = []

    def __call__(self, wait_s: float) -> str | None:
        self.asked.append(wait_s)
        return self.note


def _window(client: LoadClient) -> WindowSample:
    return client.window("127.0.0.1:1", "c_winner_r", [{"x": np.zeros((1, 4), np.float32)}], LoadProfile(), 0.1)


def test_a_failed_window_on_a_dead_server_is_the_server_s_death() -> None:
    socket_closed = GptTritonError("Triton at 127.0.0.1:1 failed for model 'c_winner_r': Stream removed (Socket closed)")
    notes = ExitNotes(DEAD)
    with pytest.raises(ServerDiedError) as caught:
        _window(ServerWatch(ScriptedClient(failure=socket_closed), notes))
    assert caught.value.exit_code == EXIT_TRANSIENT  # a Job retries it; exit 2 said "fix the input"
    assert str(caught.value).startswith(DEAD) and "'c_winner_r'" in str(caught.value)
    assert caught.value.__cause__ is socket_closed
    assert notes.asked and notes.asked[0] > 0  # its sockets close before its exit shows: it was given a moment


def test_a_failed_window_on_a_live_server_stays_the_candidate_s() -> None:
    refused = GptTritonError("Triton at 127.0.0.1:1 failed for model 'c_winner_r': unexpected shape")
    with pytest.raises(GptTritonError) as caught:
        _window(ServerWatch(ScriptedClient(failure=refused), ExitNotes(None)))
    assert caught.value is refused and not isinstance(caught.value, ServerDiedError)


def test_only_a_window_whose_every_request_failed_asks_the_server() -> None:
    with pytest.raises(ServerDiedError):  # a client that counts failed requests instead of raising
        _window(ServerWatch(ScriptedClient(errors=10), ExitNotes(DEAD)))
    for errors in (0, 3):  # a working window, or a few failed requests, does not wait on the server
        notes = ExitNotes(DEAD)
        assert _window(ServerWatch(ScriptedClient(errors=errors), notes)).result.errors == errors
        assert notes.asked == []


@pytest.mark.slow
def test_a_server_killed_mid_run_stops_the_run_and_fails_no_candidate(tmp_path: Path, requests_x: list) -> None:
    """The real embedded Triton, killed after the first window: the measurer raises the server's death
    (how it ended, its log, the model being measured) instead of failing the candidates left."""
    with EmbeddedTriton(tmp_path / "repo", log_path=tmp_path / "triton-remeasure.log") as server:
        assert server.repository is not None
        for name in ("watch_a", "watch_b"):
            server.load(write_delay_model(server.repository, name, {1: 0.0}))
        assert server.exit_note() is None  # alive

        def kill_after_first(cid: str, load: str, round_no: int, result: WindowResult, latencies: object) -> None:
            assert server.pid is not None
            os.kill(server.pid, signal.SIGKILL)

        client = ServerWatch(load_client("builtin", 1, "grpc", None), server.exit_note)
        measurer = Measurer(server.grpc_url, requests_x, spec(), ObjectiveSpec(metric="p50"), client=client,
                            on_window=kill_after_first)
        a, b = cand("a", "watch_a"), cand("b", "watch_b")
        with pytest.raises(ServerDiedError) as caught:
            measurer.measure([a, b])
        pid = server.pid
    assert pid is not None and not _process_group(pid)  # stopping the dead server left none of its stubs
    message = str(caught.value)
    assert f"the embedded Triton (pid {pid}) was killed by signal 9 (SIGKILL)" in message
    assert str(tmp_path / "triton-remeasure.log") in message
    assert "'watch_b'" in message  # a's window ran and was recorded; b's found the server gone
    assert a.status == b.status == "deployed"  # no candidate was failed for it
