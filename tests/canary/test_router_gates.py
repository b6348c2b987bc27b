"""Router, gates and policy logic without a server (the end-to-end tests use real Triton/Prometheus)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

from gpt_triton.canary import (
    CanaryPolicy,
    GateConfig,
    GateResult,
    LocalRouterShifter,
    PromQLGates,
    WeightedRouter,
    combine,
)
from gpt_triton.canary.cli import npz_requests, parse_steps, synthetic_requests
from gpt_triton.canary.gates import check_window, default_window, promql_duration
from gpt_triton.canary.router import TrafficShifter
from gpt_triton.cli import main
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.shifting import TrafficShifter as CoreTrafficShifter
from gpt_triton.k8s.shifter import DeploymentReplicaShifter
from gpt_triton.metrics.prometheus import PrometheusClient
from gpt_triton.testing.conformance.shifters import TrafficShifterConformance

ROUTED = 4000  # requests routed to observe a share: binomial sd <= 0.008


class TestLocalRouterShifterConformance(TrafficShifterConformance):
    resolution = 0.0  # the router picks per request: exactly the weight set
    observed_tolerance = 0.04  # five binomial sds of the share of ROUTED requests

    def make(self) -> LocalRouterShifter:
        self.router = WeightedRouter("1", "2", seed=7)
        return LocalRouterShifter(self.router, drain_timeout_s=5)

    def observed_share(self) -> float:
        picks = [self.router.choose() for _ in range(ROUTED)]
        for version in picks:
            self.router.done(version)
        return picks.count("2") / ROUTED


def test_router_sends_the_weighted_share_and_exact_extremes() -> None:
    router = WeightedRouter("1", "2", seed=1)
    for _ in range(200):
        with router.route() as version:
            assert version == "1"  # weight 0: never the candidate
    router.set_weight(0.3)
    for _ in range(4000):
        with router.route():
            pass
    share = router.sent["2"] / 4000
    assert 0.26 < share < 0.34  # binomial sd ~0.007: a 5-sigma band
    router.set_weight(1.0)
    before = router.sent["1"]
    for _ in range(200):
        with router.route() as version:
            assert version == "2"
    assert router.sent["1"] == before


def test_router_rejects_bad_weights_and_equal_versions() -> None:
    with pytest.raises(GptTritonError, match="outside"):
        WeightedRouter("1", "2").set_weight(1.5)
    with pytest.raises(GptTritonError, match="both version"):
        WeightedRouter("3", "3")


def test_shift_to_zero_waits_for_in_flight_candidate_requests() -> None:
    """set_weight(0) must not return while a request to the candidate is still running."""
    router = WeightedRouter("1", "2", weight=1.0)
    shifter = LocalRouterShifter(router, drain_timeout_s=10)
    assert isinstance(shifter, TrafficShifter)
    release = threading.Event()
    entered = threading.Event()

    def slow_request() -> None:
        with router.route() as version:
            assert version == "2"
            entered.set()
            release.wait(10)

    worker = threading.Thread(target=slow_request)
    worker.start()
    assert entered.wait(10)
    returned = threading.Event()
    def shift() -> None:
        shifter.set_weight(0.0)
        returned.set()

    shifting = threading.Thread(target=shift)
    shifting.start()
    assert not returned.wait(0.3)  # still draining: the candidate request has not finished
    assert router.in_flight("2") == 1
    with router.route() as version:  # new traffic already goes to stable
        assert version == "1"
    release.set()
    assert returned.wait(10)
    worker.join()
    shifting.join()
    assert router.in_flight("2") == 0


def test_drain_times_out_with_a_one_line_error() -> None:
    router = WeightedRouter("1", "2", weight=1.0)
    version = router.choose()
    with pytest.raises(GptTritonError, match="still in flight"):
        router.drain(version, timeout_s=0.2)
    router.done(version)


def result(verdict: str) -> GateResult:
    return GateResult("g", "q", None if verdict == "inconclusive" else 1.0, 1.0, verdict)  # type: ignore[arg-type]


def test_combine_fail_beats_inconclusive_beats_pass() -> None:
    assert combine([result("pass"), result("pass")]) == "pass"
    assert combine([result("pass"), result("inconclusive")]) == "inconclusive"
    assert combine([result("inconclusive"), result("fail")]) == "fail"


def test_gate_queries_select_one_version_and_sum_instances() -> None:
    gates = PromQLGates(PrometheusClient("http://127.0.0.1:1"), model='we"ird', stable="1", candidate="2",
                        window_s=2.5, config=GateConfig(), selector='job="triton"')
    query = gates.mean_latency_ms_query("2")
    assert 'model="we\\"ird", version="2", job="triton"' in query
    assert query.startswith("sum(rate(nv_inference_request_duration_us{") and "[2500ms]" in query
    assert "nv_inference_request_failure" in gates.failure_rate_query("2")


def test_policy_and_steps_validation() -> None:
    assert parse_steps("10,25,50,100") == [0.1, 0.25, 0.5, 1.0]
    with pytest.raises(GptTritonError, match="percentages"):
        parse_steps("10,x")
    with pytest.raises(GptTritonError, match="increasing"):
        CanaryPolicy(steps=[0.5, 0.25])
    with pytest.raises(GptTritonError, match="increasing"):
        CanaryPolicy(steps=[0.5, 1.5])
    with pytest.raises(GptTritonError, match="at least 1"):
        CanaryPolicy(steps=[1.0], failure_limit=0)


def model_config(max_batch_size: int) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=max_batch_size)
    config.input.add(name="images", data_type=model_config_pb2.TYPE_FP32, dims=[3, -1, 8])
    config.input.add(name="ids", data_type=model_config_pb2.TYPE_INT64, dims=[2])
    return config


def test_synthetic_requests_follow_the_config() -> None:
    batched = synthetic_requests(model_config(8), count=3)
    assert len(batched) == 3
    assert batched[0]["images"].shape == (1, 3, 1, 8) and batched[0]["images"].dtype == np.float32
    assert batched[0]["ids"].shape == (1, 2) and batched[0]["ids"].dtype == np.int64
    assert synthetic_requests(model_config(0), count=1)[0]["images"].shape == (3, 1, 8)


def test_npz_traffic_is_split_per_request(tmp_path: Path) -> None:
    path = tmp_path / "traffic.npz"
    np.savez(path, images=np.zeros((5, 3, 4, 8), np.float32), ids=np.ones((5, 2), np.int64))
    requests = npz_requests(path, model_config(8))
    assert len(requests) == 5 and requests[0]["images"].shape == (1, 3, 4, 8)
    np.savez(path, images=np.zeros((5, 3, 4, 8), np.float32))
    with pytest.raises(GptTritonError, match="lacks inputs"):
        npz_requests(path, model_config(8))


def test_both_shifters_share_the_declared_base() -> None:
    # The canary re-exports core's base; the Kubernetes shifter (tested against it in tests/k8s) and the
    # local one are both declared subclasses, not structural look-alikes.
    assert TrafficShifter is CoreTrafficShifter
    assert issubclass(DeploymentReplicaShifter, TrafficShifter) and issubclass(LocalRouterShifter, TrafficShifter)


def test_every_gate_query_selects_namespace_and_model() -> None:
    gates = PromQLGates(PrometheusClient("http://127.0.0.1:1"), model="m", stable="1", candidate="2", window_s=60.0,
                        config=GateConfig(max_latency_ms=100.0, max_queue_ratio=0.5), namespace="team-a")
    queries = [gates.latency_ms_query("2"), gates.mean_latency_ms_query("2"), gates.failure_rate_query("2"),
               gates.queue_ratio_query("2")]
    for query in queries:
        selectors = re.findall(r"\{([^}]*)\}", query)
        assert selectors and all(s.startswith('namespace="team-a", model="m", version="2"') for s in selectors), query
    assert gates.latency_ms_query("2") == \
        'max(nv_inference_request_summary_us{namespace="team-a", model="m", version="2", quantile="0.99"}) / 1000'
    assert "[1m]" in gates.failure_rate_query("2")
    # Locally (no namespace label on the series) the default selects the label's absence.
    local = PromQLGates(PrometheusClient("http://127.0.0.1:1"), model="m", stable="1", candidate="2", window_s=4.0,
                        config=GateConfig())
    assert 'namespace="", model="m"' in local.failure_rate_query("2") and "[4s]" in local.failure_rate_query("2")


def test_window_defaults_to_four_scrapes_and_refuses_less() -> None:
    assert default_window(15.0) == 60.0 and promql_duration(60.0) == "1m"
    assert default_window(15.0, analysis_interval_s=120.0) == 120.0
    assert promql_duration(2.5) == "2500ms" and promql_duration(15.0) == "15s"
    check_window(60.0, 15.0)
    with pytest.raises(GptTritonError, match="fewer than 4 scrape intervals.*at least 1m"):
        check_window(10.0, 15.0)


def test_short_window_is_bad_input_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["canary", "--repository", "/nonexistent", "--model", "m", "--candidate-version", "2",
                 "--prometheus", "http://127.0.0.1:1", "--window", "10s"])
    err = capsys.readouterr().err
    assert code == 2 and "--window 10s" in err and "--scrape-interval 15s" in err and err.count("\n") == 1
