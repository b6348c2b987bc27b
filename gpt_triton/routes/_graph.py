"""Graph rewrites that compose before any compiler: ONNX in, ONNX out.

A graph route's output is built once and becomes ``BuildContext.source_model`` for every compiler route
planned over it. Rewriters: onnxslim, onnxsim (when its wheel is installed), constant folding through ONNX
Runtime's offline basic-level optimisation (portable ONNX ops only), and ONNX shape inference.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._common import copy_file, full_knobs, make_artifact, source_model


def simplifiers() -> dict[str, str]:
    """simplifier -> "" when installed, else why not."""
    out: dict[str, str] = {"none": ""}
    out["onnxslim"] = "" if importlib.util.find_spec("onnxslim") else "onnxslim is not installed (pip install onnxslim)"
    out["onnxsim"] = "" if importlib.util.find_spec("onnxsim") else "onnxsim is not installed (pip install onnxsim)"
    return out


class GraphFamily(RouteFamily):
    name = "graph"
    kind = "graph"
    runtime = "onnxruntime"
    file_knobs = ("simplify", "constant_folding", "shape_inference")

    def availability(self) -> tuple[bool, str]:
        if importlib.util.find_spec("onnx") is None:
            return False, "onnx is not installed"
        return True, ""

    def knobs(self, model: ModelInfo) -> list[Knob]:
        available = [name for name, why in simplifiers().items() if not why]
        missing = "; ".join(why for why in simplifiers().values() if why)
        return [
            Knob(name="simplify", values=available, default="none",
                 help="graph simplifier" + (f" (unavailable: {missing})" if missing else "")),
            Knob(name="constant_folding", values=[False, True], default=False,
                 help="fold constants offline (ONNX Runtime basic-level optimisation, saved as portable ONNX)"),
            Knob(name="shape_inference", values=[False, True], default=False, help="store inferred shapes in the graph"),
        ]

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        import onnx

        k = full_knobs(self, route, context.model)
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / "model.onnx"
        notes: list[str] = []
        src = source_model(context)
        if k["simplify"] == "none" and not k["constant_folding"] and not k["shape_inference"]:
            copy_file(src, target)  # the identity rewrite: the default route changes nothing
        else:
            model = onnx.load(str(src))
            if k["simplify"] == "onnxslim":
                import onnxslim

                model = onnxslim.slim(model)
                notes.append("simplified with onnxslim")
            elif k["simplify"] == "onnxsim":
                import onnxsim

                model, ok = onnxsim.simplify(model)
                if not ok:
                    raise RuntimeError("onnxsim could not verify the simplified model")
                notes.append("simplified with onnxsim")
            if k["constant_folding"]:
                model = _fold_constants(model, out_dir)
                notes.append("constants folded (ONNX Runtime basic level)")
            if k["shape_inference"]:
                model = onnx.shape_inference.infer_shapes(model, data_prop=True)
                notes.append("shapes inferred")
            tmp = target.with_name("model.part.onnx")
            onnx.save(model, str(tmp))
            tmp.replace(target)
        return make_artifact(self, "onnxruntime", route, out_dir, ["model.onnx"], {}, notes)


def _fold_constants(model: Any, work: Path) -> Any:
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    # Basic level only: its rewrites (constant folding, redundant-node elimination) stay standard ONNX,
    # so the result is still a valid input for OpenVINO and the other compilers.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    folded = work / "folded.part.onnx"
    options.optimized_model_filepath = str(folded)
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    result = onnx.load(str(folded))
    folded.unlink()
    return result
