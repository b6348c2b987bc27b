"""The shipped monitoring assets: promtool accepts them, the alert rules behave, the dashboard's PromQL parses."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prom_fixtures import SETUP_HINT, poll

from gpt_triton.core.errors import GptTritonError
from gpt_triton.metrics.prometheus import monitoring_dir, render_prometheus_config

HERE = Path(__file__).parent


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(binary).is_file():
        pytest.fail(f"promtool not found: {SETUP_HINT}", pytrace=False)
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_promtool_checks_rules_and_shipped_config() -> None:
    rules = promtool("check", "rules", str(monitoring_dir() / "rules.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert re.search(r"SUCCESS: (\d+) rules found", rules.stdout)
    config = promtool("check", "config", str(monitoring_dir() / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr


def test_rendered_config_passes_promtool(tmp_path: Path) -> None:
    shutil.copy(monitoring_dir() / "rules.yml", tmp_path / "rules.yml")
    path = tmp_path / "prometheus.yml"
    path.write_text(render_prometheus_config(
        triton_targets=["triton-0:8002", "triton-1:8002"], pushgateway_targets=["pushgateway:9091"],
        scrape_interval="5s", rule_files=["rules.yml"],
    ))
    result = promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    text = path.read_text()
    assert "triton-1:8002" in text and "honor_labels: true" in text and "scrape_interval: 5s" in text


def test_promtool_unit_tests_of_alerts(tmp_path: Path) -> None:
    shutil.copy(monitoring_dir() / "rules.yml", tmp_path / "rules.yml")
    shutil.copy(HERE / "rules_test.yml", tmp_path / "rules_test.yml")
    result = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_test_detects_a_broken_threshold(tmp_path: Path) -> None:
    """The unit test above is not vacuous: loosen the failure threshold and it must fail."""
    rules = (monitoring_dir() / "rules.yml").read_text()
    assert "model_version:triton_request_failure:ratio1m > 0.01" in rules
    (tmp_path / "rules.yml").write_text(rules.replace("ratio1m > 0.01", "ratio1m > 0.05"))
    shutil.copy(HERE / "rules_test.yml", tmp_path / "rules_test.yml")
    result = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert result.returncode != 0 and "TritonHighFailureRate" in result.stdout + result.stderr


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((monitoring_dir() / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_dashboard_uses_recorded_and_pushed_series() -> None:
    exprs = " ".join(dashboard_exprs())
    rules = (monitoring_dir() / "rules.yml").read_text()
    recorded = set(re.findall(r"\bnamespace_model_version:[a-z_0-9:]+", exprs))
    assert "namespace_model_version:triton_request_latency_seconds:p99" in recorded
    for name in recorded:
        assert f"record: {name}" in rules, name
    for needed in ("gpt_triton_canary_weight", "nv_inference_pending_request_count", "gpt_triton_gain_ratio",
                   "gpt_triton_canary_decision_info", "nv_gpu_utilization", "nv_gpu_memory_used_bytes",
                   "nv_inference_exec_count", "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us"):
        assert needed in exprs, needed


def test_dashboard_rates_follow_the_scrape_interval_and_select_the_namespace() -> None:
    """Grafana's $__rate_interval (>= 4 scrapes) in every range, never a fixed window; Triton series by namespace."""
    exprs = dashboard_exprs()
    ranges = [r for e in exprs for r in re.findall(r"\[([^\]]+)\]", e)]
    assert ranges and set(ranges) == {"$__rate_interval"}, ranges
    triton = [e for e in exprs if re.search(r"\bnv_|namespace_model_version:", e)]
    assert len(triton) >= 10
    for expr in triton:
        assert 'namespace=~"$namespace"' in expr, expr
    variables = json.loads((monitoring_dir() / "grafana-dashboard.json").read_text())["templating"]["list"]
    assert [v["name"] for v in variables] == ["datasource", "namespace", "model"]


def test_recording_rules_aggregate_by_namespace_model_version() -> None:
    rules = yaml.safe_load((monitoring_dir() / "rules.yml").read_text())
    recorded = {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    for name, expr in recorded.items():
        if name.startswith("namespace_model_version:") and re.search(r"(?<![:\w])nv_", expr):  # raw Triton series
            groupings = re.findall(r"(?:sum|max) by \(([^)]*)\)", expr)
            assert groupings and all(g == "namespace, model, version" for g in groupings), (name, expr)
    assert 'quantile="0.99"' in recorded["namespace_model_version:triton_request_latency_seconds:p99"]


def rule_exprs() -> list[str]:
    rules = yaml.safe_load((monitoring_dir() / "rules.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


@pytest.mark.slow
def test_dashboard_and_rule_queries_parse_in_prometheus(prometheus_factory) -> None:
    prom = prometheus_factory(triton_targets=[])
    poll(prom.client.ready, 10, "Prometheus ready")
    exprs = [expr.replace("$model", ".*").replace("$namespace", ".*").replace("$__rate_interval", "1m")
             for expr in dashboard_exprs()] + rule_exprs()
    assert len(exprs) >= 10, exprs
    for expr in exprs:
        # A parse error raises GptTritonError; a query that is not an instant vector raises too. With no
        # target scraped, every series is empty: anything else would mean the query reads stray data.
        assert prom.client.query(expr) == [], expr
    # Not vacuous: the same call rejects what Prometheus cannot parse, naming the problem.
    with pytest.raises(GptTritonError, match="rejected /api/v1/query: .*parse error"):
        prom.client.query(exprs[0] + " +")
