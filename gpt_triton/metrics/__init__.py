"""Metrics: Prometheus HTTP API client and config rendering; Pushgateway export of tuning runs."""

from gpt_triton.metrics.prometheus import PrometheusClient, Sample, monitoring_dir, render_prometheus_config
from gpt_triton.metrics.pushgateway import push_run_metrics, run_registry

__all__ = ["PrometheusClient", "Sample", "monitoring_dir", "push_run_metrics", "render_prometheus_config", "run_registry"]
