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
    file_knobs = ("static_shape", "quantization")

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
        model = ov.Core().read_model(str(source_model(context)))
        if k["static_shape"]:
            model.reshape({name: ov.PartialShape(shape) for name, shape in context.shapes.items()})
            notes.append("static shape " + ", ".join(f"{n}={'x'.join(map(str, s))}" for n, s in context.shapes.items()))
        if k["quantization"] == "int8":
            import nncf

            feeds = list(iter_calibration(context))
            model = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds))
            notes.append(f"NNCF int8, calibrated on {len(feeds)} tuning requests")
        # compress_to_fp16=False: ov.save_model rounds weights to fp16 by default, which would make the
        # "f32" route inexact; precision is chosen at compile time instead.
        tmp = out_dir / "model.part.xml"
        ov.save_model(model, str(tmp), compress_to_fp16=False)
        tmp.with_suffix(".bin").replace(out_dir / "model.bin")
        tmp.replace(out_dir / "model.xml")
        return make_artifact(self, "openvino", route, out_dir, ["model.xml", "model.bin"], self.runtime_options(route, context.model), notes)
