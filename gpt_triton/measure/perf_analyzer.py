"""perf_analyzer as the load client (``measure.client: perf_analyzer``), and where to find it.

NVIDIA's perf_analyzer is what Triton users trust; with it behind the harness's seam
(:class:`gpt_triton.measure.clients.LoadClient`) every window, interval and selection can be
cross-checked with the tool itself, as Triton Model Analyzer does. The binary ships in the
``tritonclient==2.41.0`` wheel (later wheels do not carry it); it needs Debian's ``libb64-0d`` and
``libcudart.so.12`` (wheel ``nvidia-cuda-runtime-cu12``) even on CPU. ``make setup`` extracts both wheels
into ``.cache/perf_analyzer/`` (never into the virtualenv: the project needs tritonclient >= 2.51).

One window is one perf_analyzer run: ``--input-data`` JSON carries the window's payloads (base64, in
the order the built-in client would send them), three time windows that together span the duration
(perf_analyzer stretches each by 1.2: :data:`WINDOW_STRETCH`) with the stability check switched off
(the harness judges stability over its own windows), and
``--profile-export-file`` gives every request's send and response time, so the window has per-request
latencies like the built-in client's. ``-f`` writes perf_analyzer's own CSV summary; its p50 is kept
in the log for comparison. Triton's statistics around the run give the same server-side breakdown.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.arrivals import ClosedLoop
from gpt_triton.measure.clients import BuiltinClient, LoadClient
from gpt_triton.measure.driver import WindowSample, summarise
from gpt_triton.measure.machine_load import WatchedClient
from gpt_triton.measure.sender import HTTP_ENDPOINT_UNKNOWN, Raw
from gpt_triton.measure.server_stats import StatsSnapshots

ENV_BINARY = "GPT_TRITON_PERF_ANALYZER"  # path of the perf_analyzer binary
ENV_CACHE = "GPT_TRITON_PERF_ANALYZER_CACHE"  # the folder make setup extracts into
# Where `make perf-analyzer` puts the binary and libcudart: the checkout's .cache (editable install).
DEFAULT_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "perf_analyzer"
_CUDART = "libcudart.so.12"
MAX_TOP_UPS = 3  # extra runs to reach min_requests when a window fell short


@dataclass(frozen=True)
class PerfAnalyzer:
    """A runnable perf_analyzer: the binary and the library folders it needs on LD_LIBRARY_PATH."""

    binary: Path
    library_dirs: tuple[Path, ...] = ()

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(p) for p in self.library_dirs] + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
        env["LD_LIBRARY_PATH"] = ":".join(paths)
        return env

    def run(self, args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([str(self.binary), *args], env=self.environment(), capture_output=True,
                                  text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise GptTritonError(f"perf_analyzer did not finish within {timeout_s:.0f} s") from exc

    def version(self) -> str:
        """``Perf Analyzer Version 2.41.0 (commit ...)``; raises when the binary cannot start."""
        done = self.run(["--version"], 30)
        text = (done.stdout + done.stderr).strip()
        if done.returncode != 0 or "Version" not in text:
            raise GptTritonError(f"perf_analyzer at {self.binary} does not run: {_last_line(text)}")
        return next(line for line in text.splitlines() if "Version" in line).strip()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _library_dirs(cache: Path) -> tuple[Path, ...]:
    found = sorted({p.parent for p in cache.rglob(_CUDART)}) if cache.is_dir() else []
    return tuple(found)


def find_perf_analyzer(required: bool = False) -> PerfAnalyzer | None:
    """perf_analyzer from ``$GPT_TRITON_PERF_ANALYZER``, the setup cache, or PATH, checked to start
    (libb64 and libcudart present). None when absent, or a :class:`GptTritonError` naming what is
    missing when ``required``."""
    cache = Path(os.environ.get(ENV_CACHE) or DEFAULT_CACHE)
    candidates = [Path(p) for p in (os.environ.get(ENV_BINARY), cache / "bin" / "perf_analyzer",
                                    shutil.which("perf_analyzer")) if p]
    problem = (f"no perf_analyzer: run `make perf-analyzer` (it extracts the tritonclient 2.41.0 wheel's binary "
               f"into {DEFAULT_CACHE}) or set {ENV_BINARY}")
    for binary in candidates:
        if not binary.is_file():
            continue
        found = PerfAnalyzer(binary, _library_dirs(cache) + _library_dirs(binary.parent.parent))
        try:
            found.version()
        except GptTritonError as exc:
            problem = f"{exc} (it needs Debian's libb64-0d and {_CUDART} from nvidia-cuda-runtime-cu12)"
            continue
        return found
    if required:
        raise GptTritonError(problem)
    return None


def input_data(payloads: Sequence[dict[str, np.ndarray]], batch_axis: bool) -> tuple[dict[str, object], int]:
    """perf_analyzer's ``--input-data`` JSON for ``payloads`` (base64 content, shapes without the batch
    axis when the model batches) and the batch size to pass with ``-b``."""
    batch = 1
    if batch_axis:
        sizes = {int(p[name].shape[0]) for p in payloads for name in p}
        if len(sizes) != 1:
            raise GptTritonError(f"perf_analyzer sends one batch size per run; the requests have batch sizes "
                                 f"{sorted(sizes)}: use the built-in client (measure.client: builtin)")
        batch = sizes.pop()
    steps = []
    for payload in payloads:
        step: dict[str, object] = {}
        for name, array in payload.items():
            if np_to_triton_dtype(array.dtype) == "BYTES":
                raise GptTritonError(f"input {name!r} is a BYTES tensor: the perf_analyzer client sends numeric "
                                     "tensors only; use the built-in client")
            shape = list(array.shape[1:] if batch_axis else array.shape)
            step[name] = {"b64": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode(), "shape": shape}
        steps.append(step)
    return {"data": steps}, batch


def load_arguments(load: LoadProfile) -> list[str]:
    """perf_analyzer's flags for a load profile (closed loop or a rate; traces have their own times)."""
    if load.kind == "concurrency":
        return ["--concurrency-range", f"{load.concurrency}:{load.concurrency}"]
    if load.kind == "rate":
        return ["--request-rate-range", f"{load.rate:g}:{load.rate:g}", "--request-distribution", load.arrivals]
    raise GptTritonError("the perf_analyzer client measures concurrency and rate loads; a replay trace needs "
                         "the built-in client (measure.client: builtin)")


def read_export(path: Path) -> list[tuple[int, int]]:
    """(send ns, last response ns) per request from a ``--profile-export-file``."""
    doc = json.loads(path.read_text())
    out = []
    for experiment in doc.get("experiments", []):
        for request in experiment.get("requests", []):
            responses = request.get("response_timestamps") or []
            if responses:
                out.append((int(request["timestamp"]), int(responses[-1])))
    out.sort()
    return out


def read_csv_ms(path: Path, statistic: str = "p50") -> float | None:
    """perf_analyzer's own ``statistic`` (p50, p90, p95, p99: its ``-f`` CSV, microseconds) in ms; None
    without the file or the column."""
    if not path.is_file():
        return None
    rows = list(csv.DictReader(path.read_text().splitlines()))
    column = f"{statistic} latency"
    return float(rows[0][column]) / 1e3 if rows and rows[0].get(column) else None


# In time_windows mode perf_analyzer sleeps 1.2 x ``-p`` per time window (InferenceProfiler::Measure in
# NVIDIA's perf_analyzer sources; its export file spans 6.0 s for three windows of ``-p 1667``), so ``-p`` is
# shortened by that factor: a window asked for 5 s then spans 5 s, as the built-in client's does. Unshortened,
# its windows held 1.2 x the requests, and a p99 of 1.2 x the requests is another statistic where the p99
# sits at the edge of a slow cluster (docs/measurement.md, "Request by request").
WINDOW_STRETCH = 1.2
TRIAL_REQUESTS = 5  # requests each of a top-up run's three time windows should hold at the observed rate
_NO_REQUESTS = "No valid requests recorded"


class PerfAnalyzerClient(LoadClient):
    """Each window is one perf_analyzer run (see the module docstring). perf_analyzer asks for every
    output (``outputs`` is not used) and draws its own arrivals (nor is ``seed``)."""

    name = "perf_analyzer"

    def __init__(self, tool: PerfAnalyzer, protocol: str = "grpc", http_url: str | None = None) -> None:
        if protocol == "http" and not http_url:
            raise GptTritonError(HTTP_ENDPOINT_UNKNOWN)
        self.tool = tool
        self.protocol = protocol  # perf_analyzer's -i; statistics are read over gRPC either way
        self.http_url = http_url
        self.last_csv_p50_ms: float | None = None  # perf_analyzer's own p50 of the last window

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        # settle_s is not needed here: each window is a new perf_analyzer process, whose start (~0.1 s and
        # more) already lets the previous model's threads go quiet, and its first request is left out.
        if not requests:
            raise GptTritonError("no requests to send: the tuning split is empty")
        flags = load_arguments(load)
        k = payload_start % len(requests)
        ordered = list(requests[k:]) + list(requests[:k])
        with tempfile.TemporaryDirectory(prefix="gpt-triton-pa-") as tmp:
            folder = Path(tmp)
            try:
                with StatsSnapshots(grpc_url, model_name, metrics_url) as snapshots:
                    config = snapshots.client.get_model_config(model_name, as_json=True)["config"]
                    doc, batch = input_data(ordered, int(config.get("max_batch_size", 0)) > 0)
                    (folder / "input.json").write_text(json.dumps(doc))
                    snapshots.take("before")
                    timed: list[tuple[int, int]] = []
                    sent = 0
                    length = duration_s
                    for attempt in range(1 + MAX_TOP_UPS):
                        pairs = self._run(folder, attempt, grpc_url, model_name, batch, flags, length)
                        sent += len(pairs)
                        # Each run's first request opens its channel (tens of ms): the built-in client
                        # sends that one untimed, so it is left out here too.
                        timed += pairs[1:]
                        if len(timed) >= min_requests:
                            break
                        span_s = max((timed[-1][1] - timed[0][0]) / 1e9, 1e-3) if timed else duration_s
                        rate = max(len(timed), 1) / span_s
                        # Each of the run's three time windows must hold a few requests: perf_analyzer
                        # fails a window that records none (a 100 ms window of a 70 ms model did).
                        length = max(0.3, 3 * TRIAL_REQUESTS / rate, 1.2 * (min_requests - len(timed)) / rate)
                    snapshots.take("after", sent)
                    server = snapshots.server_breakdown()
            except InferenceServerException as exc:
                raise GptTritonError(f"Triton at {grpc_url} failed for model {model_name!r}: {exc}") from exc
        timed.sort()
        raw = Raw(latencies_ms=[(done - start) / 1e6 for start, done in timed], sent=len(timed))
        if timed:
            raw.start, raw.end = timed[0][0] / 1e9, max(done for _, done in timed) / 1e9
            raw.last_send = timed[-1][0] / 1e9
        return summarise(ClosedLoop(), [raw], None, duration_s, server)

    def _run(self, folder: Path, attempt: int, grpc_url: str, model_name: str, batch: int, flags: list[str],
             duration_s: float) -> list[tuple[int, int]]:
        export, report = folder / f"export{attempt}.json", folder / f"report{attempt}.csv"
        interval_ms = max(100, int(math.ceil(duration_s * 1000 / (3 * WINDOW_STRETCH))))
        url = self.http_url if self.protocol == "http" and self.http_url else grpc_url
        args = ["-m", model_name, "-u", url, "-i", self.protocol, "-b", str(batch), *flags,
                "--input-data", str(folder / "input.json"), "--measurement-mode", "time_windows",
                "-p", str(interval_ms), "--max-trials", "3", "--stability-percentage", "1000",
                "-f", str(report), "--profile-export-file", str(export)]
        done = self.tool.run(args, timeout_s=duration_s * 10 + 120)
        if done.returncode != 0 and _NO_REQUESTS in (done.stderr + done.stdout) and duration_s < 60:
            # A window too short for one request at the model's current speed (a loaded machine slows
            # it): longer windows, not a failed candidate.
            return self._run(folder, attempt, grpc_url, model_name, batch, flags, duration_s * 4)
        if done.returncode != 0 or not export.is_file():
            raise GptTritonError(f"perf_analyzer failed on {model_name!r} (exit {done.returncode}): "
                                 f"{_last_line(done.stderr or done.stdout)}")
        self.last_csv_p50_ms = read_csv_ms(report)
        return read_export(export)


def load_client(name: str, processes: int = 1, protocol: str = "grpc", http_url: str | None = None) -> LoadClient:
    """The client ``measure.client`` names, speaking ``measure.protocol``, with what else the machine ran
    during each window on its results (:class:`~gpt_triton.measure.machine_load.WatchedClient`);
    perf_analyzer must be installed (``make setup`` fetches it)."""
    if name == "perf_analyzer":
        tool = find_perf_analyzer(required=True)
        assert tool is not None  # required=True raises instead
        return WatchedClient(PerfAnalyzerClient(tool, protocol, http_url))
    return WatchedClient(BuiltinClient(processes, protocol, http_url))
