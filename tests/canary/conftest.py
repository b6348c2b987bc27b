"""Canary fixtures: a real Triton serving a model whose versions differ in speed, plus real Prometheus."""

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prom_fixtures import PrometheusService, _binary, _start, _stop, free_port
from sleepy_model import write_sleepy_model

from gpt_triton.metrics.prometheus import PrometheusClient, monitoring_dir, render_prometheus_config
from gpt_triton.server import EmbeddedTriton, TritonServer


@pytest.fixture
def sleepy_triton(tmp_path: Path) -> Iterator[TritonServer]:
    """A real Triton over a repository holding model "sleepy" (versions 1-3, none loaded yet)."""
    repository = tmp_path / "repository"
    write_sleepy_model(repository)
    with EmbeddedTriton(repository, workdir=tmp_path / "triton") as server:
        yield server


@pytest.fixture
def labelled_prometheus(tmp_path: Path) -> Iterator[Callable[..., PrometheusService]]:
    """``start(triton_targets=[...], labels={"namespace": "ns"})``: a real Prometheus whose Triton targets carry
    target labels, as a ServiceMonitor's targets carry ``namespace`` on a cluster. Stopped at teardown."""
    started = []

    def start(*, triton_targets: list[str], labels: dict[str, str], scrape_interval: str = "1s",
              with_rules: bool = False) -> PrometheusService:
        """``with_rules``: also evaluate the shipped recording and alert rules (every scrape interval)."""
        index = len(started)
        rules = []
        if with_rules:
            shutil.copy(monitoring_dir() / "rules.yml", tmp_path / "rules.yml")
            rules = [str(tmp_path / "rules.yml")]
        config = yaml.safe_load(render_prometheus_config(triton_targets=triton_targets, scrape_interval=scrape_interval,
                                                         rule_files=rules))
        triton = next(job for job in config["scrape_configs"] if job["job_name"] == "triton")
        triton["static_configs"] = [{"targets": triton_targets, "labels": labels}]
        path = tmp_path / f"labelled-prometheus-{index}.yml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        service = _start([_binary("prometheus"), f"--config.file={path}", f"--web.listen-address=127.0.0.1:{port}",
                          f"--storage.tsdb.path={tmp_path / f'labelled-tsdb-{index}'}"],
                         tmp_path / f"labelled-prometheus-{index}.log", "/-/ready", port)
        started.append(service.process)
        return PrometheusService(**vars(service), client=PrometheusClient(service.url))

    try:
        yield start
    finally:
        for process in started:
            _stop(process)
