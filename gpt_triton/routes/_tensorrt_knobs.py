"""The TensorRT family's knobs, per TensorRT version, and the 11.1 tuner's knob list.

Which builder settings exist depends on the TensorRT release (NVIDIA/TensorRT ``python/src/infer/pyCore.cpp``
and ``include/NvInfer.h`` at each tag; gpt_triton.testing.fake_tensorrt lists the tags and commits read):

* 10.x: precision through ``BuilderFlag`` (FP16, BF16; TF32 is on by default, ``fp32`` clears it),
  ``builder_optimization_level`` (0..5, default 3), ``max_aux_streams``, tactic sources (EDGE_MASK_CONVOLUTIONS and
  JIT_CONVOLUTIONS are the ones enabled by default; CUBLAS, CUBLAS_LT and CUDNN are off by default, so "no cuBLAS"
  changes nothing), and ``tiling_optimization_level`` from v10.8.0 (the bindings have it there; ANCHORS.md's
  "from 10.13" is too late).
* 11.0: BuilderFlag FP16/BF16/INT8/FP8 and TacticSource CUBLAS/CUBLAS_LT/CUDNN are gone and every network is
  strongly typed: reduced precision comes from the network's tensor types (the ONNX model is converted to fp16
  before parsing). bf16 is not offered there: onnxconverter-common converts to float16 only.
* 11.1: ``IBuilderConfig.all_build_routes`` lists the Global Performance Tuner's knobs as JSON
  (``{"tuner_version": ..., "tuner_options": [{"option": "-knob", "allowed_values": "-knob=[on|off]",
  "default_value": "on", "help": ...}]}``, NvInfer.h v11.1 ``getAllBuildRoutes``) and ``build_route`` takes a route
  as ``"-knob_a=off -knob_b=2"``. There the route space is the tuner's knobs plus precision; a builder without the
  tuner (``all_build_routes == ""``) keeps 11.0's knobs.

Knobs are read from ``tensorrt.__version__``; without TensorRT, :func:`catalog` describes every line statically
and :data:`UNINSTALLED_LINE` is what ``knobs()`` answers (what NGC Triton images ship: 10.8 and later).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpt_triton.core.routes import Knob

Version = tuple[int, int]
TILING_SINCE: Version = (10, 8)
STRONGLY_TYPED_SINCE: Version = (11, 0)
TUNER_SINCE: Version = (11, 1)
UNINSTALLED_LINE: Version = (10, 8)

# knob value -> the TacticSource member it turns off (the two that are on by default on 10.x and 11.x)
TACTIC_SOURCE_OFF = {"no_edge_mask_convolutions": "EDGE_MASK_CONVOLUTIONS", "no_jit_convolutions": "JIT_CONVOLUTIONS"}
TILING_LEVELS = ("none", "fast", "moderate", "full")  # TilingOptimizationLevel members, lower-cased
AUTO_AUX_STREAMS = -1  # leave max_aux_streams unset: TensorRT's heuristic decides


def parse_version(text: str) -> Version:
    """``"10.13.3.9"`` -> ``(10, 13)``; ValueError for anything else."""
    match = re.match(r"(\d+)\.(\d+)", str(text).strip())
    if not match:
        raise ValueError(f"not a TensorRT version: {text!r}")
    return int(match.group(1)), int(match.group(2))


def precision_knob(version: Version) -> Knob:
    if version >= STRONGLY_TYPED_SINCE:
        return Knob(name="precision", values=["fp32", "tf32", "fp16"], default="tf32",
                    help="tf32: TensorRT's default; fp32 clears BuilderFlag.TF32; fp16 converts the network's types "
                         "(fp32 I/O kept), as TensorRT 11 networks are strongly typed")
    return Knob(name="precision", values=["fp32", "tf32", "fp16", "bf16"], default="tf32",
                help="builder precision flags: tf32 is TensorRT's default; fp32 clears TF32; fp16/bf16 set FP16/BF16")


def fp32_groups_knob() -> Knob:
    """Layer groups kept in fp32 under fp16/bf16. Only the empty list is offered: the precision sensitivity
    search (gpt_triton.precision) names the groups, or a spec fixes them."""
    return Knob(name="fp32_groups", values=[[]], default=[],
                help="for fp16/bf16: layer groups (gpt_triton.routes._precision_groups) kept in fp32: 10.x sets "
                     "layer.precision / output types + OBEY_PRECISION_CONSTRAINTS; 11.x keeps their ONNX types fp32")


def classic_knobs(version: Version) -> list[Knob]:
    """The builder settings swept where the 11.1 tuner is absent (10.x, 11.0, 11.1+ without the tuner)."""
    knobs = [
        precision_knob(version),
        Knob(name="builder_optimization_level", values=[0, 1, 2, 3, 4, 5], default=3,
             help="IBuilderConfig.builder_optimization_level; higher searches more tactics (0 ignores the timing cache)"),
        Knob(name="max_aux_streams", values=[AUTO_AUX_STREAMS, 0, 1, 2], default=AUTO_AUX_STREAMS,
             help="IBuilderConfig.max_aux_streams; -1 leaves TensorRT's heuristic, 0 runs one stream"),
        Knob(name="tactic_sources", values=["default", *TACTIC_SOURCE_OFF], default="default",
             help="IBuilderConfig.set_tactic_sources: turn off one of the two sources enabled by default"),
    ]
    if version >= TILING_SINCE:
        knobs.insert(2, Knob(name="tiling_optimization_level", values=list(TILING_LEVELS), default="none",
                             help="IBuilderConfig.tiling_optimization_level (TensorRT 10.8+): L2-cache tiling search"))
    return [*knobs, fp32_groups_knob()]


@dataclass(frozen=True)
class TunerOption:
    """One knob of the 11.1 tuner: ``option`` is TensorRT's name (leading dash included), ``name`` the knob's."""

    option: str
    values: tuple[str, ...]
    default: str
    help: str

    @property
    def name(self) -> str:
        return self.option[1:] if self.option.startswith("-") else self.option

    def knob(self) -> Knob:
        return Knob(name=self.name, values=list(self.values), default=self.default,
                    help=f"TensorRT tuner knob {self.option}: {self.help}".rstrip(": "))


def tuner_options(all_build_routes: str,
                  reserved: frozenset[str] = frozenset({"precision", "fp32_groups"})) -> list[TunerOption]:
    """Parse ``IBuilderConfig.all_build_routes`` (empty for a builder without the tuner).

    ``allowed_values`` is ONE string, ``"-conv_use_long_w=[on|off]"``: the values are what the brackets hold,
    split at ``|``. Options whose values cannot be enumerated that way, or whose name is one of ours
    (``reserved``), are left out: they stay at the tuner's default.
    """
    if not all_build_routes.strip():
        return []
    data: Any = json.loads(all_build_routes)
    options: list[TunerOption] = []
    for entry in data.get("tuner_options", []):
        option = str(entry.get("option", ""))
        match = re.fullmatch(re.escape(option) + r"=\[(.*)\]", str(entry.get("allowed_values", "")).strip())
        if not option or not match:
            continue
        values = tuple(v.strip() for v in match.group(1).split("|") if v.strip())
        default = str(entry.get("default_value", ""))
        if default not in values:
            continue  # a knob whose default is not one of its values cannot be swept from its default
        parsed = TunerOption(option=option, values=values, default=default, help=str(entry.get("help", "")))
        if parsed.name not in reserved:
            options.append(parsed)
    return options


def route_string(knobs: dict[str, Any], options: list[TunerOption]) -> str:
    """The tuner knobs of a route as ``IBuilderConfig.build_route`` takes them, non-default values only,
    in the tuner's order: ``"-conv_use_long_w=off -kgen:codegen:cuda_tile=2"``."""
    parts = [f"{o.option}={knobs[o.name]}" for o in options if o.name in knobs and str(knobs[o.name]) != o.default]
    return " ".join(parts)


def knobs_for(version: Version, options: list[TunerOption]) -> list[Knob]:
    """What a builder of ``version`` sweeps, given the tuner's options (empty below 11.1 or without the tuner)."""
    if version >= TUNER_SINCE and options:
        return [precision_knob(version), fp32_groups_knob(), *(o.knob() for o in options)]
    return classic_knobs(version)


def catalog() -> dict[str, list[Knob]]:
    """Every supported TensorRT line and its knobs, without TensorRT installed (``gpt-triton routes``)."""
    return {
        "TensorRT 10.0-10.7": classic_knobs((10, 0)),
        "TensorRT 10.8-10.x": classic_knobs(TILING_SINCE),
        "TensorRT 11.0 (and 11.1+ without the tuner)": classic_knobs(STRONGLY_TYPED_SINCE),
        "TensorRT 11.1+: precision and every knob IBuilderConfig.all_build_routes lists": [
            precision_knob(TUNER_SINCE), fp32_groups_knob()],
    }
