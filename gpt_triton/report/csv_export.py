"""The candidates' measurements as CSV in perf_analyzer's ``-f`` column layout, so notebooks and Model
Analyzer habits built on perf_analyzer's files read gpt-triton runs unchanged.

The header is perf_analyzer's (``ReportWriter::GenerateReport`` in triton-inference-server/perf_analyzer,
``src/report_writer.cc``, with server statistics on, no response cache, not decoupled, not verbose, and its
default percentiles 50/90/95/99), with two leading columns naming the candidate: ``Candidate ID`` (the
stable 12-hex key) and ``Candidate`` (its name, :mod:`gpt_triton.core.naming`). One row per candidate and
load level, in the run's candidate order (perf_analyzer sorts one model's rows by throughput; here the rows
are many candidates). Times are integer microseconds, as perf_analyzer writes them.

Where the numbers come from (``report.json``): Inferences/Second is the throughput's point estimate times
the request batch (perf_analyzer counts inferences, a batch-4 request is 4); server queue and compute times
are the mean Triton statistics deltas; Network+Server Send/Recv is perf_analyzer's own residual (mean
client latency minus queue and compute, floored at 0); the percentiles are the bootstrap point estimates.
gpt-triton's load generator does not time the client's send and receive separately, nor p95: those cells
are left empty rather than filled with a number nobody measured. perf_analyzer writes one load mode per
file, so the first column is ``Concurrency`` when the run's objective load is closed-loop, ``Request Rate``
when it is open-loop (or a replay), and only load levels of that mode are written.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from pathlib import Path

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LatencyStats
from gpt_triton.core.model_info import request_batch
from gpt_triton.core.naming import unique_names
from gpt_triton.core.records import RunReport

LEADING_COLUMNS = ("Candidate ID", "Candidate")
# perf_analyzer's header after its first column (Concurrency or Request Rate), in its order.
PERF_ANALYZER_COLUMNS = (
    "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue", "Server Compute Input",
    "Server Compute Infer", "Server Compute Output", "Client Recv", "p50 latency", "p90 latency", "p95 latency",
    "p99 latency",
)
CSV_FILE = "report.csv"


def _us(ms: float | None) -> str:
    """Milliseconds as perf_analyzer's integer microseconds (it divides nanoseconds by 1000, truncating)."""
    return "" if ms is None else str(int(ms * 1000.0))


def _mode(report: RunReport) -> str:
    loads = report.spec.measure.loads
    index = report.spec.objective.load_index
    kind = loads[index].kind if index < len(loads) else "concurrency"
    return "concurrency" if kind == "concurrency" else "rate"


def _first_cell(stats: LatencyStats) -> str:
    load = stats.load
    if load.kind == "concurrency":
        return str(load.concurrency)
    if load.kind == "rate":
        return f"{load.rate:g}"
    achieved = [w.rate_achieved for w in stats.windows if w.rate_achieved is not None]
    return f"{sum(achieved) / len(achieved):g}" if achieved else ""


def _row(stats: LatencyStats, batch: int) -> list[str]:
    server = stats.server
    compute = (server.compute_input_ms + server.compute_infer_ms + server.compute_output_ms) if server else None
    network = None
    if server is not None and stats.mean_ms is not None and compute is not None:
        network = max(0.0, stats.mean_ms.value - server.queue_ms - compute)
    throughput = f"{stats.throughput.value * batch:.6g}" if stats.throughput is not None else ""
    return [
        _first_cell(stats), throughput, "", _us(network),
        _us(server.queue_ms if server else None), _us(server.compute_input_ms if server else None),
        _us(server.compute_infer_ms if server else None), _us(server.compute_output_ms if server else None), "",
        _us(stats.p50_ms.value if stats.p50_ms else None), _us(stats.p90_ms.value if stats.p90_ms else None), "",
        _us(stats.p99_ms.value if stats.p99_ms else None),
    ]


def csv_header(report: RunReport) -> list[str]:
    first = "Concurrency" if _mode(report) == "concurrency" else "Request Rate"
    return [*LEADING_COLUMNS, first, *PERF_ANALYZER_COLUMNS]


def csv_text(report: RunReport) -> str:
    """The CSV (see the module docstring) of a run's measured candidates."""
    mode = _mode(report)
    names = unique_names(report.candidates, report.baseline_id)
    batch = request_batch(report.shapes) if report.model.batch_dynamic else 1
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(csv_header(report))
    for candidate in report.candidates:
        for stats in candidate.latency:
            if ("concurrency" if stats.load.kind == "concurrency" else "rate") != mode:
                continue
            writer.writerow([candidate.id, names[candidate.id], *_row(stats, batch)])
    return out.getvalue()


def write_csv(report: RunReport, path: Path) -> Path:
    """Write :func:`csv_text` to ``path`` through a temporary file and a rename (never half a file)."""
    path = Path(path)
    if path.is_dir():
        raise GptTritonError(f"--csv {path} is a directory; give a file name, e.g. {path / CSV_FILE}")
    if not path.parent.is_dir():
        raise GptTritonError(f"cannot write {path}: directory {path.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise GptTritonError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(csv_text(report))
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
