"""Canary fixtures: a real Triton serving a model whose versions differ in speed, plus real Prometheus."""

import sys
from pathlib import Path

# tests/ is not a package: make tests/prom_fixtures.py importable from here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
from prom_fixtures import prometheus_factory, pushgateway  # noqa: E402,F401
from sleepy_model import write_sleepy_model  # noqa: E402

from gpt_triton.server import EmbeddedTriton, TritonServer  # noqa: E402


@pytest.fixture
def sleepy_triton(tmp_path: Path) -> Iterator[TritonServer]:
    """A real Triton over a repository holding model "sleepy" (versions 1-3, none loaded yet)."""
    repository = tmp_path / "repository"
    write_sleepy_model(repository)
    with EmbeddedTriton(repository, workdir=tmp_path / "triton") as server:
        yield server
