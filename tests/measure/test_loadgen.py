"""The load generator against a real Triton serving python models with known costs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile, ServerBreakdown
from gpt_triton.measure.arrivals import Constant
from gpt_triton.measure.driver import summarise
from gpt_triton.measure.loadgen import load_replay, pinned, run_window, schedule
from gpt_triton.measure.sender import Raw
from gpt_triton.server import EmbeddedTriton


def test_schedules_are_seeded_and_hit_the_rate() -> None:
    load = LoadProfile(kind="rate", rate=200, arrivals="poisson")
    a, b, c = schedule(load, 2.0, seed=1), schedule(load, 2.0, seed=1), schedule(load, 2.0, seed=2)
    assert len(a) == 400 and np.array_equal(a, b) and not np.array_equal(a, c)
    gaps = np.diff(a)
    assert 0.7 < gaps.std() / gaps.mean() < 1.3  # exponential gaps: coefficient of variation ~1
    const = schedule(LoadProfile(kind="rate", rate=100, arrivals="constant"), 1.0)
    assert np.allclose(np.diff(const), 0.01)
    assert len(schedule(load, 0.1, min_requests=50)) == 50
    with pytest.raises(GptTritonError):
        schedule(LoadProfile(kind="rate", rate=0), 1.0)


def test_replay_files_parse(tmp_path: Path) -> None:
    jsonl = tmp_path / "trace.jsonl"
    rows = [{"t": 10.5 - i * 0.1, "inputs": {"x": {"shape": [1, 16], "dtype": "FP32", "data": [i] * 16}}} for i in range(3)]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    offsets, payloads = load_replay(jsonl)
    assert offsets is not None and np.allclose(offsets, [0.0, 0.1, 0.2])
    assert payloads[0]["x"].dtype == np.float32 and payloads[0]["x"][0, 0] == 2  # sorted by time
    pa = tmp_path / "input.json"
    pa.write_text(json.dumps({"data": [{"x": {"content": list(range(32)), "shape": [2, 16]}}]}))
    none, payloads = load_replay(pa, {"x": "FP32"})
    assert none is None and payloads[0]["x"].shape == (2, 16) and payloads[0]["x"].dtype == np.float32
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"inputs": {}}\n')
    with pytest.raises(GptTritonError, match="bad.jsonl:1"):
        load_replay(bad)


def test_pinning_reports_sharing() -> None:
    with pinned() as info:
        assert info["cores"] >= 1 and "note" in info
        assert info["pinned"] == (info["cores"] > 2)


@pytest.mark.slow
def test_closed_loop_counts_match_the_server(delay_models: EmbeddedTriton, requests_x: list) -> None:
    w = run_window(delay_models.grpc_url, "measure_fast", requests_x, LoadProfile(concurrency=2), 0.4,
                   min_requests=50, metrics_url=delay_models.metrics_url)
    res = w.result
    assert res.errors == 0 and res.requests >= 50 and w.latencies_ms.size == res.requests
    assert res.server is not None and res.server.success_count == res.requests  # the probe is outside
    assert res.server.compute_infer_ms > 0 and res.server.execution_count == res.requests
    assert res.server.metrics_delta is not None
    assert res.server.metrics_delta["nv_inference_request_success_total"] == res.requests
    assert res.throughput == pytest.approx(res.requests / res.duration_s)
    assert res.p50_ms <= res.p90_ms <= res.p99_ms


@pytest.mark.slow
def test_min_requests_extends_a_window(delay_models: EmbeddedTriton, requests_x: list) -> None:
    w = run_window(delay_models.grpc_url, "measure_slow20", requests_x, LoadProfile(concurrency=1), 0.1, min_requests=15)
    assert w.result.requests >= 15 and w.result.duration_s > 0.25
    assert w.result.server is not None and w.result.server.compute_infer_ms >= 19


@pytest.mark.slow
def test_open_loop_holds_a_low_rate(delay_models: EmbeddedTriton, requests_x: list) -> None:
    w = run_window(delay_models.grpc_url, "measure_fast", requests_x, LoadProfile(kind="rate", rate=60), 0.5, seed=3)
    res = w.result
    assert res.requests == 30 and res.errors == 0
    assert res.rate_held is True and res.rate_achieved is not None and res.rate_achieved >= 0.98 * 60
    assert res.send_lag_p99_ms is not None and w.send_lags_ms.size == 30


@pytest.mark.slow
def test_open_loop_latency_counts_from_the_schedule(delay_models: EmbeddedTriton, requests_x: list) -> None:
    # 20 ms per request = 50/s capacity; at 100/s the queue grows, and so must the measured latency.
    w = run_window(delay_models.grpc_url, "measure_slow20", requests_x, LoadProfile(kind="rate", rate=100,
                   arrivals="constant"), 0.5)
    lat = w.latencies_ms  # completion order == send order for a single FIFO instance
    assert lat.size == 50 and w.result.errors == 0
    assert np.median(lat[-10:]) > np.median(lat[:10]) + 150  # ~25 requests queued by the end -> ~500 ms
    assert w.result.throughput < 60  # the server's capacity, not the offered rate
    assert w.result.server is not None and w.result.server.queue_ms > 50


@pytest.mark.slow
def test_two_generator_processes_merge(delay_models: EmbeddedTriton, requests_x: list) -> None:
    w = run_window(delay_models.grpc_url, "measure_fast", requests_x, LoadProfile(kind="rate", rate=100), 0.5,
                   processes=2)
    assert w.result.requests == 50 and w.result.errors == 0 and w.send_lags_ms.size == 50
    assert w.result.server is not None and w.result.server.success_count == 50


@pytest.mark.slow
def test_replay_honours_timestamps(delay_models: EmbeddedTriton, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"t": 100 + 0.02 * i, "inputs": {"x": {"shape": [1, 16], "dtype": "FP32", "data": [0.5] * 16}}} for i in range(10)]
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    w = run_window(delay_models.grpc_url, "measure_fast", [], LoadProfile(kind="replay", replay_file=str(trace)), 0.4)
    # 10 requests per 0.2 s period, cycled over 0.4 s
    assert w.result.requests == 20 and w.result.errors == 0
    assert w.result.rate_achieved is not None and w.result.rate_achieved == pytest.approx(50, rel=0.1)


@pytest.mark.slow
def test_errors_are_counted_not_raised(delay_models: EmbeddedTriton) -> None:
    wrong = [{"x": np.zeros((1, 3), np.float32)}]  # wrong shape: Triton rejects every request
    w = run_window(delay_models.grpc_url, "measure_fast", wrong, LoadProfile(concurrency=1), 0.2)
    assert w.result.errors == w.result.requests > 0 and w.latencies_ms.size == 0
    assert w.first_error


def _raw(lags_ms: np.ndarray, offsets: np.ndarray) -> Raw:
    raw = Raw(start=100.0)
    raw.send_lags_ms = list(lags_ms)
    raw.latencies_ms = list(lags_ms + 1.0)
    raw.sent = len(offsets)
    raw.last_send = 100.0 + float(offsets[-1]) + float(lags_ms[-1]) / 1e3
    raw.end = raw.last_send + 0.001
    return raw


def test_rate_held_flags_a_generator_that_falls_behind() -> None:
    load = LoadProfile(kind="rate", rate=1000, arrivals="constant")
    offsets = schedule(load, 1.0)
    process, server = Constant(1000), ServerBreakdown()
    on_time = summarise(process, [_raw(np.full(1000, 0.5), offsets)], offsets, 1.0, server)
    assert on_time.result.rate_held is True and on_time.result.rate_achieved == pytest.approx(1000, rel=0.01)
    # Sends drift later and later (0 -> 15 ms): p99 lag stays under 20 ms, but the lag grows.
    drifting = summarise(process, [_raw(np.linspace(0, 15, 1000), offsets)], offsets, 1.0, server)
    assert drifting.result.rate_held is False
    # Late by 200 ms at the end: the schedule's span is overrun, achieved < 98% of the target.
    late = summarise(process, [_raw(np.linspace(0, 200, 1000), offsets)], offsets, 1.0, server)
    assert late.result.rate_held is False and late.result.rate_achieved is not None
    assert late.result.rate_achieved < 0.98 * 1000
    spiky = np.full(1000, 0.5)
    spiky[::50] = 60.0  # 2% of sends 60 ms late: jitter, not falling behind, but p99 > 20 ms
    assert summarise(process, [_raw(spiky, offsets)], offsets, 1.0, server).result.rate_held is False


def test_a_serialised_request_carries_the_payload_and_outputs() -> None:
    from tritonclient.grpc import service_pb2

    from gpt_triton.measure.sender import serialised_request

    payload = {"x": np.arange(32, dtype=np.float32).reshape(2, 16), "s": np.array([b"ab", b"c"], dtype=np.object_)}
    request = service_pb2.ModelInferRequest.FromString(serialised_request("m", payload, ["y"]))
    assert request.model_name == "m" and [o.name for o in request.outputs] == ["y"]
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [("x", "FP32", [2, 16]), ("s", "BYTES", [2])]
    assert np.array_equal(np.frombuffer(request.raw_input_contents[0], np.float32), np.arange(32))
    assert request.raw_input_contents[1] == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"  # Triton's length-prefixed BYTES


@pytest.mark.slow
def test_the_lean_loop_at_concurrency_one_matches_the_server(delay_models: EmbeddedTriton, requests_x: list) -> None:
    from gpt_triton.measure.sender import Job, drive_lean

    w = run_window(delay_models.grpc_url, "measure_slow20", requests_x, LoadProfile(concurrency=1), 0.2,
                   min_requests=12, metrics_url=delay_models.metrics_url)
    res = w.result
    assert res.errors == 0 and res.requests == w.latencies_ms.size >= 12
    assert res.server is not None and res.server.success_count == res.requests  # the probe is outside
    assert np.all(w.latencies_ms >= 20.0)  # each request slept 20 ms: the clock spans the whole call
    with pytest.raises(ValueError, match="concurrency 1"):
        drive_lean(Job(delay_models.grpc_url, "measure_fast", requests_x, None, 2, None, 0.1, 0))


@pytest.mark.slow
def test_the_lean_loop_settles_before_it_counts(delay_models: EmbeddedTriton, requests_x: list) -> None:
    """settle_s: requests go to the model first, uncounted by the window and outside the server-side
    breakdown (the previous model's carry-over is not this model's latency)."""
    from gpt_triton.measure.server_stats import stats_json

    def served() -> int:
        stats = stats_json(delay_models.client().get_inference_statistics("measure_slow20", as_json=True))
        return int(stats.get("success_count", 0))

    before = served()
    w = run_window(delay_models.grpc_url, "measure_slow20", requests_x, LoadProfile(concurrency=1), 0.1,
                   min_requests=4, metrics_url=delay_models.metrics_url, settle_s=0.2)
    res = w.result
    assert res.errors == 0 and res.requests == w.latencies_ms.size >= 4
    assert res.server is not None and res.server.success_count == res.requests
    # the probe, then 20 ms requests for 0.2 s, then the counted ones
    assert served() - before >= res.requests + 1 + 8
