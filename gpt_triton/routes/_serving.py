"""Triton serving settings: instance count and dynamic batching. Nothing is built.

``build`` returns the *source* artifact unchanged (no files written): a serving route only changes the
model's config.pbtxt, which the deploy stage writes from these knob names (a shared contract).

GPU knobs exist only where this machine has an NVIDIA GPU (the tuner runs next to the Triton it tunes),
so a CPU run plans exactly what it did before: ``cuda_graphs`` (the tensorrt backend's
``optimization { cuda { graphs: true } }``) and ``gpus`` (the devices a GPU instance group is placed on;
swept only with more than one GPU). Deploy refuses a candidate whose backend cannot apply them (CUDA graphs
on anything but a plan, ``gpus`` on CPU instances) rather than ignoring them.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gpt_triton.core.model_info import DEFAULT_MAX_BATCH, ModelInfo, serving_max_batch
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._common import make_artifact, source_model


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """NVIDIA GPUs nvidia-smi lists here (0 without nvidia-smi or a GPU); probed once per process."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def gpu_knobs(gpus: int) -> list[Knob]:
    """The serving knobs of a machine with ``gpus`` NVIDIA GPUs ([] without one)."""
    if gpus <= 0:
        return []
    return [
        Knob(name="cuda_graphs", values=[False, True], default=False,
             help="TensorRT plans: capture the engine in CUDA graphs (optimization.cuda.graphs); deploy refuses it "
                  "for other backends"),
        Knob(name="gpus", values=[None, *([i] for i in range(gpus))] if gpus > 1 else [None], default=None,
             help="GPU instances: the device ids the instance group is placed on (None: Triton's default, every GPU)"),
    ]


class ServingFamily(RouteFamily):
    name = "serving"
    kind = "serving"
    runtime = "onnxruntime"
    file_knobs = ()  # a serving route writes no files
    conditional = {
        "max_queue_delay_us": ("dynamic_batching", (True,)),
        "preferred_batch_sizes": ("dynamic_batching", (True,)),
    }

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def knobs(self, model: ModelInfo) -> list[Knob]:
        batching = model.batch_dynamic
        why = "" if batching else " (the model has no dynamic batch axis, so Triton cannot batch it)"
        return [
            Knob(name="instance_count", values=[1, 2], default=1, help="model instances (each a copy of the engine)"),
            Knob(name="dynamic_batching", values=[False, True] if batching else [False], default=False,
                 help="Triton's dynamic batcher" + why),
            Knob(name="max_queue_delay_us", values=[0, 100, 500], default=0,
                 help="with dynamic batching: how long a request may wait for others"),
            # [4] stays within every offered max_batch_size (deploy rejects preferred sizes above it).
            Knob(name="preferred_batch_sizes", values=[[], [4]] if batching else [[]], default=[],
                 help="with dynamic batching: batch sizes the batcher aims for"),
            Knob(name="max_batch_size", values=[None, 4, 16] if batching else [None], default=None,
                 help=f"None = {DEFAULT_MAX_BATCH} for batch-dynamic models, else 0" + why),
            *gpu_knobs(gpu_count()),
        ]

    @staticmethod
    def resolved_max_batch_size(route: Route, model: ModelInfo, request_batch: int = 1) -> int:
        """The max_batch_size deploy writes for this route (gpt_triton.deploy._config._serving_knobs): unset
        means DEFAULT_MAX_BATCH, raised to the tuned requests' own batch so they fit."""
        value: Any = route.knobs.get("max_batch_size")
        return serving_max_batch(model, value, request_batch)

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        src = source_model(context)
        return make_artifact(self, "onnxruntime", route, src.parent, [src.name], {}, ["serving route: source model unchanged"])
