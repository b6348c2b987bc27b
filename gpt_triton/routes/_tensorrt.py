"""TensorRT (GPU, optional extra ``gpt-triton[tensorrt]``): ONNX -> serialized engine (``model.plan``).

Knobs come from the builder, not from this code, wherever the builder can say: TensorRT 11.1+ exposes
its Global Performance Tuner's knobs as ``IBuilderConfig.all_build_routes`` (JSON: ``tuner_options`` with
``option``, ``allowed_values``, ``default_value``, ``help``) and takes a route as the string
``IBuilderConfig.build_route = "-knob_a=off -knob_b=2"``. On top of those, a few long-standing builder
settings are knobs of ours: precision flags, ``builder_optimization_level``, tactic sources and a timing cache.
Engines are tied to a GPU's compute capability; ship the engine, never the route string (rebuilds are
not bit-identical).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._common import full_knobs, make_artifact, source_model

_OUR_KNOBS = ("precision", "builder_optimization_level", "tactic_sources", "timing_cache")


def _gpu_present() -> tuple[bool, str]:
    if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
        return False, "no NVIDIA GPU on this machine"
    return True, ""


def tuner_knobs(all_build_routes: str) -> list[Knob]:
    """Parse ``IBuilderConfig.all_build_routes`` JSON into knobs (empty on builds without the tuner)."""
    if not all_build_routes:
        return []
    data = json.loads(all_build_routes)
    return [
        Knob(name=str(o["option"]), values=list(o.get("allowed_values", [])), default=o.get("default_value"),
             help=f"TensorRT tuner knob: {o.get('help', '')}".strip())
        for o in data.get("tuner_options", [])
    ]


def route_string(knobs: dict[str, Any], tuner: list[Knob]) -> str:
    """The tuner knobs of a route as TensorRT's build-route string (non-default values only)."""
    defaults = {k.name: k.default for k in tuner}
    parts = [f"-{name}={knobs[name]}" for name in sorted(defaults) if name in knobs and knobs[name] != defaults[name]]
    return " ".join(parts)


class TensorRtFamily(RouteFamily):
    name = "tensorrt"
    kind = "compiler"
    runtime = "tensorrt"

    def __init__(self) -> None:
        self._tuner: list[Knob] | None = None

    def availability(self) -> tuple[bool, str]:
        try:
            import tensorrt  # noqa: F401
        except Exception as exc:
            return False, f"tensorrt is not installed (pip install 'gpt-triton[tensorrt]'; {type(exc).__name__})"
        return _gpu_present()

    def _tuner_knobs(self) -> list[Knob]:
        if self._tuner is None:
            self._tuner = []
            if self.availability()[0]:
                try:
                    import tensorrt as trt

                    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
                    config = builder.create_builder_config()
                    self._tuner = tuner_knobs(getattr(config, "all_build_routes", "") or "")
                except Exception:  # a builder without the tuner (TensorRT < 11.1) offers only our knobs
                    self._tuner = []
        return self._tuner

    def knobs(self, model: ModelInfo) -> list[Knob]:
        ours = [
            Knob(name="precision", values=["fp32", "tf32", "fp16", "bf16"], default="tf32",
                 help="builder precision flags (tf32 is TensorRT's default on Ampere+)"),
            Knob(name="builder_optimization_level", values=[0, 1, 2, 3, 4, 5], default=3,
                 help="IBuilderConfig.builder_optimization_level; higher searches more tactics"),
            Knob(name="tactic_sources", values=["default", "no_cublas"], default="default",
                 help="IBuilderConfig.set_tactic_sources"),
            Knob(name="timing_cache", values=[True, False], default=True, help="reuse a timing cache across builds"),
        ]
        return ours + self._tuner_knobs()

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        import tensorrt as trt

        k = full_knobs(self, route, context.model)
        out_dir.mkdir(parents=True, exist_ok=True)
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10+
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(source_model(context))):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT could not parse the model: {errors}")
        config = builder.create_builder_config()
        if k["precision"] == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif k["precision"] == "bf16":
            config.set_flag(trt.BuilderFlag.BF16)
        elif k["precision"] == "fp32":
            config.clear_flag(trt.BuilderFlag.TF32)
        config.builder_optimization_level = int(k["builder_optimization_level"])
        if k["tactic_sources"] == "no_cublas":
            sources = config.get_tactic_sources() & ~(1 << int(trt.TacticSource.CUBLAS))
            config.set_tactic_sources(sources)
        tuner = self._tuner_knobs()
        if tuner:
            config.build_route = route_string(k, tuner)
        profile = builder.create_optimization_profile()
        max_batch = max(context.max_batch_size, 1)
        for name, shape in context.shapes.items():
            low = [1, *shape[1:]] if context.max_batch_size else shape
            high = [max_batch, *shape[1:]] if context.max_batch_size else shape
            profile.set_shape(name, low, shape, high)
        config.add_optimization_profile(profile)
        cache_path = out_dir.parent / "tensorrt.timing_cache"
        if k["timing_cache"]:
            blob = cache_path.read_bytes() if cache_path.exists() else b""
            config.set_timing_cache(config.create_timing_cache(blob), ignore_mismatch=False)
        engine = builder.build_serialized_network(network, config)
        if engine is None:
            raise RuntimeError("TensorRT build_serialized_network returned no engine")
        tmp = out_dir / "model.plan.part"
        tmp.write_bytes(bytes(engine))
        tmp.replace(out_dir / "model.plan")
        if k["timing_cache"]:
            cache_path.write_bytes(bytes(config.get_timing_cache().serialize()))
        notes = [f"build_route: {config.build_route}"] if tuner else []
        return make_artifact(self, "tensorrt", route, out_dir, ["model.plan"], {}, notes)
