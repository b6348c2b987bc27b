"""perf_analyzer as the load client: finder, input data, and real windows against the embedded Triton."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.core.records import Candidate, DeployInfo
from gpt_triton.core.routes import Route
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.clients import BuiltinClient
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.machine_load import WatchedClient
from gpt_triton.measure.perf_analyzer import (
    ENV_BINARY,
    PerfAnalyzerClient,
    find_perf_analyzer,
    input_data,
    load_arguments,
    load_client,
    read_export,
)
from gpt_triton.server import EmbeddedTriton

TOOL = find_perf_analyzer()
needs_binary = pytest.mark.skipif(TOOL is None, reason="perf_analyzer is not installed here: `make perf-analyzer` "
                                                       "extracts it from the tritonclient 2.41.0 wheel")


def test_input_data_is_base64_without_the_batch_axis() -> None:
    payloads = [{"x": np.arange(32, dtype=np.float32).reshape(2, 16)}, {"x": np.ones((2, 16), np.float32)}]
    doc, batch = input_data(payloads, batch_axis=True)
    assert batch == 2
    first = doc["data"][0]["x"]  # type: ignore[index]
    assert first["shape"] == [16]
    assert np.array_equal(np.frombuffer(base64.b64decode(first["b64"]), np.float32), np.arange(32))
    assert input_data(payloads, batch_axis=False)[0]["data"][0]["x"]["shape"] == [2, 16]  # type: ignore[index]
    with pytest.raises(GptTritonError, match="one batch size per run"):
        input_data([{"x": np.ones((1, 16), np.float32)}, {"x": np.ones((4, 16), np.float32)}], batch_axis=True)


def test_load_arguments_and_what_perf_analyzer_cannot_replay() -> None:
    assert load_arguments(LoadProfile(concurrency=4)) == ["--concurrency-range", "4:4"]
    assert load_arguments(LoadProfile(kind="rate", rate=50, arrivals="constant")) == [
        "--request-rate-range", "50:50", "--request-distribution", "constant"]
    with pytest.raises(GptTritonError, match="built-in client"):
        load_arguments(LoadProfile(kind="replay", replay_file="trace.jsonl"))


def test_read_export_takes_each_requests_last_response(tmp_path: Path) -> None:
    doc = {"experiments": [{"experiment": {"mode": "concurrency", "value": 1}, "requests": [
        {"timestamp": 2_000, "response_timestamps": [5_000]}, {"timestamp": 1_000, "response_timestamps": [1_500, 1_800]},
        {"timestamp": 9_000, "response_timestamps": []}]}]}
    (tmp_path / "export.json").write_text(json.dumps(doc))
    assert read_export(tmp_path / "export.json") == [(1_000, 1_800), (2_000, 5_000)]


def test_a_missing_binary_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_BINARY, str(tmp_path / "nope"))
    monkeypatch.setenv("GPT_TRITON_PERF_ANALYZER_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_perf_analyzer() is None
    with pytest.raises(GptTritonError, match="make perf-analyzer"):
        load_client("perf_analyzer")
    builtin = load_client("builtin")  # watched for the machine's load, as every client load_client makes
    assert isinstance(builtin, WatchedClient) and isinstance(builtin.inner, BuiltinClient)


@needs_binary
def test_the_binary_runs() -> None:
    assert TOOL is not None and "2.41.0" in TOOL.version()


@pytest.mark.slow
@needs_binary
def test_a_perf_analyzer_window_has_per_request_latencies(delay_models: EmbeddedTriton) -> None:
    assert TOOL is not None
    requests = [{"x": np.random.default_rng(k).random((1, 16), dtype=np.float32)} for k in range(3)]
    client = PerfAnalyzerClient(TOOL)
    # 0.3 s at ~45 requests/s holds ~13: the client runs perf_analyzer again until 20 requests are in.
    sample = client.window(delay_models.grpc_url, "measure_slow20", requests, LoadProfile(concurrency=1), 0.3, 20,
                           metrics_url=delay_models.metrics_url)
    res = sample.result
    assert res.requests == sample.latencies_ms.size >= 20 and res.errors == 0
    assert np.all(sample.latencies_ms > 19.0)  # every request slept 20 ms in the model
    assert res.server is not None and res.server.compute_infer_ms > 19.0
    assert res.server.success_count >= res.requests + 1  # the untimed first request of each run is counted there
    assert client.last_csv_p50_ms is not None and abs(client.last_csv_p50_ms - res.p50_ms) < 0.2 * res.p50_ms
    with pytest.raises(GptTritonError, match="failed for model 'no_such_model'"):
        client.window(delay_models.grpc_url, "no_such_model", requests, LoadProfile(concurrency=1), 0.3, 5)
    with pytest.raises(GptTritonError, match=r"perf_analyzer failed on 'measure_fast' \(exit"):  # no input "x"
        client.window(delay_models.grpc_url, "measure_fast", [{"wrong": np.ones((1, 16), np.float32)}],
                      LoadProfile(concurrency=1), 0.3, 5)


@pytest.mark.slow
@needs_binary
def test_a_window_spans_what_was_asked_as_the_built_in_clients_does(delay_models: EmbeddedTriton) -> None:
    """perf_analyzer sleeps 1.2 x ``-p`` per time window: unshortened, a 1.5 s window spanned 1.8 s and
    held 1.2 x the built-in client's requests."""
    assert TOOL is not None
    requests = [{"x": np.ones((1, 16), np.float32)}]
    load = LoadProfile(concurrency=1)
    spans = {}
    for client in (PerfAnalyzerClient(TOOL), BuiltinClient()):
        sample = client.window(delay_models.grpc_url, "measure_slow20", requests, load, 1.5, 0)
        spans[client.name] = sample.result.duration_s
        assert sample.result.errors == 0 and sample.latencies_ms.size > 40
    # Both end within a request (20 ms) of 1.5 s; perf_analyzer's three windows round -p up to the ms.
    assert 1.40 < spans["perf_analyzer"] < 1.56 and abs(spans["perf_analyzer"] - spans["builtin"]) < 0.08, spans


@pytest.mark.slow
@needs_binary
def test_a_window_too_short_for_the_model_is_lengthened_not_failed(delay_models: EmbeddedTriton) -> None:
    """A 0.1 s window is three 100 ms time windows: none holds a whole 250 ms request, which perf_analyzer
    fails with "No valid requests recorded"; the client runs it again with longer windows."""
    assert TOOL is not None
    requests = [{"x": np.ones((1, 16), np.float32)}]
    sample = PerfAnalyzerClient(TOOL).window(delay_models.grpc_url, "measure_slow250", requests,
                                             LoadProfile(concurrency=1), 0.1, 2, metrics_url=delay_models.metrics_url)
    assert sample.result.errors == 0 and sample.latencies_ms.size >= 2
    assert np.all(sample.latencies_ms > 249.0)


@pytest.mark.slow
@needs_binary
def test_the_harness_races_with_perf_analyzer_as_its_client(delay_models: EmbeddedTriton) -> None:
    def cand(cid: str, model: str) -> Candidate:
        return Candidate(id=cid, family="f", route=Route(family="f"), serving=Route(family="serving"),
                         status="deployed", deploy=DeployInfo(model_name=model, backend="python", adapter=True))

    requests = [{"x": np.ones((1, 16), np.float32)}]
    spec = MeasureSpec(client="perf_analyzer", warmup_s=0.0, window_s=0.3, window_min_requests=5, min_windows=2,
                       max_windows=3, bootstrap_resamples=200)
    m = Measurer(delay_models.grpc_url, requests, spec, ObjectiveSpec(metric="p50"))
    assert isinstance(m.client, WatchedClient) and isinstance(m.client.inner, PerfAnalyzerClient)
    run = m.measure([cand("fast", "measure_fast"), cand("slow", "measure_slow20")])
    by_id = {o.candidate_id: o for o in run.outcomes}
    fast, slow = by_id["fast"].latency[0], by_id["slow"].latency[0]
    assert fast.p50_ms is not None and slow.p50_ms is not None and slow.p50_ms.value > 19.0 > fast.p50_ms.value
    assert slow.requests >= 5 and fast.requests >= 5
