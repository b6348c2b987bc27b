"""Python-backend models with known artificial costs, for every test area that needs one (the one
definition: the measurement tests load several on the session's Triton, the canary tests serve one
model whose versions differ in speed).

``y = 2 * x[..., :4]`` after sleeping a fixed time per request, on one CPU instance, so a model's
capacity is about 1/delay requests/s and versions really differ in what Prometheus and the load
generator see. Import it by name (``from delay_model import write_delay_model``): the root conftest
puts tests/ on sys.path.
"""

from __future__ import annotations

from pathlib import Path

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
            y = (x[..., :4] * 2.0).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", y)]))
        return responses
'''

CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "x" data_type: TYPE_FP32 dims: {input_dims} }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: {output_dims} }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''


def write_delay_model(
    repository: Path, name: str, delays_s: dict[int, float], *, max_batch_size: int = 0,
    input_dims: tuple[int, ...] = (-1, 16),
) -> Path:
    """Write model ``name`` with one version per ``delays_s`` entry (version -> seconds of sleep per
    request) into ``repository``; returns the model directory. ``input_dims`` exclude the batch axis
    when ``max_batch_size`` > 0; the output keeps them with the last axis cut to 4."""
    model = repository / name
    for version, delay_s in delays_s.items():
        (model / str(version)).mkdir(parents=True, exist_ok=True)
        (model / str(version) / "model.py").write_text(MODEL_PY.format(delay=repr(delay_s)))
    output_dims = (*input_dims[:-1], 4)
    (model / "config.pbtxt").write_text(CONFIG.format(
        name=name, max_batch_size=max_batch_size, input_dims=list(input_dims), output_dims=list(output_dims)))
    return model
