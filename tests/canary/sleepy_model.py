"""A python-backend model whose versions really differ in speed (written into a test repository)."""

from __future__ import annotations

from pathlib import Path

# Versions of one python-backend model that really differ in speed: the canary must tell them apart
# through Prometheus alone. v1 is the stable one.
SLEEP_MS = {1: 10.0, 2: 2.0, 3: 40.0}

CONFIG = """
name: "sleepy"
backend: "python"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ kind: KIND_CPU count: 1 }]
"""

MODEL_PY = '''
import time
import triton_python_backend_utils as pb_utils

SLEEP_S = {sleep_s}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            time.sleep(SLEEP_S)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x * 2.0)]))
        return responses
'''


def write_sleepy_model(repository: Path) -> Path:
    model = repository / "sleepy"
    for version, sleep_ms in SLEEP_MS.items():
        (model / str(version)).mkdir(parents=True)
        (model / str(version) / "model.py").write_text(MODEL_PY.format(sleep_s=sleep_ms / 1000.0))
    # Version 4 cannot load: its initialize() raises, like a candidate built for another runtime.
    (model / "4").mkdir()
    (model / "4" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('broken candidate')\n"
    )
    (model / "config.pbtxt").write_text(CONFIG)
    return model
