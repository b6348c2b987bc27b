"""Shared fixtures for the promotion tests: a key, a model config, and a version writer."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

KEY = bytes.fromhex("8f" * 32)


@pytest.fixture
def key() -> bytes:
    return KEY


@pytest.fixture
def config() -> model_config_pb2.ModelConfig:
    cfg = model_config_pb2.ModelConfig(backend="python", max_batch_size=8)
    tensor = cfg.input.add()
    tensor.name, tensor.data_type = "x", model_config_pb2.TYPE_FP32
    tensor.dims.extend([16])
    return cfg


def _make_writer(payload: str) -> Callable[[Path], None]:
    """A write_version that fills a version folder with a model file, a nested file and an artifact."""

    def write(version_dir: Path) -> None:
        (version_dir / "model.py").write_text(f"# adapter {payload}\n")
        (version_dir / "artifact").mkdir()
        (version_dir / "artifact" / "model.onnx").write_bytes(payload.encode() * 100)

    return write


def _tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file below root, by relative path: compares a folder before and after."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def make_writer() -> Callable[[str], Callable[[Path], None]]:
    return _make_writer


@pytest.fixture
def tree_digest() -> Callable[[Path], dict[str, str]]:
    return _tree_digest
