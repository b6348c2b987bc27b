"""Python models with known artificial costs on the session's real embedded Triton (slow tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpt_triton.server import EmbeddedTriton

MODEL_PY = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils

DELAY_S = {delay}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            if DELAY_S:
                time.sleep(DELAY_S)
            y = (x[:, :4] * 2.0).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", y)]))
        return responses
'''

CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ -1, 16 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ -1, 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''

# name -> seconds of sleep per request (one instance: capacity ~ 1/delay requests/s)
DELAYS = {"measure_fast": 0.0, "measure_fast_b": 0.0, "measure_slow20": 0.020, "measure_slow30": 0.030}


def write_delay_model(repository: Path, name: str, delay_s: float) -> Path:
    """y = 2 * x[:, :4], sleeping ``delay_s`` per request."""
    version = repository / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "model.py").write_text(MODEL_PY.format(delay=repr(delay_s)))
    (repository / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    return repository / name


@pytest.fixture(scope="session")
def delay_models(triton_server: EmbeddedTriton) -> EmbeddedTriton:
    """The shared Triton with the DELAYS models loaded (left loaded: the server stops at session end)."""
    assert triton_server.repository is not None
    for name, delay in DELAYS.items():
        triton_server.load(write_delay_model(triton_server.repository, name, delay))
    return triton_server


@pytest.fixture(scope="session")
def requests_x() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.random((batch, 16), dtype=np.float32)} for batch in (1, 2, 1, 4)]
