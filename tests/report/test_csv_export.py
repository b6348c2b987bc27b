"""CSV export in perf_analyzer's ``-f`` layout: the header is the real perf_analyzer's, the values the report's."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from delay_model import write_delay_model

from gpt_triton.cli import main
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.core.records import RunReport
from gpt_triton.measure.perf_analyzer import find_perf_analyzer
from gpt_triton.report import csv_text, write_csv
from gpt_triton.report.csv_export import LEADING_COLUMNS, PERF_ANALYZER_COLUMNS
from gpt_triton.server import EmbeddedTriton

from .conftest import make_report, spec

TOOL = find_perf_analyzer()


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.skipif(TOOL is None, reason="perf_analyzer is not installed here: `make perf-analyzer` extracts it from "
                                         "the tritonclient 2.41.0 wheel")
def test_the_header_is_the_one_perf_analyzer_writes(triton_server: EmbeddedTriton, tmp_path: Path) -> None:
    assert TOOL is not None and triton_server.repository is not None
    triton_server.load(write_delay_model(triton_server.repository, "csv_header_model", {1: 0.0}, input_dims=(1, 16)))
    out = tmp_path / "pa.csv"
    done = TOOL.run(["-m", "csv_header_model", "-u", triton_server.grpc_url, "-i", "grpc", "--concurrency-range", "1:1",
                     "--measurement-mode", "time_windows", "-p", "200", "--max-trials", "3",
                     "--stability-percentage", "1000", "-f", str(out)], timeout_s=120)
    assert done.returncode == 0, done.stderr
    theirs = out.read_text().splitlines()[0].split(",")
    ours = csv_text(make_report()).splitlines()[0].split(",")
    assert ours[: len(LEADING_COLUMNS)] == list(LEADING_COLUMNS)
    assert ours[len(LEADING_COLUMNS):] == theirs


def test_the_header_constant_matches_perf_analyzers_report_writer() -> None:
    # report_writer.cc (perf_analyzer 263c5f6): server stats on, no cache, not decoupled, not verbose,
    # percentiles 50/90/95/99. Kept here too so a machine without the binary still checks the layout.
    assert ",".join(["Concurrency", *PERF_ANALYZER_COLUMNS]) == (
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
        "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency")


def test_values_come_from_the_report(report: RunReport) -> None:
    rows = _rows(csv_text(report))
    measured = [c for c in report.candidates if c.latency]
    assert len(rows) == sum(len(c.latency) for c in measured)  # one row per candidate and load level
    assert {r["Candidate ID"] for r in rows} == {c.id for c in measured}
    winner = report.candidate("c05")
    row = next(r for r in rows if r["Candidate ID"] == "c05" and r["Concurrency"] == "4")
    stats = winner.latency[1]
    assert stats.load.concurrency == 4 and stats.server is not None and stats.mean_ms is not None
    assert row["Candidate"] == "openvino precision=bf16 instances=2 batching=on"
    assert float(row["Inferences/Second"]) == pytest.approx(stats.throughput.value, rel=1e-5)  # type: ignore[union-attr]
    assert row["p50 latency"] == str(int(stats.p50_ms.value * 1000))  # type: ignore[union-attr]
    assert row["p90 latency"] == str(int(stats.p90_ms.value * 1000))  # type: ignore[union-attr]
    assert row["p99 latency"] == str(int(stats.p99_ms.value * 1000))  # type: ignore[union-attr]
    assert row["Server Queue"] == str(int(stats.server.queue_ms * 1000))
    assert row["Server Compute Infer"] == str(int(stats.server.compute_infer_ms * 1000))
    compute = stats.server.compute_input_ms + stats.server.compute_infer_ms + stats.server.compute_output_ms
    assert row["Network+Server Send/Recv"] == str(int(max(0.0, stats.mean_ms.value - stats.server.queue_ms - compute) * 1000))
    # Not measured by gpt-triton's client: left empty, never invented.
    assert row["Client Send"] == row["Client Recv"] == row["p95 latency"] == ""


def test_a_batched_request_counts_its_inferences_as_perf_analyzer_does() -> None:
    report = make_report(shapes={"images": [4, 3, 64, 64]})
    row = _rows(csv_text(report))[0]
    stats = report.candidate(row["Candidate ID"]).latency[0]
    assert float(row["Inferences/Second"]) == pytest.approx(4 * stats.throughput.value, rel=1e-5)  # type: ignore[union-attr]


def test_an_open_loop_run_is_written_in_request_rate_mode() -> None:
    loads = [LoadProfile(kind="rate", rate=50.0), LoadProfile(kind="concurrency", concurrency=2)]
    report = make_report(spec=spec(objective={"metric": "p99", "load_index": 0},
                                   measure={"loads": [load.model_dump() for load in loads]}))
    for c in report.candidates:
        for stats, load in zip(c.latency, loads, strict=False):
            stats.load = load
    text = csv_text(report)
    assert text.splitlines()[0].split(",")[2] == "Request Rate"
    rows = _rows(text)
    assert rows and {r["Request Rate"] for r in rows} == {"50"}  # the concurrency level is another mode: left out


def test_report_cli_writes_the_csv_beside_report_md_and_where_asked(tmp_path: Path, rendered: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text((rendered / "report.json").read_text())
    target = tmp_path / "export.csv"
    assert main(["report", str(run_dir), "--no-summary", "--csv", str(target)]) == 0
    assert (run_dir / "report.csv").read_text() == target.read_text() == csv_text(make_report())
    assert (rendered / "report.csv").is_file()  # render_report writes it at the end of every run


def test_a_bad_csv_path_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Exception, match="does not exist"):
        write_csv(make_report(), tmp_path / "missing" / "x.csv")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.json").write_text(make_report().model_dump_json())
    assert main(["report", str(run_dir), "--no-summary", "--csv", str(tmp_path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "is a directory" in err[0]
