"""The example classifier with one numerically sensitive stage, and confidently classified tuning data."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _example() -> ModuleType:
    """examples/precision_model.py, loaded from its file (examples/ is scripts, not an installed package)."""
    spec = importlib.util.spec_from_file_location("precision_model_example", ROOT / "examples" / "precision_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example()


@pytest.fixture(scope="session")
def precision_mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Half the example's width: the same numerics (the outlier channel breaks per-tensor int8), faster builds.
    return EXAMPLE.build_precision_mlp(tmp_path_factory.mktemp("precision") / "precision_mlp.onnx", width=1024)


@pytest.fixture(scope="session")
def precision_inputs(precision_mlp: Path) -> np.ndarray:
    """``x``: [12 requests, 16, 256]."""
    path = EXAMPLE.build_reference(precision_mlp, precision_mlp.with_name("reference.npz"), requests=12, batch=16)
    with np.load(path) as data:
        return np.array(data["x"])
