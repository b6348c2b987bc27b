"""RUN_DIR/windows.csv: every counted window of a run, one row each, in the order run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpt_triton.core.measurements import WindowResult
from gpt_triton.measure.window_log import FIELDS, WindowLog, read_windows, stage_pair_ratio, window_latencies


def result(p99: float, requests: int = 500) -> WindowResult:
    return WindowResult(duration_s=0.75, requests=requests, errors=0, throughput=requests / 0.75, p50_ms=p99 / 2,
                        p90_ms=p99 * 0.8, p99_ms=p99, mean_ms=p99 / 2)


def test_rows_follow_the_windows_of_every_stage_in_order(tmp_path: Path) -> None:
    log = WindowLog(tmp_path / "windows.csv", "run-1")
    search, remeasure = log.sink("search"), log.sink("remeasure")
    search("a", "concurrency=1", 1, result(2.0))
    search("b", "concurrency=1", 1, result(3.0))
    remeasure("a", "concurrency=1", 1, result(2.5, requests=800))
    lines = (tmp_path / "windows.csv").read_text().splitlines()
    assert lines[0] == ",".join(FIELDS) and len(lines) == 4  # one header, one row per window
    rows = read_windows(tmp_path / "windows.csv")
    assert [(r["stage"], r["candidate"], r["round"]) for r in rows] == [
        ("search", "a", "1"), ("search", "b", "1"), ("remeasure", "a", "1")]
    assert [float(r["p99_ms"]) for r in rows] == [2.0, 3.0, 2.5]
    assert rows[2]["requests"] == "800" and {r["run_id"] for r in rows} == {"run-1"}
    assert rows[0]["ended_utc"] <= rows[1]["ended_utc"] <= rows[2]["ended_utc"]


def test_a_second_run_in_the_same_directory_appends_under_its_own_id(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    WindowLog(path, "first").sink("search")("a", "concurrency=1", 1, result(2.0))
    WindowLog(path, "second").sink("search")("a", "concurrency=1", 1, result(2.2))
    rows = read_windows(path)
    assert [r["run_id"] for r in rows] == ["first", "second"]  # the header is written once
    assert path.read_text().count("run_id") == 1


def test_an_empty_file_gets_its_header(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    path.touch()  # e.g. left by an interrupted run before its first window
    WindowLog(path, "r").sink("finalists")("a", "concurrency=1", 2, result(1.0))
    assert [r["stage"] for r in read_windows(path)] == ["finalists"]


def test_burn_in_rows_are_kept_but_read_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    sink = WindowLog(path, "r").sink("remeasure")
    sink("a", "concurrency=1", 0, result(1.5))  # the burn-in's windows: round 0
    sink("b", "concurrency=1", 0, result(2.5))
    sink("a", "concurrency=1", 1, result(2.0))
    assert [(r["candidate"], r["round"]) for r in read_windows(path)] == [("a", "1")]
    assert [(r["candidate"], r["round"]) for r in read_windows(path, burn_in=True)] == [("a", "0"), ("b", "0"), ("a", "1")]


def test_each_window_keeps_the_machine_load_and_each_stage_its_counted_windows(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    log = WindowLog(path, "r")
    sink = log.sink("remeasure")
    sink("a", "concurrency=1", 0, result(1.5).model_copy(update={"foreign_cores": 0.9, "steal_cores": 0.0}))
    sink("a", "concurrency=1", 1, result(2.0).model_copy(update={"foreign_cores": 0.25, "steal_cores": 0.01}))
    sink("b", "concurrency=1", 1, result(2.0))  # a client that does not watch the machine: empty cells
    rows = read_windows(path, burn_in=True)
    assert [(r["foreign_cores"], r["steal_cores"]) for r in rows] == [("0.900", "0.000"), ("0.250", "0.010"), ("", "")]
    assert [w.p99_ms for w in log.counted(["remeasure"])] == [2.0, 2.0]  # the burn-in is counted in no stage


def test_a_file_with_other_columns_is_set_aside_not_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    old = "run_id,stage,candidate,round,p99_ms\nbefore,search,a,1,2.0\n"  # what an older version wrote
    path.write_text(old)
    WindowLog(path, "now").sink("search")("a", "concurrency=1", 1, result(3.0))
    aside = [p for p in tmp_path.iterdir() if p.name != "windows.csv"]
    assert len(aside) == 1 and aside[0].name.startswith("windows.") and aside[0].read_text() == old
    assert [r["run_id"] for r in read_windows(path)] == ["now"]


def test_a_stage_pair_ratio_is_paired_by_round_and_leaves_out_a_round_missing_a_side() -> None:
    def row(stage: str, cid: str, round_no: int, p99: float) -> dict[str, str]:
        return {"stage": stage, "candidate": cid, "round": str(round_no), "p99_ms": str(p99)}

    rows = [row("remeasure", "base", 2, 30.0), row("remeasure", "win", 2, 15.0),   # out of order: paired by round
            row("remeasure", "win", 1, 10.0), row("remeasure", "base", 1, 40.0),
            row("remeasure", "base", 3, 99.0),                                        # no winner window: left out
            row("cross-check", "base", 1, 1.0), row("cross-check", "win", 1, 1.0)]    # another stage
    found = stage_pair_ratio(rows, "remeasure", ("base", "win"), "p99_ms")
    assert found is not None and found.value == pytest.approx(np.sqrt(4.0 * 2.0))  # geometric mean of 4 and 2
    assert stage_pair_ratio(rows, "remeasure", ("base", "win"), "p99_ms", min_rounds=3) is None
    assert stage_pair_ratio(rows, "finalists-pair", ("base", "win"), "p99_ms") is None


def test_each_counted_windows_latencies_are_kept_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    rng = np.random.default_rng(3)
    first, second = rng.gamma(4.0, 0.3, 500).astype(np.float32), rng.gamma(4.0, 0.5, 700).astype(np.float32)
    log = WindowLog(path, "r")
    sink = log.sink("remeasure")
    sink("a", "concurrency=1", 0, result(1.5), None)  # a burn-in window keeps no latencies
    sink("a", "concurrency=1", 1, result(1.6).model_copy(update={"set_aside": "crowded"}), None)
    sink("a", "concurrency=1", 1, result(2.0), first)
    WindowLog(path, "again").sink("remeasure")("b", "concurrency=1", 1, result(3.0), second)  # a later run appends
    rows = read_windows(path, burn_in=True, set_aside=True)
    kept = [window_latencies(path, row) for row in rows]
    assert [len(k) for k in kept] == [0, 0, 500, 700]
    np.testing.assert_array_equal(kept[2], first)
    np.testing.assert_array_equal(kept[3], second)
    assert (rows[2]["latency_offset"], rows[3]["latency_offset"]) == ("0", "500")
    assert (tmp_path / "latencies.f32").stat().st_size == 4 * 1200
