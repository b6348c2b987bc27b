"""Kubernetes fixtures for every test area: the fake API server (no API server runs here) and helm.

Loaded from the root conftest via ``pytest_plugins`` so the k8s and canary tests share one copy.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s.fake_apiserver import FakeKubernetesApiServer

ROOT = Path(__file__).resolve().parents[1]


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
