"""EmbeddedTriton: the conformance suite plus process hygiene (no leftovers, ephemeral ports, errors)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from delay_model import write_delay_model

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.routes import Route
from gpt_triton.deploy import write_model
from gpt_triton.server import EmbeddedTriton, TritonServer, last_error_line, python_backend_dir, triton_binary
from gpt_triton.server._embedded import _process_group, last_death_note
from gpt_triton.testing.conformance.servers import ServerConformance, artifact_for, deploy, unique


def _process_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _gone(processes: list[psutil.Process]) -> bool:
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class TestEmbeddedConformance(ServerConformance):
    @pytest.fixture
    def server(self, triton_server: EmbeddedTriton) -> TritonServer:
        return triton_server


def test_binary_and_backend_dir_exist(tmp_path: Path) -> None:
    assert triton_binary().is_file()
    backends = python_backend_dir(tmp_path / "cache")
    assert (backends / "python" / "triton_python_backend_stub").is_file()
    assert (backends / "python" / "libtriton_python.so").is_file()
    assert python_backend_dir(tmp_path / "cache") == backends  # cached: the second call copies nothing
    assert not [p for p in backends.parent.iterdir() if p.name.startswith(".backends-")]


@pytest.mark.slow
def test_stop_leaves_no_process_and_is_idempotent(tmp_path: Path, tiny_model_path: Path) -> None:
    server = EmbeddedTriton(tmp_path / "repo")
    server.start()
    try:
        # Load a model so a python stub process exists too: it must go with the server.
        deploy(server, tmp_path / "staging", "tiny", tiny_model_path, artifact_for(tiny_model_path, "onnxruntime", {}))
        tree = _process_tree(server.pid or 0)
        assert len(tree) >= 2
    finally:
        server.stop()
    assert _gone(tree)
    server.stop()  # idempotent


@pytest.mark.slow
def test_exception_inside_with_stops_server(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), EmbeddedTriton(tmp_path / "repo") as server:
        pid = server.pid or 0
        assert psutil.pid_exists(pid)
        raise KeyboardInterrupt  # what Ctrl-C raises inside the pipeline's `with`
    assert not _alive(pid)


@pytest.mark.slow
def test_two_servers_use_distinct_ephemeral_ports(tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    with EmbeddedTriton(tmp_path / "repo") as other:
        urls = [triton_server.grpc_url, triton_server.http_url, other.grpc_url, other.http_url]
        ports = {int(url.rsplit(":", 1)[1]) for url in urls}
        assert len(ports) == 4
        assert not ports & {8000, 8001, 8002}  # never Triton's fixed defaults
        assert other.metrics_url and other.metrics_url.startswith("http://127.0.0.1:")


@pytest.mark.slow
def test_failed_start_reports_the_server_reason(tmp_path: Path) -> None:
    server = EmbeddedTriton(tmp_path / "repo", workdir=tmp_path / "work", extra_args=["--model-control-mode=nonsense"])
    started = time.monotonic()
    with pytest.raises(GptTritonError, match="tritonserver exited during start-up: invalid argument for --model-control-mode"):
        server.start()
    assert time.monotonic() - started < 30
    assert server.pid is None  # nothing left running
    assert server.log_path == tmp_path / "work" / "tritonserver.log"
    assert "--model-control-mode" in server.log_path.read_text()  # log kept


@pytest.mark.slow
def test_load_from_inside_the_repository_and_unload_waits_for_the_stub(
    triton_server: EmbeddedTriton, tiny_model_path: Path
) -> None:
    assert triton_server.repository is not None
    name = unique("inrepo")
    info = inspect_model(tiny_model_path)
    write_model(triton_server.repository, name, info, resolve_shapes(info, {}),
                artifact_for(tiny_model_path, "onnxruntime", {}), Route(family="serving"), "python")
    triton_server.load(triton_server.repository / name)
    marker = str(triton_server.repository / name)
    stubs = [p for p in _process_tree(triton_server.pid or 0) if any(marker in a for a in p.cmdline())]
    assert stubs, "the model's python stub should be running"
    triton_server.unload(name)
    assert _gone(stubs)
    state, reason = triton_server.model_state(name)
    assert state == "UNAVAILABLE" and "unloaded" in reason


_ORPHAN_SCRIPT = """
import os, sys
from pathlib import Path
from gpt_triton.server import EmbeddedTriton
server = EmbeddedTriton(Path(sys.argv[1]), workdir=Path(sys.argv[2]))  # a killed parent cannot remove it
server.start()
print(server.pid, flush=True)
os.kill(os.getpid(), 9)  # die without running stop() or atexit
"""


@pytest.mark.slow
def test_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", _ORPHAN_SCRIPT, str(tmp_path / "repo"), str(tmp_path / "work")],
                           capture_output=True, text=True, timeout=120)
    pid = int(child.stdout.split()[0])
    try:
        deadline = time.monotonic() + 30
        while _alive(pid):
            assert time.monotonic() < deadline, "tritonserver outlived its killed parent"
            time.sleep(0.05)  # polling a condition with a deadline
    finally:
        if _alive(pid):
            psutil.Process(pid).kill()


@pytest.mark.slow
def test_the_server_is_started_without_a_fork_time_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A preexec_fn makes Python fork() and run every loaded C library's fork handlers in the child before
    exec; gRPC's failed there once in CI and the server never started. The parent-death signal is asked
    for by the started interpreter instead (test_server_dies_with_a_killed_parent checks it still works)."""
    import os
    import subprocess
    import sys

    import gpt_triton.server._embedded as embedded

    started: list[tuple[list[str], dict]] = []
    popen = subprocess.Popen

    def recording(command: list[str], **kwargs: object) -> subprocess.Popen:
        started.append((command, kwargs))
        return popen(command, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(embedded.subprocess, "Popen", recording)
    with EmbeddedTriton(tmp_path / "repo") as server:
        assert server.client().is_server_live()
        assert psutil.Process(server.pid).name() == "tritonserver"  # the interpreter became it
    command, kwargs = started[0]
    assert kwargs.get("preexec_fn") is None and command[0] == sys.executable
    code_at = command.index("-c")  # the code, this process's pid (the parent to die with), then tritonserver
    assert command[code_at + 2] == str(os.getpid()) and command[code_at + 3] == str(triton_binary())


@pytest.mark.slow
def test_port_clash_is_retried_on_fresh_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from gpt_triton.server import _embedded

    real_free_ports = _embedded._free_ports
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = int(taken.getsockname()[1])
        calls: list[list[int]] = []

        def first_attempt_collides(count: int) -> list[int]:
            ports = real_free_ports(count)
            if not calls:
                ports[1] = held  # the gRPC port someone else bound after our probe
            calls.append(ports)
            return ports

        monkeypatch.setattr(_embedded, "_free_ports", first_attempt_collides)
        with EmbeddedTriton(tmp_path / "repo", log_path=tmp_path / "triton.log") as server:
            assert len(calls) == 2
            assert server.grpc_url == f"127.0.0.1:{calls[1][1]}" and calls[1][1] != held
            assert server.client().is_server_live()
        assert "already in use" in (tmp_path / "triton.log").read_text()


def test_the_reason_skips_grpc_shutdown_noise(tmp_path: Path) -> None:
    """gRPC may log an epoll error after Triton's own reason on a failed start; the reason is Triton's."""

    log = tmp_path / "tritonserver.log"
    log.write_text(
        "E1203 23:19:01.123 4242 main.cc:123] invalid argument for --model-control-mode\n"
        "E1203 23:19:01.124 4243 ev_epoll1_linux.cc:88] (event_engine) Epoll1Poller:0x55 encountered epoll_wait "
        "error: Bad file descriptor\n"
    )
    assert last_error_line(log) == "invalid argument for --model-control-mode"


def test_the_death_note_is_what_the_server_printed_as_it_died(tmp_path: Path) -> None:
    """2026-12-06, a re-measure's server: its last E line was start-up noise, its death unprefixed lines."""
    log = tmp_path / "triton-remeasure.log"
    log.write_text(
        'E1206 14:04:32.782079 5854 server.cc:241] "CudaDriverHelper has not been initialized."\n'
        'I1206 14:06:44.419455 5854 model_lifecycle.cc:839] "successfully loaded \'c_70fde24c900c_r\'"\n'
        "Signal (11) received.\n"
        " 0# 0x000055D7AF0B152D in /opt/tritonserver/bin/tritonserver\n"
        "terminate called after throwing an instance of 'boost::interprocess::lock_exception'\n"
        "  what():  boost::interprocess::lock_exception\n"
        "I1206 14:08:41.564840 6006 pb_stub.cc:2145]  Non-graceful termination detected. \n")
    assert last_death_note(log) == ("Signal (11) received.; terminate called after throwing an instance of "
                                    "'boost::interprocess::lock_exception'; what(): boost::interprocess::lock_exception")
    assert last_error_line(log) == '"CudaDriverHelper has not been initialized."'  # why it is not used there
    log.write_text('I1206 14:06:44.419455 5854 model_lifecycle.cc:839] "successfully loaded"\n')
    assert last_death_note(log) == "" and last_death_note(tmp_path / "missing.log") == ""


@pytest.mark.slow
def test_stopping_a_server_that_died_mid_request_leaves_none_of_its_stubs(tmp_path: Path) -> None:
    """A tune whose server was sent SIGSEGV (2026-12-06) left the stub of the model under load running: it had
    been orphaned, so it was no longer the server's child. stop() finds it by the server's process group."""
    started = tmp_path / "started"
    with EmbeddedTriton(tmp_path / "repo") as server:
        assert server.repository is not None and server.pid is not None
        model = write_delay_model(server.repository, "stuck", {1: 60.0})
        code = (model / "1" / "model.py").read_text()
        (model / "1" / "model.py").write_text(code.replace(
            "time.sleep(DELAY_S)", f"open({str(started)!r}, 'w').close(); time.sleep(DELAY_S)"))
        server.load(model)
        client = grpcclient.InferenceServerClient(server.grpc_url)
        x = grpcclient.InferInput("x", [1, 16], "FP32")
        x.set_data_from_numpy(np.zeros((1, 16), np.float32))
        client.async_infer("stuck", [x], callback=lambda result, error: None)
        deadline = time.monotonic() + 60
        while not started.exists():  # the stub is inside execute(), mid-request
            assert time.monotonic() < deadline, "the request never reached the stub"
            time.sleep(0.05)  # polling interval of a condition with a deadline
        pgid = server.pid
        os.kill(pgid, signal.SIGSEGV)
        assert server.exit_note(wait_s=30) is not None
        client.close()
    assert _process_group(pgid) == []
