"""Triton serving settings: instance count and dynamic batching. Nothing is built.

``build`` returns the *source* artifact unchanged (no files written): a serving route only changes the
model's config.pbtxt, which the deploy stage writes from these knob names (a shared contract).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._common import make_artifact, source_model

DEFAULT_MAX_BATCH = 8


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
        ]

    @staticmethod
    def resolved_max_batch_size(route: Route, model: ModelInfo) -> int:
        value: Any = route.knobs.get("max_batch_size")
        if not model.batch_dynamic:
            return 0
        return DEFAULT_MAX_BATCH if value is None else int(value)

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        src = source_model(context)
        return make_artifact(self, "onnxruntime", route, src.parent, [src.name], {}, ["serving route: source model unchanged"])
