"""OpenVINO on CPU: IR conversion (files) plus compile-time properties (runtime options).

On this CPU OpenVINO's *own* default inference precision is bf16 (ANCHORS.md), so the default route here
makes f32 explicit; bf16/f16 are reduced-precision routes the accuracy gate must accept. THROUGHPUT with
one request at a time splits the cores into streams (~2x slower), hence LATENCY and NUM_STREAMS=1 defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._common import full_knobs, iter_calibration, make_artifact, source_model
from gpt_triton.routes._precision_groups import group_nodes, layer_groups, name_unnamed_nodes


def _cpu_capabilities() -> list[str]:
    try:
        import openvino as ov

        return [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
    except Exception:  # no OpenVINO or no CPU plugin: only f32 is offered
        return []


class OpenVinoFamily(RouteFamily):
    name = "openvino"
    kind = "compiler"
    runtime = "openvino"
    # Precision, hint and streams are compile-time properties: routes differing only in them share files.
    file_knobs = ("static_shape", "quantization", "fp32_groups")
    conditional = {"fp32_groups": ("quantization", ("int8",))}

    def __init__(self) -> None:
        self._caps: list[str] | None = None

    def _capabilities(self) -> list[str]:
        if self._caps is None:
            self._caps = _cpu_capabilities()
        return self._caps

    def availability(self) -> tuple[bool, str]:
        try:
            import openvino as ov

            devices = ov.Core().available_devices
        except Exception as exc:
            return False, f"openvino cannot be imported ({type(exc).__name__}: {exc})"
        if "CPU" not in devices:
            return False, f"OpenVINO has no CPU device (devices: {devices})"
        return True, ""

    def knobs(self, model: ModelInfo) -> list[Knob]:
        caps = self._capabilities()
        precisions = ["f32"] + (["bf16"] if "BF16" in caps else []) + (["f16"] if "FP16" in caps else [])
        return [
            Knob(name="inference_precision", values=precisions, default="f32",
                 help="INFERENCE_PRECISION_HINT; f32 is explicit here because OpenVINO's own CPU default on bf16-capable "
                      "CPUs is bf16, a reduced-precision route"),
            Knob(name="performance_hint", values=["LATENCY", "THROUGHPUT"], default="LATENCY",
                 help="THROUGHPUT splits cores into streams: slower for one request at a time"),
            Knob(name="num_streams", values=[1, 2], default=1, help="NUM_STREAMS; 1 recovers THROUGHPUT's single-request latency"),
            Knob(name="static_shape", values=[False, True], default=False,
                 help="reshape the IR to the tuned request shapes (batch included); the engine then accepts only those"),
            Knob(name="quantization", values=["none", "int8"], default="none",
                 help="NNCF post-training int8, calibrated on the tuning split"),
            # Only the empty list is offered: the precision sensitivity search (gpt_triton.precision) finds
            # which groups to keep on the tuning split. (f16/bf16 inference precision is left whole-graph:
            # this CPU runs both as f32, see docs/accuracy.md.)
            Knob(name="fp32_groups", values=[[]], default=[],
                 help="for int8: layer groups (gpt_triton.routes._precision_groups) NNCF leaves in fp32 (ignored_scope)"),
        ]

    def runtime_options(self, route: Route, model: ModelInfo) -> dict[str, Any]:
        k = full_knobs(self, route, model)
        return {
            "device": "CPU",
            "config": {
                "INFERENCE_PRECISION_HINT": str(k["inference_precision"]),
                "PERFORMANCE_HINT": str(k["performance_hint"]),
                "NUM_STREAMS": str(k["num_streams"]),
            },
        }

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        import openvino as ov

        k = full_knobs(self, route, context.model)
        out_dir.mkdir(parents=True, exist_ok=True)
        notes: list[str] = []
        source = source_model(context)
        named_copy: Path | None = None
        ignored: list[str] = []
        if k["quantization"] == "int8" and k["fp32_groups"]:
            import onnx

            onnx_model = onnx.load(str(source))
            if name_unnamed_nodes(onnx_model):
                # OpenVINO names an op after its ONNX node: read a copy whose nodes carry the groups' names.
                source = named_copy = out_dir / "_named.onnx"
                onnx.save(onnx_model, str(source))
            ignored = group_nodes(layer_groups(onnx_model), list(k["fp32_groups"]))
        model = ov.Core().read_model(str(source))
        if named_copy is not None:
            named_copy.unlink()
        if k["static_shape"]:
            model.reshape({name: ov.PartialShape(shape) for name, shape in context.shapes.items()})
            notes.append("static shape " + ", ".join(f"{n}={'x'.join(map(str, s))}" for n, s in context.shapes.items()))
        if k["quantization"] == "int8":
            import nncf

            feeds = list(iter_calibration(context))
            # validate=False: an ONNX node OpenVINO fused away has no op to ignore, which is not an error.
            scope = nncf.IgnoredScope(names=ignored, validate=False) if ignored else None
            model = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds), ignored_scope=scope)
            notes.append(f"NNCF int8, calibrated on {len(feeds)} tuning requests")
            if ignored:
                notes.append(f"int8: kept layer group(s) {', '.join(k['fp32_groups'])} in fp32 "
                             f"(NNCF ignored_scope of {len(ignored)} ops)")
        # compress_to_fp16=False: ov.save_model rounds weights to fp16 by default, which would make the
        # "f32" route inexact; precision is chosen at compile time instead.
        tmp = out_dir / "model.part.xml"
        ov.save_model(model, str(tmp), compress_to_fp16=False)
        tmp.with_suffix(".bin").replace(out_dir / "model.bin")
        tmp.replace(out_dir / "model.xml")
        return make_artifact(self, "openvino", route, out_dir, ["model.xml", "model.bin"], self.runtime_options(route, context.model), notes)
