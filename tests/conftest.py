"""Session-wide fixtures shared by every test area.

* ``triton_server`` - one real embedded Triton (the nvidia-pytriton wheel's tritonserver) over a
  temporary repository, started on first use and stopped at session end. Tests that use it start a
  real server and must be marked ``@pytest.mark.slow``. Load models with unique names and unload them,
  so tests stay independent of each other while sharing the process.
* ``tiny_model_path`` - build_tiny_mlp (input "x" [batch,16], output "y" [batch,4]).
* ``conv_attention_path`` - build_conv_attention (input "images" [batch,3,64,64]; "logits", "embedding").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpt_triton.server import EmbeddedTriton
from gpt_triton.testing.models import build_conv_attention, build_tiny_mlp

# Real Prometheus and Pushgateway (tests/prom_fixtures.py) and the fake Kubernetes API and helm
# (tests/k8s_fixtures.py), for every test area.
pytest_plugins = ["prom_fixtures", "k8s_fixtures"]


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    root = tmp_path_factory.mktemp("triton")
    server = EmbeddedTriton(root / "repository", workdir=root / "work", log_path=root / "tritonserver.log")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_mlp(tmp_path_factory.mktemp("tiny_mlp") / "model.onnx")


@pytest.fixture(scope="session")
def conv_attention_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_conv_attention(tmp_path_factory.mktemp("conv_attention") / "model.onnx")
