"""Python models with known artificial costs on the session's real embedded Triton (slow tests)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from delay_model import write_delay_model

from gpt_triton.server import EmbeddedTriton

# name -> seconds of sleep per request (one instance: capacity ~ 1/delay requests/s)
DELAYS = {"measure_fast": 0.0, "measure_fast_b": 0.0, "measure_slow20": 0.020, "measure_slow30": 0.030,
          "measure_slow250": 0.250}


@pytest.fixture(scope="session")
def delay_models(triton_server: EmbeddedTriton) -> EmbeddedTriton:
    """The shared Triton with the DELAYS models loaded (left loaded: the server stops at session end)."""
    assert triton_server.repository is not None
    for name, delay in DELAYS.items():
        triton_server.load(write_delay_model(triton_server.repository, name, {1: delay}))
    return triton_server


@pytest.fixture(scope="session")
def requests_x() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.random((batch, 16), dtype=np.float32)} for batch in (1, 2, 1, 4)]


@pytest.fixture(scope="session")
def import_benchmark() -> Callable[[str], ModuleType]:
    """Imports ``benchmarks/<name>.py`` as a module (the repository root on sys.path only while importing)."""
    root = str(Path(__file__).resolve().parents[2])

    def load(name: str) -> ModuleType:
        sys.path.insert(0, root)
        try:
            return importlib.import_module(f"benchmarks.{name}")
        finally:
            sys.path.remove(root)

    return load
