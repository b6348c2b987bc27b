"""Run metrics from a cluster: grouped by namespace and GPU product (a real Pushgateway), and best effort
after a promotion (an unreachable gateway is a warning, not a failed Job)."""

from __future__ import annotations

import logging
import urllib.request
from pathlib import Path

import pytest
from metrics.pushed_report import make_report
from prom_fixtures import free_port
from prometheus_client.parser import text_string_to_metric_families

from gpt_triton.metrics.pushgateway import push_best_effort, push_run_metrics


def _groups(url: str) -> set[frozenset[tuple[str, str]]]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    groups = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpt_triton_last_success_timestamp_seconds":
                groups.add(frozenset((k, v) for k, v in sample.labels.items() if k in ("model", "namespace", "gpu_product")))
    return groups


def test_groups_by_namespace_and_gpu_product(tmp_path: Path, pushgateway, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    report = make_report(tmp_path)
    monkeypatch.setenv("POD_NAMESPACE", "ml")
    for product in ("NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"):
        monkeypatch.setenv("GPT_TRITON_GPU_PRODUCT", product)
        push_run_metrics(pushgateway.address, report)
    # Two groups: the L4 push did not overwrite the A100 one.
    assert _groups(pushgateway.url) == {
        frozenset({("model", "tiny_mlp"), ("namespace", "ml"), ("gpu_product", p)})
        for p in ("NVIDIA-A100-SXM4-80GB", "NVIDIA-L4")
    }


def test_push_after_promotion_is_best_effort(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gpt_triton.metrics.pushgateway"):
        assert push_best_effort(f"127.0.0.1:{free_port()}", make_report(tmp_path)) is False
    warning, = (r for r in caplog.records if r.levelno == logging.WARNING)
    assert "metrics not pushed (the run's result stands): cannot push metrics to Pushgateway" in warning.getMessage()
