"""Embedded mode: the tritonserver binary shipped in the nvidia-pytriton wheel, started as a child.

The wheel carries a real tritonserver 2.51 with only the python backend; candidates are served through
our python-backend runtime adapter (:mod:`gpt_triton.deploy`). The server runs in its own process group
on free loopback ports, is registered with ``atexit`` and is stopped (SIGTERM, then SIGKILL) on any exit
from ``with``, so neither an exception nor Ctrl-C leaves a tritonserver or a python stub behind.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import psutil

from gpt_triton.core.errors import GptTritonError
from gpt_triton.server._base import TritonServer

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
PORT_ATTEMPTS = 3
# The python backend moves tensors through a shared-memory region per model instance. Its 1 MiB
# default makes the first batched request of a 160x160 CNN grow the region in steps (visible as latency
# spikes); /dev/shm pages are only committed when touched, so a larger reservation is free.
_PYTHON_BACKEND_CONFIG = ("python,shm-default-byte-size=16777216", "python,shm-growth-byte-size=16777216")
# p99 for the canary's gates and the dashboards: Triton 2.51 exports latency summaries
# (nv_inference_request_summary_us{quantile=...}) only when asked. Its default quantiles (0.5, 0.9, 0.95,
# 0.99, 0.999, seen on this binary) include p99; the chart passes the same flag, so tuning and serving match.
# Keeping only p99 (summary_quantiles=0.99:0.001) did not lower the tail it reports
# (benchmarks/summary_cost.py), so Triton's default set stays.
SUMMARY_METRICS_ARGS = ("--metrics-config=summary_latencies=true",)
_PR_SET_PDEATHSIG = 1
# Triton log lines look like "E1202 18:20:00.123456 123 file.cc:42] message".
_LOG_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+ +\d+ [^\]]+\] ?(.*)$")

# The variables the adapter reads its verification key from (gpt_triton.promote.signing reads the same).
SIGNING_KEY_ENVS = ("GPT_TRITON_SIGNING_KEY", "GPT_TRITON_SIGNING_KEY_FILE")


def _pytriton_dir() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise GptTritonError("nvidia-pytriton is not installed; run `pip install nvidia-pytriton==0.7.0`")
    return Path(next(iter(spec.submodule_search_locations)))


def triton_binary() -> Path:
    """The tritonserver executable shipped in the nvidia-pytriton wheel."""
    binary = _pytriton_dir() / "tritonserver" / "bin" / "tritonserver"
    if not binary.is_file():
        raise GptTritonError(f"tritonserver binary missing at {binary}; reinstall nvidia-pytriton==0.7.0")
    return binary


def _library_dir() -> Path:
    return _pytriton_dir().parent / "nvidia_pytriton.libs"


def _default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpt-triton"


def python_backend_dir(cache_dir: Path | None = None) -> Path:
    """A backends directory whose python backend has the stub for this interpreter, built once.

    The wheel keeps the stubs apart (one per Python version); Triton looks for
    ``backends/python/triton_python_backend_stub``. The copy is made in a temporary sibling and renamed
    into place, so concurrent first runs never see a half-copied directory.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    target = cache_dir / f"triton-2.51-py{py}" / "backends"
    stub_name = "triton_python_backend_stub"
    if (target / "python" / stub_name).is_file():
        return target
    source = _pytriton_dir() / "tritonserver"
    stub = source / "python_backend_stubs" / py / stub_name
    if not stub.is_file():
        raise GptTritonError(f"no python backend stub for Python {py} in nvidia-pytriton; use Python 3.8-3.13")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".backends-", dir=target.parent))
    try:
        shutil.copytree(source / "backends", staging / "backends", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(stub, staging / "backends" / "python" / stub_name)
        with contextlib.suppress(OSError):  # another process won the race: its copy is as good as ours
            (staging / "backends").rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out for port 0, all held open together so they are distinct."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# Started in place of tritonserver: asks Linux to SIGTERM it when its parent dies, then becomes tritonserver
# (the request survives exec). Not a preexec_fn: that makes Python fork() rather than vfork(), and the forked
# child then runs the fork handlers of every C library loaded here; gRPC's (tritonclient.grpc is) can fail
# in it, and the child exits before exec with only "(event_engine) Epoll1Poller ... epoll_wait error: Bad
# file descriptor" in the server log (a fresh-clone CI run, 2026-12-05).
_EXEC_DYING_WITH_PARENT = f"""
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, signal.SIGTERM)
except Exception:
    pass  # not Linux, or no libc: stop() and atexit still apply
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the parent died before the signal was asked for
os.execv(sys.argv[2], sys.argv[2:])
"""


def _dying_with_parent(command: list[str]) -> list[str]:
    """``command`` run through :data:`_EXEC_DYING_WITH_PARENT` (an isolated interpreter without site)."""
    return [sys.executable, "-I", "-S", "-c", _EXEC_DYING_WITH_PARENT, str(os.getpid()), *command]


def last_error_line(log_path: Path) -> str:
    """The last error (or, failing that, the last non-empty) line of a Triton log, without its prefix."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    fallback = ""
    for line in reversed(lines):
        match = _LOG_LINE.match(line.strip())
        # gRPC's own shutdown noise ("(event_engine) ... epoll_wait error") can follow the real reason.
        if match and match.group(1) in "EF" and not match.group(2).strip().startswith("(event_engine)"):
            return match.group(2).strip()
        if not fallback and line.strip():
            fallback = match.group(2).strip() if match else line.strip()
    return fallback


_DEATH_NOTE = re.compile(r"^(Signal \(\d+\) received\.|terminate called .*|\s*what\(\): .*)$")


def last_death_note(log_path: Path) -> str:
    """What tritonserver printed as it died (its signal handler's ``Signal (11) received.``, a C++
    ``terminate called after throwing ...`` and its ``what():``), joined; empty when it printed none."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    notes = [" ".join(line.split()) for line in lines if _DEATH_NOTE.match(line)]
    return "; ".join(notes[-3:])


def _process_group(pgid: int) -> list[psutil.Process]:
    """The live processes of process group ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


class EmbeddedTriton(TritonServer):
    """A tritonserver child process over ``repository`` (explicit model control)."""

    mode = "embedded"

    def __init__(
        self,
        repository: Path,
        workdir: Path | None = None,
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
        signing_key: bool = True,
        metrics_args: Sequence[str] = SUMMARY_METRICS_ARGS,
        auto_complete_config: bool = False,
    ) -> None:
        """``signing_key=False``: the server does not inherit GPT_TRITON_SIGNING_KEY(_FILE). A tuning run's
        staging server serves unsigned candidates, which the adapter refuses wherever a key is set; and a
        key is passed only to the processes that verify with it. ``metrics_args``: the latency-summary
        flags (the default is the chart's; benchmarks/summary_cost.py compares others).
        ``auto_complete_config=True``: Triton's default, which costs a python model a stub of its own at
        load (benchmarks/deploy_loads.py compares; every config gpt_triton writes is complete)."""
        super().__init__()
        self.signing_key = signing_key
        self.auto_complete_config = auto_complete_config
        self.repository = Path(repository).resolve()
        self.native_backends = frozenset()
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self._log_arg = Path(log_path) if log_path is not None else None
        self.extra_args = list(extra_args)
        self.metrics_args = list(metrics_args)
        self.log_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._own_workdir: Path | None = None

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._process is not None:
            return
        try:
            self._start()
        except BaseException:
            # Ctrl-C or a failure halfway through start must not leave a server behind; the workdir
            # stays, because the error message points at the log inside it.
            self._close_client()
            self._terminate()
            raise

    def _start(self) -> None:
        assert self.repository is not None  # always set for the embedded server
        self.repository.mkdir(parents=True, exist_ok=True)
        workdir = self._workdir_arg
        if workdir is None:
            self._own_workdir = workdir = Path(tempfile.mkdtemp(prefix="gpt-triton-server-"))
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = self._log_arg or workdir / "tritonserver.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        try:
            backends = python_backend_dir()
        except OSError:  # no writable home cache (e.g. a read-only container): keep the copy in the workdir
            backends = python_backend_dir(workdir / "cache")
        for attempt in range(PORT_ATTEMPTS):
            http_port, grpc_port, metrics_port = _free_ports(3)
            self._launch(backends, http_port, grpc_port, metrics_port)
            try:
                self._wait_ready()
                break
            except GptTritonError as exc:
                self._terminate()
                # Another process can grab a port between our probe and Triton's bind: retry that only.
                if "already in use" not in str(exc).lower() or attempt == PORT_ATTEMPTS - 1:
                    raise
        self.http_url = f"127.0.0.1:{http_port}"
        self.grpc_url = f"127.0.0.1:{grpc_port}"
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        atexit.register(self.stop)

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(_library_dir()), env.get("LD_LIBRARY_PATH")) if p)
        # The stub embeds libpython and takes sys.prefix from the first python3 on PATH: the venv's.
        env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH")) if p)
        # No __pycache__ next to model.py in a (signed) version directory. The 2.51 stub ignores this,
        # which is why write_version_files ships the bytecode; it still covers other python models.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if not self.signing_key:
            for name in SIGNING_KEY_ENVS:
                env.pop(name, None)
        return env

    def _launch(self, backends: Path, http_port: int, grpc_port: int, metrics_port: int) -> None:
        assert self.log_path is not None
        command = [
            str(triton_binary()),
            f"--model-repository={self.repository}",
            f"--backend-directory={backends}",
            "--model-control-mode=explicit",
            f"--http-port={http_port}",
            f"--grpc-port={grpc_port}",
            f"--metrics-port={metrics_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            "--exit-timeout-secs=5",
            # A candidate that fails to load must not turn the whole server "not ready" (the default
            # strict readiness would), or every later health check of the run would fail.
            "--strict-readiness=false",
            # Every config this server loads is written whole by gpt_triton.deploy (nothing is left to
            # auto-complete). Left on, the python backend starts a stub per model only to ask model.py for
            # a config: 1.28 s of a 1.45 s load here, against 0.2 s without it.
            *(() if self.auto_complete_config else ("--disable-auto-complete-config",)),
            "--log-verbose=0",
            *self.metrics_args,
            *(f"--backend-config={c}" for c in _PYTHON_BACKEND_CONFIG),
            *self.extra_args,
        ]
        self._pending_http = f"127.0.0.1:{http_port}"
        # The server lives in its own session, so a Ctrl-C on the terminal does not reach it and stop()
        # decides the order of shutdown. If this process dies without running stop() (SIGKILL, an
        # unhandled SIGTERM), the kernel's parent-death signal still takes the server down. It is tied
        # to the forking *thread*, so it is only armed when starting from the main thread.
        if threading.current_thread() is threading.main_thread():
            command = _dying_with_parent(command)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self._environment(), start_new_session=True,  # own process group: stop() kills it whole
            )

    def _wait_ready(self) -> None:
        assert self._process is not None and self.log_path is not None
        url = f"http://{self._pending_http}/v2/health/ready"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            code = self._process.poll()
            if code is not None:
                reason = last_error_line(self.log_path) or f"exit code {code}"
                raise GptTritonError(f"tritonserver exited during start-up: {reason} (log: {self.log_path})")
            try:
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise GptTritonError(
                    f"tritonserver not ready after {START_TIMEOUT_S:.0f} s: "
                    f"{last_error_line(self.log_path) or 'no log output'} (log: {self.log_path})"
                )
            time.sleep(0.05)  # polling interval of a condition with a deadline

    # -- stop ------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def exit_note(self, wait_s: float = 0.0) -> str | None:
        process = self._process
        if process is None:
            return None
        try:
            code = process.wait(timeout=wait_s) if wait_s > 0 else process.poll()
        except subprocess.TimeoutExpired:
            return None
        if code is None:
            return None
        how = f"exited with code {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
        where = ""
        if self.log_path is not None:
            # Not last_error_line: the last E line of a server that ran for minutes is start-up noise
            # ("CudaDriverHelper has not been initialized."); its own death notes are unprefixed.
            note = last_death_note(self.log_path)
            where = f"; its log: {self.log_path}" + (f" ({note})" if note else "")
        return f"the embedded Triton (pid {process.pid}) {how}{where}"

    def stop(self) -> None:
        self._close_client()
        self._terminate()
        atexit.unregister(self.stop)
        if self._own_workdir is not None:
            # A workdir we created is scratch; a log the caller wants kept lives at their log_path.
            shutil.rmtree(self._own_workdir, ignore_errors=True)
            self._own_workdir = None

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            group = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            group = []
        # A server that died first leaves its python stubs orphaned (no longer its children), and one caught
        # mid-request can outlive it: they still carry its process group (a tune whose server was sent
        # SIGSEGV left the stub of the model under load running).
        known = {p.pid for p in group}
        group += [p for p in _process_group(process.pid) if p.pid not in known]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout=STOP_TIMEOUT_S if sig == signal.SIGTERM else 5.0)
            except subprocess.TimeoutExpired:
                continue
            # The python stubs are children of tritonserver; wait for them too before reporting stopped.
            _, alive = psutil.wait_procs([p for p in group if p.pid != process.pid], timeout=5.0)
            if not alive:
                return
            for leftover in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    leftover.kill()
            psutil.wait_procs(alive, timeout=5.0)
            return

    # -- models ----------------------------------------------------------------------------------
    def _released(self, name: str) -> bool:
        if self._process is None or self.repository is None:
            return True
        marker = f"{self.repository / name}{os.sep}"
        try:
            children = psutil.Process(self._process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return True
        for child in children:
            with contextlib.suppress(psutil.Error):
                if any(arg.startswith(marker) for arg in child.cmdline()):
                    return False
        return True

    def load(self, model_dir: Path) -> None:
        """Load ``model_dir``; a directory outside the repository is first copied in (atomically)."""
        model_dir = Path(model_dir).resolve()
        if not (model_dir / "config.pbtxt").is_file():
            raise GptTritonError(f"{model_dir} has no config.pbtxt; write it with gpt_triton.deploy.write_model")
        assert self.repository is not None
        name = model_dir.name
        if model_dir.parent != self.repository:
            staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self.repository))
            try:
                shutil.copytree(model_dir, staging / name)
                target = self.repository / name
                if target.exists():
                    shutil.rmtree(target)
                (staging / name).rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        self._load_request(name)
