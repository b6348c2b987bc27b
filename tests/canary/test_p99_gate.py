"""The p99 gate on the real thing: the embedded Triton exports latency summaries, a real Prometheus scrapes
them under a namespace label (as a ServiceMonitor target has it), and the gates read the worst pod's p99."""

from __future__ import annotations

import re
import urllib.request

import pytest
from prom_fixtures import poll
from sleepy_model import SLEEP_MS, write_sleepy_model

from gpt_triton.canary import GateConfig, PromQLGates, TrafficLoop, TritonVersions, WeightedRouter
from gpt_triton.canary.cli import synthetic_requests
from gpt_triton.canary.gates import NO_P99_HINT
from gpt_triton.server import EmbeddedTriton

NS = "team-a"
RECORDED = ("namespace_model_version:triton_request_latency_seconds:p99", "namespace_model_version:triton_queue_seconds:p99",
            "namespace_model_version:triton_batch_size:mean1m", "namespace_model_version:triton_compute_seconds:mean1m",
            "namespace_model_version:triton_queue_seconds:mean1m", "namespace_model_version:triton_request_failure:ratio1m")


def scrape(server) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:
        return response.read().decode()


def test_p99_gate_reads_triton_summaries_through_prometheus(sleepy_triton, labelled_prometheus) -> None:
    versions = TritonVersions.from_repository(sleepy_triton.client(), sleepy_triton.repository, "sleepy")
    versions.serve([1, 3])
    prom = labelled_prometheus(triton_targets=[sleepy_triton.metrics_url.removeprefix("http://").removesuffix("/metrics")],
                               labels={"namespace": NS}, with_rules=True)
    gates = PromQLGates(prom.client, model="sleepy", stable="1", candidate="3", window_s=4.0, namespace=NS,
                        config=GateConfig(max_latency_ratio=1.1, max_latency_ms=1000.0))
    router = WeightedRouter("1", "3", weight=0.5, seed=0)
    with TrafficLoop(sleepy_triton.grpc_url, "sleepy", router, synthetic_requests(versions.config), rate=30):
        results = poll(lambda: (r := gates.evaluate()[0]) and all(g.value is not None for g in r) and r,
                       60.0, "Prometheus to scrape p99 summaries of both versions")
        # The same window and namespace, but the mean: the counters the p99 gate replaces by default.
        mean = PromQLGates(prom.client, model="sleepy", stable="1", candidate="3", window_s=4.0, namespace=NS,
                           config=GateConfig(latency="mean")).evaluate()[0]
        elsewhere = PromQLGates(prom.client, model="sleepy", stable="1", candidate="3", window_s=4.0,
                                namespace="team-b", config=GateConfig()).evaluate()[0]
        # The shipped recording rules over the same real series: the names they read are the server's.
        recorded = {name: poll(lambda name=name: prom.client.query(f'{name}{{namespace="{NS}", version="3"}}'),
                               60.0, f"recording rule {name}")
                    for name in RECORDED}
    by_gate = {r.gate: r for r in results}
    # Triton's own exposition: the summary family the gate reads, with Triton's default quantiles.
    text = scrape(sleepy_triton)
    assert re.search(r'^nv_inference_request_summary_us\{model="sleepy",version="3",quantile="0.99"\} \d', text, re.M)
    assert set(re.findall(r'_summary_us\{[^}]*quantile="([0-9.]+)"', text)) == {"0.5", "0.9", "0.95", "0.99", "0.999"}
    p99_ms = by_gate["latency_ms"]
    assert 'nv_inference_request_summary_us{namespace="team-a", model="sleepy", version="3", quantile="0.99"}' \
        in p99_ms.query
    # v3 sleeps 40 ms a request, v1 10 ms: p99 is at least the sleep and the ratio fails the 1.1 gate.
    assert SLEEP_MS[3] <= p99_ms.value < 10 * SLEEP_MS[3], p99_ms
    ratio = by_gate["latency_ratio"]
    # (Tails on this shared machine carry queueing too, so the ratio is well below 40/10: above the gate is the claim.)
    assert ratio.verdict == "fail" and ratio.value > 1.1, ratio
    assert "(p99)" in ratio.detail
    assert {r.gate: r.verdict for r in mean}["latency_ratio"] == "fail"
    assert "nv_inference_request_duration_us" in {r.gate: r for r in mean}["latency_ratio"].query
    for name, samples in recorded.items():
        assert [(x.labels["namespace"], x.labels["model"]) for x in samples] == [(NS, "sleepy")], name
    values = {name: samples[0].value for name, samples in recorded.items()}
    assert SLEEP_MS[3] / 1000 <= values["namespace_model_version:triton_request_latency_seconds:p99"] < 1.0
    assert values["namespace_model_version:triton_batch_size:mean1m"] >= 1.0
    assert SLEEP_MS[3] / 1000 * 0.9 <= values["namespace_model_version:triton_compute_seconds:mean1m"] < 1.0
    assert 0 <= values["namespace_model_version:triton_queue_seconds:mean1m"] < 1.0
    # Another namespace's series are not this canary's: no data, which is never a pass.
    assert {r.verdict for r in elsewhere} == {"inconclusive"}
    assert all("namespace=\"team-b\"" in r.detail for r in elsewhere)


@pytest.mark.parametrize("model", ["absent"])
def test_no_summary_is_no_data_with_a_hint(labelled_prometheus, model: str) -> None:
    prom = labelled_prometheus(triton_targets=[], labels={"namespace": NS})
    gates = PromQLGates(prom.client, model=model, stable="1", candidate="2", window_s=4.0, namespace=NS,
                        config=GateConfig(max_latency_ms=50.0))
    results, stable_ms = gates.evaluate()
    assert stable_ms is None
    assert [r.verdict for r in results] == ["inconclusive"] * 3
    assert "summary_latencies=true" in results[0].detail and "--latency-stat mean" in results[0].detail


def test_summaries_without_p99_are_named_in_the_hint(tmp_path, labelled_prometheus) -> None:
    """A Triton started with its own quantile set (here only the median) has summaries but no p99: the gate
    has no data and says which flag is missing, rather than that summaries are off."""
    write_sleepy_model(tmp_path / "repository")
    median_only = ("--metrics-config=summary_latencies=true", "--metrics-config=summary_quantiles=0.5:0.05")
    with EmbeddedTriton(tmp_path / "repository", workdir=tmp_path / "triton", metrics_args=median_only) as server:
        versions = TritonVersions.from_repository(server.client(), server.repository, "sleepy")
        versions.serve([1, 2])
        prom = labelled_prometheus(triton_targets=[server.metrics_url.removeprefix("http://").removesuffix("/metrics")],
                                   labels={"namespace": NS})
        gates = PromQLGates(prom.client, model="sleepy", stable="1", candidate="2", window_s=4.0, namespace=NS,
                            config=GateConfig(max_latency_ms=50.0))
        with TrafficLoop(server.grpc_url, "sleepy", WeightedRouter("1", "2", weight=0.5, seed=0),
                         synthetic_requests(versions.config), rate=30):
            poll(lambda: prom.client.query(f'count(nv_inference_request_summary_us{{namespace="{NS}", model="sleepy"}})'),
                 60.0, "Prometheus to scrape the median-only summaries")
            results, stable_ms = gates.evaluate()
    by_gate = {r.gate: r for r in results}
    assert stable_ms is None
    assert by_gate["latency_ms"].verdict == "inconclusive"
    assert NO_P99_HINT in by_gate["latency_ms"].detail and "summary_quantiles" in NO_P99_HINT
