"""push_run_metrics against a real Pushgateway, read back from its /metrics and through Prometheus."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from prom_fixtures import poll
from prometheus_client.parser import text_string_to_metric_families
from pushed_report import make_report

from gpt_triton.canary import CanaryMetrics
from gpt_triton.core.errors import GptTritonError
from gpt_triton.metrics.pushgateway import push_run_metrics

JOB = "gpt_triton_tune"


def gateway_samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("job") == JOB:
                labels = {k: v for k, v in sample.labels.items() if k not in ("job", "instance")}
                out[(sample.name, frozenset(labels.items()))] = sample.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset({"model": "tiny_mlp", **labels}.items()))]


def test_push_then_failure_keeps_last_success(tmp_path: Path, pushgateway) -> None:
    report = make_report(tmp_path)
    before = time.time()
    push_run_metrics(pushgateway.address, report)
    samples = gateway_samples(pushgateway.url)
    assert value(samples, "gpt_triton_candidates", status="measured") == 2
    assert value(samples, "gpt_triton_candidates", status="crashed") == 1
    assert value(samples, "gpt_triton_candidates", status="built") == 0
    assert value(samples, "gpt_triton_build_seconds") == pytest.approx(4.25)
    assert value(samples, "gpt_triton_winner_latency_seconds", metric="p99") == pytest.approx(0.0025)
    assert value(samples, "gpt_triton_baseline_latency_seconds", metric="p99") == pytest.approx(0.0035)
    assert value(samples, "gpt_triton_gain_ratio_lower") == pytest.approx(1.2)
    assert value(samples, "gpt_triton_accuracy_exceedance_bound_ratio") == pytest.approx(0.072)
    success = value(samples, "gpt_triton_last_success_timestamp_seconds")
    assert before <= success <= time.time()
    assert not [s for s in samples if s[0] == "gpt_triton_last_failure_timestamp_seconds"], samples
    # The grouping key has no instance: the pushed series carry an empty instance label.
    assert all(dict(labels).get("instance", "") == "" for _, labels in samples)

    failed = make_report(tmp_path, status="failed")
    failed.candidates[1].status = "failed"
    push_run_metrics(pushgateway.address, failed)
    samples = gateway_samples(pushgateway.url)
    assert value(samples, "gpt_triton_last_success_timestamp_seconds") == success  # unchanged
    assert value(samples, "gpt_triton_last_failure_timestamp_seconds") >= success
    assert value(samples, "gpt_triton_candidates", status="failed") == 1


def test_unreachable_gateway_is_one_line_error(tmp_path: Path) -> None:
    from prom_fixtures import free_port

    with pytest.raises(GptTritonError, match="cannot push metrics to Pushgateway") as info:
        push_run_metrics(f"127.0.0.1:{free_port()}", make_report(tmp_path))
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_prometheus_scrapes_pushed_run_with_honor_labels(tmp_path: Path, pushgateway, prometheus_factory) -> None:
    push_run_metrics(pushgateway.address, make_report(tmp_path))
    prom = prometheus_factory(triton_targets=[], pushgateway_targets=[pushgateway.address])
    query = 'gpt_triton_gain_ratio{job="gpt_triton_tune", model="tiny_mlp"}'
    samples = poll(lambda: prom.client.query(query), 20, "Prometheus to scrape the Pushgateway")
    assert samples[0].value == pytest.approx(1.4)  # type: ignore[index]
    # honor_labels kept the pushed job instead of the scrape job "pushgateway"
    age = prom.client.query_value("time() - max(gpt_triton_last_success_timestamp_seconds)")
    assert age is not None and 0 <= age < 60


def test_canary_decisions_are_grouped_by_namespace_and_replaced_by_the_next_canary(pushgateway) -> None:
    """The rolled-back alert's series: one decision per namespace/model group; the next canary replaces it."""
    def decisions() -> set[tuple[str, str, str]]:
        with urllib.request.urlopen(f"{pushgateway.url}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {(s.labels.get("namespace", ""), s.labels["candidate"], s.labels["decision"])
                for family in text_string_to_metric_families(text) for s in family.samples
                if s.name == "gpt_triton_canary_decision_info"}

    rolled = CanaryMetrics("m", "1", "3", pushgateway=pushgateway.address, namespace="team-a")
    rolled.observe("rolled_back", 0.0, 1)
    rolled.push()
    other = CanaryMetrics("m", "1", "2", pushgateway=pushgateway.address, namespace="team-b")
    other.observe("promoted", 1.0, 0)
    other.push()
    assert decisions() == {("team-a", "3", "rolled_back"), ("team-b", "2", "promoted")}
    retry = CanaryMetrics("m", "1", "4", pushgateway=pushgateway.address, namespace="team-a")
    retry.observe("serving_both", 0.0, 0)
    retry.push()
    assert decisions() == {("team-a", "4", "serving_both"), ("team-b", "2", "promoted")}
