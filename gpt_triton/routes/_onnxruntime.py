"""ONNX Runtime: on CPU, session options (runtime only) and precision rewrites (new model files); on a
GPU (:class:`OnnxRuntimeGpuFamily`), the CUDA or TensorRT execution provider served by Triton's
onnxruntime backend.

Facts this family is built on (ANCHORS.md): ``ORT_ENABLE_ALL`` is the main lever; spinning matters when
sessions share cores; static int8 with unsigned activations (u8s8) beat s8s8 by 2-4x; fp16 conversion
needs its Cast type mismatches repaired before ORT accepts the model; quantisation pre-processing must
degrade gracefully when symbolic shape inference fails.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.routes._base import Artifact, BuildContext, Knob, Route, RouteFamily
from gpt_triton.routes._common import copy_file, full_knobs, iter_calibration, make_artifact, source_model
from gpt_triton.routes._precision_groups import group_nodes, layer_groups, name_unnamed_nodes

_LEVELS = {
    "disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL",
}
_MODES = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
# Extra ops kept in fp32 on top of onnxconverter-common's own default block list.
_FP16_BLOCK_CHOICES: list[list[str]] = [[], ["Resize", "Softmax"], ["Resize", "Softmax", "LayerNormalization", "ReduceMean"]]


class OnnxRuntimeFamily(RouteFamily):
    name = "onnxruntime"
    kind = "compiler"
    runtime = "onnxruntime"
    file_knobs = ("precision", "fp16_op_block_list", "int8_activation_type", "fp32_groups")
    conditional = {
        "fp16_op_block_list": ("precision", ("fp16",)),
        "int8_activation_type": ("precision", ("int8_static",)),
        "fp32_groups": ("precision", ("fp16", "int8_static")),
    }

    def availability(self) -> tuple[bool, str]:
        try:
            import onnxruntime

            if "CPUExecutionProvider" not in onnxruntime.get_available_providers():
                return False, "onnxruntime has no CPUExecutionProvider"
            return True, ""
        except Exception as exc:  # an import failure of any kind means unavailable, never a crash
            return False, f"onnxruntime cannot be imported ({type(exc).__name__}: {exc})"

    def knobs(self, model: ModelInfo) -> list[Knob]:
        return [
            Knob(name="graph_optimization_level", values=list(_LEVELS), default="all",
                 help="ORT graph optimisation level; 'all' is ORT's own default and the main lever"),
            Knob(name="intra_op_threads", values=[0, 1, 2], default=0, help="intra-op threads; 0 = ORT default (one per core)"),
            Knob(name="inter_op_threads", values=[0, 1, 2], default=0, help="inter-op threads (parallel mode only); 0 = ORT default"),
            Knob(name="allow_spinning", values=[True, False], default=True,
                 help="intra-op threads spin-wait; off costs a lone session but helps when sessions share cores"),
            Knob(name="execution_mode", values=list(_MODES), default="sequential", help="operator scheduling"),
            Knob(name="enable_mem_arena", values=[True, False], default=True, help="CPU memory arena"),
            Knob(name="enable_mem_pattern", values=[True, False], default=True, help="memory pattern planning"),
            Knob(name="precision", values=["fp32", "fp16", "int8_dynamic", "int8_static"], default="fp32",
                 help="fp16 (onnxconverter-common, fp32 I/O), int8 dynamic, or int8 static QDQ calibrated on the tuning split"),
            Knob(name="fp16_op_block_list", values=[list(v) for v in _FP16_BLOCK_CHOICES], default=[],
                 help="for fp16: ops kept in fp32 in addition to the converter's default block list"),
            Knob(name="int8_activation_type", values=["uint8", "int8"], default="uint8",
                 help="for int8_static: activation type (uint8 = u8s8, ran 2-4x faster than s8s8 here)"),
            # Only the empty list is offered: which groups to keep is what the precision sensitivity search
            # (gpt_triton.precision) finds on the tuning split; a spec may also fix a list by hand.
            Knob(name="fp32_groups", values=[[]], default=[],
                 help="for fp16 / int8_static: layer groups (gpt_triton.routes._precision_groups) kept in fp32: "
                      "the fp16 node block list / the int8 nodes_to_exclude"),
        ]

    def runtime_options(self, route: Route, model: ModelInfo) -> dict[str, Any]:
        """The session options the deploy stage applies at load (schema shared with deploy)."""
        k = full_knobs(self, route, model)
        return {
            "session_options": {
                "graph_optimization_level": _LEVELS[k["graph_optimization_level"]],
                "intra_op_num_threads": int(k["intra_op_threads"]),
                "inter_op_num_threads": int(k["inter_op_threads"]),
                "execution_mode": _MODES[k["execution_mode"]],
                "enable_cpu_mem_arena": bool(k["enable_mem_arena"]),
                "enable_mem_pattern": bool(k["enable_mem_pattern"]),
            },
            "config_entries": {"session.intra_op.allow_spinning": "1" if k["allow_spinning"] else "0"},
        }

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        k = full_knobs(self, route, context.model)
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / "model.onnx"
        notes: list[str] = []
        precision = k["precision"]
        if precision == "fp32":
            copy_file(source_model(context), target)
        elif precision == "fp16":
            notes += _convert_fp16(source_model(context), target, list(k["fp16_op_block_list"]), list(k["fp32_groups"]))
        elif precision == "int8_dynamic":
            notes += _quantize(context, target, out_dir, static=False, activation="uint8")
        elif precision == "int8_static":
            notes += _quantize(context, target, out_dir, static=True, activation=str(k["int8_activation_type"]),
                               fp32_groups=list(k["fp32_groups"]))
        else:
            raise ValueError(f"unknown precision {precision!r}")
        return make_artifact(self, "onnxruntime", route, out_dir, ["model.onnx"], self.runtime_options(route, context.model), notes)


def float16_model(src: Path, block: Sequence[str] = (), fp32_groups: Sequence[str] = ()) -> tuple[Any, int]:
    """``src`` with float32 tensors turned float16, its I/O kept float32, the op types in ``block`` (beyond
    onnxconverter-common's default block list) and the nodes of the layer groups ``fp32_groups`` kept in
    float32; Cast type mismatches repaired.
    Returns (model, repairs). Shared by ONNX Runtime's fp16 route and TensorRT 11's strongly typed fp16."""
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(str(src))
    # The converter names the Casts it puts around blocked nodes after the node's name; unnamed nodes
    # (common in exported graphs) then get duplicate Cast names and outputs, which ORT rejects.
    name_unnamed_nodes(model)
    node_block = group_nodes(layer_groups(model), fp32_groups) if fp32_groups else []
    op_block = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(block))
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=op_block,
                                                 node_block_list=node_block or None)
    return converted, repair_fp16_casts(converted)


def _convert_fp16(src: Path, dst: Path, block: list[str], fp32_groups: list[str] | None = None) -> list[str]:
    converted, repaired = float16_model(src, block, fp32_groups or [])
    _save(converted, dst)
    notes = [f"fp16: kept {', '.join(block)} in fp32"] if block else []
    if fp32_groups:
        notes.append(f"fp16: kept layer group(s) {', '.join(fp32_groups)} in fp32")
    if repaired:
        notes.append(f"fp16: repaired {repaired} Cast type mismatch(es)")
    return notes


def _inferred_types(model: Any) -> dict[str, int]:
    """Element types by tensor name, inferred from the nodes (declared graph-output types are ignored)."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.value_info[:]
    for output in probe.graph.output:
        output.type.tensor_type.elem_type = 0  # undefined: let inference say what the producer makes
    inferred = onnx.shape_inference.infer_shapes(probe)
    types: dict[str, int] = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        if info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    for init in model.graph.initializer:
        types[init.name] = init.data_type
    return types


def repair_fp16_casts(model: Any) -> int:
    """Repair the type mismatches fp16 conversion leaves, so ORT accepts the model; returns Casts inserted.

    onnxconverter-common leaves stale ``value_info`` types, edges where an fp32 tensor meets an fp16
    consumer (or the reverse) around blocked ops, and graph outputs whose producer's type differs from the
    declared (kept fp32) type; ORT refuses each with a type error. Drop the stale types, then insert a Cast
    wherever a node mixes the two float types, and before every graph output whose type does not match.
    """
    from onnx import TensorProto, helper

    del model.graph.value_info[:]
    types = _inferred_types(model)
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16}
    # Ops whose float inputs need not share one type (shape-like inputs, or the Cast itself).
    free = {"Cast", "Shape", "Size", "Reshape", "Expand", "Slice", "Gather", "Resize", "Pad", "ConstantOfShape", "Tile"}
    repaired = 0
    new_nodes = []
    for node in model.graph.node:
        if node.op_type not in free and node.domain in ("", "ai.onnx"):
            float_inputs = [(i, name) for i, name in enumerate(node.input) if name and types.get(name) in floats]
            if len({types[name] for _, name in float_inputs}) > 1:
                # The majority type wins; ties go to fp32 (the exact side).
                n16 = sum(types[name] == TensorProto.FLOAT16 for _, name in float_inputs)
                want = TensorProto.FLOAT16 if n16 * 2 > len(float_inputs) else TensorProto.FLOAT
                for i, name in float_inputs:
                    if types[name] != want:
                        cast_out = f"{name}_repaired_cast_{repaired}"
                        new_nodes.append(helper.make_node("Cast", [name], [cast_out], to=want, name=f"repair_cast_{repaired}"))
                        types[cast_out] = want
                        node.input[i] = cast_out
                        repaired += 1
        new_nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(new_nodes)
    types = _inferred_types(model)
    for output in model.graph.output:
        declared, actual = output.type.tensor_type.elem_type, types.get(output.name)
        if declared in floats and actual in floats and declared != actual:
            inner = f"{output.name}_before_repair_cast"
            for node in model.graph.node:
                node.output[:] = [inner if o == output.name else o for o in node.output]
                node.input[:] = [inner if i == output.name else i for i in node.input]
            model.graph.node.append(helper.make_node("Cast", [inner], [output.name], to=declared, name=f"repair_cast_{repaired}"))
            repaired += 1
    return repaired


def _save(model: Any, dst: Path) -> None:
    import onnx

    tmp = dst.with_name(dst.name + ".part")
    onnx.save(model, str(tmp))
    tmp.replace(dst)


def _preprocess(src: Path, dst: Path) -> list[str]:
    """quant_pre_process with graceful degradation: full, then without symbolic shapes, then a plain copy."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    for skip_symbolic in (False, True):
        try:
            quant_pre_process(str(src), str(dst), skip_symbolic_shape=skip_symbolic)
            return [] if not skip_symbolic else ["int8: symbolic shape inference failed; pre-processed without it"]
        except Exception as exc:  # noqa: PERF203 - any failure degrades to the next, weaker step
            last = f"{type(exc).__name__}: {exc}"
    copy_file(src, dst)
    return [f"int8: pre-processing skipped ({last.splitlines()[0][:160]})"]


def _surviving_names(model_path: Path, names: Sequence[str]) -> list[str]:
    """The nodes of the pre-processed model that stand for ``names``: the same name, or a node ORT's fusions
    made from it (``<first fused node>/MatMulAddFusion``), since pre-processing fuses MatMul+Add into Gemm."""
    import onnx

    wanted = set(names)
    out = []
    for node in onnx.load(str(model_path), load_external_data=False).graph.node:
        fused = node.name.split("/")[-1].endswith("Fusion") and node.name.rsplit("/", 1)[0] in wanted
        if node.name in wanted or fused:
            out.append(node.name)
    return out


def _quantize(context: BuildContext, target: Path, out_dir: Path, *, static: bool, activation: str,
              fp32_groups: Sequence[str] = ()) -> list[str]:
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    work = out_dir / "_quant"
    work.mkdir(exist_ok=True)
    src = source_model(context)
    notes: list[str] = []
    model = onnx.load(str(src))
    exclude: list[str] = []
    if fp32_groups:
        # Groups are cut on the source graph; unnamed nodes get the names the grouping gives them, and the
        # named copy is what gets quantised, so the exclusion list names real nodes.
        if name_unnamed_nodes(model):
            src = work / "named.onnx"
            _save(model, src)
        exclude = group_nodes(layer_groups(model), fp32_groups)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 13:  # quantisation needs per-axis QDQ, which needs opset 13 (ANCHORS.md)
        model = onnx.version_converter.convert_version(model, 13)
        src = work / "opset13.onnx"
        _save(model, src)
        notes.append(f"int8: converted opset {opset} -> 13")
    pre = work / "pre.onnx"
    notes += _preprocess(src, pre)
    if exclude:
        exclude = _surviving_names(pre, exclude)
    tmp = target.with_name(target.name + ".part")
    if static:
        feeds = list(iter_calibration(context))

        class _Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self._it = iter(feeds)

            def get_next(self) -> dict[str, Any] | None:
                return next(self._it, None)

        act = QuantType.QUInt8 if activation == "uint8" else QuantType.QInt8
        quantize_static(str(pre), str(tmp), _Reader(), quant_format=QuantFormat.QDQ, activation_type=act,
                        weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": activation == "int8"},
                        nodes_to_exclude=exclude or None)
        notes.append(f"int8 static QDQ ({'u8s8' if activation == 'uint8' else 's8s8'}), calibrated on {len(feeds)} tuning requests")
        if fp32_groups:
            notes.append(f"int8: kept layer group(s) {', '.join(fp32_groups)} in fp32 ({len(exclude)} nodes excluded)")
    else:
        quantize_dynamic(str(pre), str(tmp), weight_type=QuantType.QInt8)
    tmp.replace(target)
    for leftover in work.iterdir():
        leftover.unlink()
    work.rmdir()
    return notes


_GPU_PROVIDERS = {
    "cuda": ["CUDAExecutionProvider"],
    # ORT's own order: TensorRT takes the subgraphs it can, CUDA the rest (Triton's backend does the same).
    "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider"],
}
TRT_WORKSPACE_BYTES = 1 << 30  # written explicitly: ORT's default changed across releases, the backend's is 1 GiB


def _nvidia_gpu() -> tuple[bool, str]:
    if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
        return False, "no NVIDIA GPU on this machine (the tuner runs next to the GPU Triton it tunes)"
    return True, ""


class OnnxRuntimeGpuFamily(RouteFamily):
    """ONNX Runtime on a GPU, served by Triton's onnxruntime backend on KIND_GPU instances: the CUDA
    execution provider, or TensorRT's with CUDA as its fallback. The runtime options carry the providers
    and their options; ``OnnxRuntime.native_config`` maps them to the backend's
    ``optimization { execution_accelerators { gpu_execution_accelerator ... } }``. Building writes only
    the ONNX file (fp32, or fp16 with fp32 I/O), so it needs no GPU; serving does."""

    name = "onnxruntime_gpu"
    kind = "compiler"
    runtime = "onnxruntime"
    file_knobs = ("precision",)
    conditional = {
        "trt_precision": ("execution_provider", ("tensorrt",)),
        "cudnn_conv_algo_search": ("execution_provider", ("cuda",)),
    }

    def availability(self) -> tuple[bool, str]:
        return _nvidia_gpu()

    def knobs(self, model: ModelInfo) -> list[Knob]:
        return [
            Knob(name="execution_provider", values=list(_GPU_PROVIDERS), default="cuda",
                 help="cuda: CUDA EP; tensorrt: TensorRT EP with CUDA as its fallback (onnxruntime backend accelerator)"),
            Knob(name="precision", values=["fp32", "fp16"], default="fp32",
                 help="model file: fp32, or fp16 (onnxconverter-common, fp32 I/O)"),
            Knob(name="trt_precision", values=["fp32", "fp16"], default="fp32",
                 help="with the TensorRT EP: its precision_mode (trt_fp16_enable)"),
            Knob(name="cudnn_conv_algo_search", values=["EXHAUSTIVE", "HEURISTIC", "DEFAULT"], default="EXHAUSTIVE",
                 help="with the CUDA EP: how cuDNN picks convolution algorithms"),
            Knob(name="graph_optimization_level", values=list(_LEVELS), default="all", help="ORT graph optimisation level"),
        ]

    def runtime_options(self, route: Route, model: ModelInfo) -> dict[str, Any]:
        k = full_knobs(self, route, model)
        providers = _GPU_PROVIDERS[k["execution_provider"]]
        provider_options: dict[str, dict[str, str]] = {}
        if k["execution_provider"] == "tensorrt":
            provider_options["TensorrtExecutionProvider"] = {
                "trt_fp16_enable": "1" if k["trt_precision"] == "fp16" else "0",
                "trt_max_workspace_size": str(TRT_WORKSPACE_BYTES),
            }
        else:
            provider_options["CUDAExecutionProvider"] = {"cudnn_conv_algo_search": str(k["cudnn_conv_algo_search"])}
        return {
            "providers": list(providers),
            "provider_options": provider_options,
            "session_options": {"graph_optimization_level": _LEVELS[k["graph_optimization_level"]]},
        }

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        k = full_knobs(self, route, context.model)
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / "model.onnx"
        notes: list[str] = []
        if k["precision"] == "fp16":
            notes += _convert_fp16(source_model(context), target, [])
        else:
            copy_file(source_model(context), target)
        return make_artifact(self, "onnxruntime", route, out_dir, ["model.onnx"], self.runtime_options(route, context.model), notes)
