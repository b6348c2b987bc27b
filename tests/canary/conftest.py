"""Canary fixtures: a real Triton serving a model whose versions differ in speed, plus real Prometheus."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prom_fixtures import PrometheusService
from sleepy_model import write_sleepy_model

from gpt_triton.server import EmbeddedTriton, TritonServer


@pytest.fixture
def sleepy_triton(tmp_path: Path) -> Iterator[TritonServer]:
    """A real Triton over a repository holding model "sleepy" (versions 1-3, none loaded yet)."""
    repository = tmp_path / "repository"
    write_sleepy_model(repository)
    with EmbeddedTriton(repository, workdir=tmp_path / "triton") as server:
        yield server


@pytest.fixture
def labelled_prometheus(prometheus_factory: Callable[..., PrometheusService]) -> Callable[..., PrometheusService]:
    """``start(triton_targets=[...], labels={"namespace": "ns"}, with_rules=False)``: a real Prometheus whose
    Triton targets carry target labels, as a ServiceMonitor's targets carry ``namespace`` on a cluster."""
    return prometheus_factory
