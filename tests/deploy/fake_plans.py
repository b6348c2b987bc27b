"""Plans built by the fake TensorRT, the way the tensorrt family builds them: one optimization profile per
request shape, batch 1..max_batch when Triton batches (``from deploy.fake_plans import build_plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.routes import Artifact, Route


def build_plan(trt: Any, model: ModelInfo, shapes: dict[str, list[int]], max_batch: int, out_dir: Path,
               *, batch_range: tuple[int, int] | None = None) -> Path:
    """``out_dir/model.plan`` for ``model`` built by the fake module ``trt``; profile batch ``batch_range``
    (default 1..max_batch, or the request shape alone when ``max_batch`` is 0)."""
    logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(model.path), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    low_batch, high_batch = batch_range or (1, max_batch)
    for name, shape in shapes.items():
        if max_batch or batch_range:
            opt = [min(max(shape[0], low_batch), high_batch), *shape[1:]]
            profile.set_shape(name, [low_batch, *shape[1:]], opt, [high_batch, *shape[1:]])
        else:
            profile.set_shape(name, shape, shape, shape)
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None, trt._fake_state.log[-1]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "model.plan").write_bytes(bytes(plan))
    return out_dir / "model.plan"


def plan_artifact(directory: Path) -> Artifact:
    return Artifact(family="tensorrt", runtime="tensorrt", route=Route(family="tensorrt"), directory=str(directory),
                    files=["model.plan"], runtime_options={})
