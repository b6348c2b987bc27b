"""Shared fixtures: example models (built once per session) and their interfaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.testing.models import build_conv_attention, build_tiny_mlp


@pytest.fixture(scope="session")
def conv_attention(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_conv_attention(tmp_path_factory.mktemp("models") / "conv_attention.onnx")


@pytest.fixture(scope="session")
def tiny_mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_mlp(tmp_path_factory.mktemp("models") / "tiny_mlp.onnx")


@pytest.fixture(scope="session")
def conv_info(conv_attention: Path) -> ModelInfo:
    return inspect_model(conv_attention)


@pytest.fixture(scope="session")
def conv_shapes(conv_info: ModelInfo) -> dict[str, list[int]]:
    return resolve_shapes(conv_info, {})
