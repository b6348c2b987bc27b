"""Fixtures for the Kubernetes tests: the fake API server and the helm binary."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fake_apiserver import FakeKubernetesApiServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_api() -> Iterator[FakeKubernetesApiServer]:
    server = FakeKubernetesApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def helm() -> str:
    """helm from .cache/bin (scripts/install-helm.sh) or PATH."""
    local = ROOT / ".cache" / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("helm")
    if found:
        return found
    pytest.skip("helm not found in .cache/bin/helm or on PATH: run scripts/install-helm.sh (make setup)")
