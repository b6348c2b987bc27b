"""Model "sleepy": versions of one python-backend model that really differ in speed (the canary must
tell them apart through Prometheus alone), written with the shared tests/delay_model.py."""

from __future__ import annotations

from pathlib import Path

from delay_model import write_delay_model

# Milliseconds of sleep per request, by version. v1 is the stable one.
SLEEP_MS = {1: 10.0, 2: 2.0, 3: 40.0}


def write_sleepy_model(repository: Path) -> Path:
    model = write_delay_model(repository, "sleepy", {v: ms / 1000.0 for v, ms in SLEEP_MS.items()},
                              max_batch_size=8, input_dims=(4,))
    # Version 4 cannot load: its initialize() raises, like a candidate built for another runtime.
    (model / "4").mkdir()
    (model / "4" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('broken candidate')\n"
    )
    return model
