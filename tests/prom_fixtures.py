"""Fixtures that run a real Prometheus and a real Pushgateway on ephemeral loopback ports.

Import them into a test package's conftest (``from prom_fixtures import prometheus_factory, pushgateway``
after putting ``tests/`` on sys.path). Every process started here is stopped at teardown.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpt_triton.metrics.prometheus import PrometheusClient, monitoring_dir, render_prometheus_config

START_TIMEOUT_S = 30.0
SETUP_HINT = "run `make setup` (it apt-installs prometheus and prometheus-pushgateway, which bring promtool)"


def _binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file() else None)
    if path is None:
        pytest.fail(f"{name} not found: {SETUP_HINT}", pytrace=False)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http_ok(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = START_TIMEOUT_S) -> None:
    """Poll ``url`` until it answers 200; fail early with the log tail if the process died."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(urllib.error.URLError, OSError), urllib.request.urlopen(url, timeout=1.0) as response:
            if response.status == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not ready after {timeout_s} s: {log.read_text()[-2000:]}")
        time.sleep(0.05)  # polling interval of a condition with a deadline


def poll(condition: Callable[[], object], timeout_s: float, what: str) -> object:
    """Return the first truthy ``condition()``; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


@dataclass
class Service:
    url: str  # http://127.0.0.1:PORT
    address: str  # 127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def _start(command: list[str], log: Path, ready_path: str, port: int) -> Service:
    with open(log, "ab") as handle:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    try:
        wait_http_ok(f"http://{address}{ready_path}", process, log)
    except BaseException:
        _stop(process)
        raise
    return Service(url=f"http://{address}", address=address, process=process, log=log)


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Service]:
    """A running Pushgateway, persisting to tmp_path only.

    Debian's build defaults ``--persistence.file`` to /var/lib/prometheus/pushgateway.data: without an
    explicit file every test gateway would share (and restore) the same groups.
    """
    port = free_port()
    service = _start(
        [_binary("prometheus-pushgateway"), f"--web.listen-address=127.0.0.1:{port}",
         f"--persistence.file={tmp_path / 'pushgateway.data'}"],
        tmp_path / "pushgateway.log", "/-/ready", port,
    )
    try:
        yield service
    finally:
        _stop(service.process)


@dataclass
class PrometheusService(Service):
    client: PrometheusClient


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[..., PrometheusService]]:
    """``start(triton_targets=[...], pushgateway_targets=[...], scrape_interval="1s")`` -> a ready Prometheus.

    The config is rendered from the bundled template, so tests exercise the shipped scrape jobs.
    """
    started: list[subprocess.Popen[bytes]] = []

    def start(
        *, triton_targets: list[str], pushgateway_targets: list[str] | None = None, scrape_interval: str = "1s",
        labels: dict[str, str] | None = None, with_rules: bool = False,
    ) -> PrometheusService:
        """``labels``: target labels on the Triton targets, as a ServiceMonitor's carry ``namespace`` on a
        cluster; ``with_rules``: also evaluate the shipped recording and alert rules."""
        index = len(started)
        rules = []
        if with_rules:
            shutil.copy(monitoring_dir() / "rules.yml", tmp_path / "rules.yml")
            rules = [str(tmp_path / "rules.yml")]
        rendered = yaml.safe_load(render_prometheus_config(
            triton_targets=triton_targets, pushgateway_targets=pushgateway_targets,
            scrape_interval=scrape_interval, rule_files=rules,
        ))
        if labels:
            triton = next(job for job in rendered["scrape_configs"] if job["job_name"] == "triton")
            triton["static_configs"] = [{"targets": triton_targets, "labels": labels}]
        config = tmp_path / f"prometheus-{index}.yml"
        config.write_text(yaml.safe_dump(rendered))
        port = free_port()
        command = [
            _binary("prometheus"), f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={tmp_path / f'tsdb-{index}'}", "--web.enable-lifecycle",
        ]
        service = _start(command, tmp_path / f"prometheus-{index}.log", "/-/ready", port)
        started.append(service.process)
        return PrometheusService(**vars(service), client=PrometheusClient(service.url))

    try:
        yield start
    finally:
        for process in started:
            _stop(process)
