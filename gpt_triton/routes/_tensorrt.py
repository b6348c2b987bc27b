"""TensorRT (GPU, optional extra ``gpt-triton[tensorrt]``): ONNX -> serialized engine (``model.plan``).

An engine is built for one serving route (``batch_in_build``): its optimization profile runs from batch 1 to the
max_batch_size deploy writes to config.pbtxt (Triton's tensorrt backend refuses a model whose engine cannot take
its max batch), tuned at the batch the server will mostly run. It runs only on the TensorRT version and the GPU
architecture that built it, so the artifact records both (:data:`ENGINE_KEYS`, in ``Artifact.engine``); ship the
engine, never the route (rebuilds are not bit-identical).

Knobs depend on the TensorRT present (``tensorrt.__version__``; see :mod:`gpt_triton.routes._tensorrt_knobs`):
builder settings on 10.x and 11.0, the 11.1 tuner's own knobs (``IBuilderConfig.all_build_routes``) on 11.1+.
The timing cache is a build input shared by every build of a run, never a knob
(:mod:`gpt_triton.routes._tensorrt_cache`).

Seams for machines without TensorRT or a GPU: ``TensorRtFamily(tensorrt=..., gpu=...)`` takes the module and
the GPU probe (tests pass gpt_triton.testing.fake_tensorrt); the defaults import ``tensorrt`` and ask nvidia-smi.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gpt_triton.routes._tensorrt_build as steps
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._common import full_knobs, make_artifact, source_model
from gpt_triton.routes._precision_groups import group_nodes, load_groups
from gpt_triton.routes._tensorrt_cache import attach, cache_path, save
from gpt_triton.routes._tensorrt_knobs import (
    STRONGLY_TYPED_SINCE,
    TUNER_SINCE,
    UNINSTALLED_LINE,
    TunerOption,
    Version,
    catalog,
    classic_knobs,
    knobs_for,
    parse_version,
    route_string,
    tuner_options,
)

ENGINE_KEYS = {
    "tensorrt_version": "tensorrt.__version__ of the builder, e.g. '10.13.3.9' (the server's must match)",
    "compute_capability": "the GPU's, e.g. '8.9' (None when nvidia-smi could not say); the server's must match",
    "gpu_name": "nvidia-smi's name of the GPU that built it, e.g. 'NVIDIA L4'",
    "max_batch_size": "the serving route's max batch the profile covers (0: unbatched, exact shapes)",
    "opt_batch_size": "the batch the engine's kernels were timed at (0 when unbatched)",
    "profile": "{input: {'min': dims, 'opt': dims, 'max': dims}}, batch axis included",
    "inputs": "{name: {'dtype': 'float32', 'shape': [-1, 16]}} of the network as built (-1: dynamic)",
    "outputs": "the same for the outputs",
    "precision": "the route's precision knob (fp32, tf32, fp16, bf16)",
    "strongly_typed": "True on TensorRT 11 (precision from the network's types), False on 10.x (builder flags)",
    "build_route": "the 11.1 tuner route in effect ('' for none)",
    "timing_cache": "path of the timing cache file the build read and merged into",
}


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str | None  # "8.9"; None where nvidia-smi could not say


def probe_gpu() -> Gpu | None:
    """The GPU builds run on (the first of CUDA_VISIBLE_DEVICES, else GPU 0), from nvidia-smi; None if none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Gpu("unknown NVIDIA GPU", None) if Path("/dev/nvidia0").exists() else None
    device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    for fields in ("name,compute_cap", "name"):  # compute_cap needs a recent driver
        try:
            done = subprocess.run([smi, f"--id={device}", f"--query-gpu={fields}", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        line = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
        if line:
            parts = [p.strip() for p in line.split(",")]
            return Gpu(parts[0], parts[1] if len(parts) > 1 else None)
    return None


def _import_tensorrt() -> Any:
    import tensorrt

    return tensorrt


class TensorRtFamily(RouteFamily):
    name = "tensorrt"
    kind = "compiler"
    runtime = "tensorrt"
    batch_in_build = True
    device = "gpu"
    conditional = {"fp32_groups": ("precision", ("fp16", "bf16"))}

    def __init__(self, tensorrt: Callable[[], Any] | None = None, gpu: Callable[[], Gpu | None] | None = None) -> None:
        """``tensorrt`` returns the tensorrt module (default: import it); ``gpu`` probes the GPU (default:
        nvidia-smi). Builds run in a child that constructs the family with no arguments: a test's family with
        other seams is a subclass whose ``__init__`` passes them."""
        self._load = tensorrt or _import_tensorrt
        self._probe = gpu or probe_gpu
        self._gpu: list[Gpu | None] = []  # probed once
        self._tuner: dict[str, list[TunerOption]] = {}  # tensorrt.__version__ -> the tuner's options

    # -- what is here -----------------------------------------------------------------------------------------
    def _gpu_info(self) -> Gpu | None:
        if not self._gpu:
            try:
                self._gpu.append(self._probe())
            except Exception:  # a broken probe means no usable GPU, never a crash
                self._gpu.append(None)
        return self._gpu[0]

    def _version(self) -> tuple[Any, Version]:
        trt = self._load()
        return trt, parse_version(getattr(trt, "__version__", ""))

    def availability(self) -> tuple[bool, str]:
        try:
            trt, version = self._version()
        except ValueError as exc:
            return False, f"tensorrt has no readable version ({exc}); reinstall it (pip install 'gpt-triton[tensorrt]')"
        except Exception as exc:
            return False, f"tensorrt is not installed (pip install 'gpt-triton[tensorrt]'; {type(exc).__name__})"
        if version < (10, 0):
            return False, (f"TensorRT {trt.__version__} is too old: gpt-triton builds with TensorRT 10 or later "
                           "(pip install 'tensorrt>=10')")
        if self._gpu_info() is None:
            return False, "no NVIDIA GPU on this machine (nvidia-smi lists none and /dev/nvidia0 is missing)"
        return True, ""

    def _tuner_options(self, trt: Any, version: Version) -> list[TunerOption]:
        if version < TUNER_SINCE:
            return []
        key = str(trt.__version__)
        if key not in self._tuner:
            self._tuner[key] = []
            if self.availability()[0]:
                try:
                    builder = trt.Builder(steps.collecting_logger(trt, []))
                    self._tuner[key] = tuner_options(builder.create_builder_config().all_build_routes or "")
                except Exception:  # a builder that cannot start offers the classic knobs (availability said why)
                    self._tuner[key] = []
        return self._tuner[key]

    def knobs(self, model: ModelInfo) -> list[Knob]:
        try:
            trt, version = self._version()
        except Exception:  # no TensorRT here: describe the line NGC images ship (knobs_by_version lists all)
            return classic_knobs(UNINSTALLED_LINE)
        return knobs_for(version, self._tuner_options(trt, version))

    def knobs_by_version(self, model: ModelInfo) -> dict[str, list[Knob]]:
        return catalog()

    # -- the build --------------------------------------------------------------------------------------------
    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        trt, version = self._version()
        gpu = self._gpu_info()
        if gpu is None:
            raise RuntimeError("no NVIDIA GPU on this machine: TensorRT builds need one (disable the tensorrt family)")
        offered = {k.name for k in self.knobs(context.model)}
        unknown = sorted(set(route.knobs) - offered)
        if unknown:
            raise ValueError(f"TensorRT {trt.__version__} offers no knob(s) {unknown}; its knobs are "
                             f"{sorted(offered)} (a route planned for another TensorRT? plan the search on this machine)")
        k = full_knobs(self, route, context.model)
        out_dir.mkdir(parents=True, exist_ok=True)
        errors: list[str] = []
        logger = steps.collecting_logger(trt, errors)
        builder = trt.Builder(logger)
        notes: list[str] = []
        source = source_model(context)
        work = out_dir / "_network"
        strongly = version >= STRONGLY_TYPED_SINCE
        groups = [str(g) for g in k.get("fp32_groups") or []] if k["precision"] in ("fp16", "bf16") else []
        parsed_from = source
        if strongly and k["precision"] == "fp16":
            notes += steps.convert_fp16(source, work / "fp16.onnx", groups)
            source = work / "fp16.onnx"
        network = builder.create_network(steps.creation_flags(trt, version))
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(source)):
            problems = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT {trt.__version__} could not parse {source.name}: {problems or steps.said(errors)}")
        config = builder.create_builder_config()
        steps.apply_precision(trt, config, str(k["precision"]), version)
        if groups and not strongly:
            layer_groups = load_groups(parsed_from)
            notes += steps.keep_fp32(trt, network, config, [n for g in layer_groups for n in g.nodes],
                                     group_nodes(layer_groups, groups), errors)
        steps.apply_classic(trt, config, k, errors)
        build_route = self._apply_route(trt, config, k, version, errors)
        inputs = [str(network.get_input(i).name) for i in range(network.num_inputs)]
        shapes = steps.profile_shapes(context, inputs)
        steps.add_profile(builder, config, shapes, errors)
        cache_file = cache_path(Path(context.cache_dir) if context.cache_dir else out_dir.parent,
                                str(trt.__version__), gpu.compute_capability)
        notes += attach(config, cache_file)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError(f"TensorRT {trt.__version__} could not build the engine: {steps.said(errors)}")
        steps.write_plan(plan, out_dir / "model.plan")
        try:
            save(config, cache_file)
        except OSError as exc:  # the engine is good; later builds only lose this one's timings
            notes.append(f"timing cache not saved to {cache_file}: {exc}")
        shutil.rmtree(work, ignore_errors=True)
        if build_route:
            notes.append(f"build_route: {build_route}")
        artifact = make_artifact(self, "tensorrt", route, out_dir, ["model.plan"], {}, notes)
        batched = context.max_batch_size > 0
        artifact.engine = {
            "tensorrt_version": str(trt.__version__), "compute_capability": gpu.compute_capability,
            "gpu_name": gpu.name, "max_batch_size": max(context.max_batch_size, 0),
            "opt_batch_size": next(iter(shapes.values()))["opt"][0] if batched and shapes else 0,
            "profile": shapes, "inputs": steps.tensors(network, inputs=True),
            "outputs": steps.tensors(network, inputs=False), "precision": str(k["precision"]),
            "strongly_typed": strongly, "build_route": build_route, "timing_cache": str(cache_file),
        }
        return artifact

    def _apply_route(self, trt: Any, config: Any, knobs: dict[str, Any], version: Version, errors: list[str]) -> str:
        """Set the 11.1 tuner's route and read it back: the binding drops ``setBuildRoute``'s result
        (pyCore.cpp v11.1), so a refused route would otherwise build silently with the previous one."""
        options = self._tuner_options(trt, version)
        wanted = route_string(knobs, options)
        if not wanted:
            return ""
        config.build_route = wanted
        got = config.build_route
        if got != wanted:
            allowed = ", ".join(f"{o.option}=[{'|'.join(o.values)}]" for o in options)
            raise RuntimeError(f"TensorRT {trt.__version__} refused build route {wanted!r} (build_route reads back "
                               f"{got!r}; {steps.said(errors)}); the tuner allows {allowed}")
        return wanted
