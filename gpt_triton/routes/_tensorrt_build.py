"""The steps of one TensorRT build, each written against the real Python API of every supported release.

Facts used (NVIDIA/TensorRT ``python/src/infer/pyCore.cpp``, ``include/NvInfer.h``; tags v10.5.0 ... v11.1, the
table in gpt_triton.testing.fake_tensorrt): enum members are read by name and turned into bit masks only through
``int(trt.X.MEMBER)``, because 11.0 renumbered them (TacticSource.JIT_CONVOLUTIONS is 4 on 10.x and 1 on 11.x;
NetworkDefinitionCreationFlag.STRONGLY_TYPED is 1 on 10.x and 0 on 11.x); ``set_tactic_sources`` and
``add_optimization_profile`` report failure by return value, ``build_serialized_network`` by returning None with the
reason sent to the logger, so every step checks and raises with what TensorRT logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpt_triton.core.routes import BuildContext
from gpt_triton.routes._tensorrt_knobs import (
    AUTO_AUX_STREAMS,
    STRONGLY_TYPED_SINCE,
    TACTIC_SOURCE_OFF,
    Version,
)

# TensorRT DataType member -> numpy-style name, the spelling of gpt_triton.core.model_info.TensorInfo.dtype
DTYPE_NAMES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
               "INT64": "int64", "BOOL": "bool", "UINT8": "uint8", "FP8": "float8e4m3", "INT4": "int4", "FP4": "fp4"}


def collecting_logger(trt: Any, errors: list[str]) -> Any:
    """A ``trt.ILogger`` keeping every ERROR / INTERNAL_ERROR message, so failures can say what TensorRT said."""

    class _Collecting(trt.ILogger):  # type: ignore[name-defined, misc]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)  # pybind trampolines need the base constructor called

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.Severity.ERROR):  # INTERNAL_ERROR is 0, ERROR 1
                errors.append(str(msg))

    return _Collecting()


def said(errors: list[str]) -> str:
    return "; ".join(errors[-3:]) if errors else "TensorRT logged no error"


def convert_fp16(src: Path, dst: Path, fp32_groups: Sequence[str] = ()) -> list[str]:
    """The model with float32 tensors turned float16 and its I/O kept float32: how a strongly typed network
    (TensorRT 11) gets reduced precision. onnxconverter-common, then the Cast repair ONNX Runtime's fp16 route
    needs too (mixed fp16/fp32 inputs to one node are refused by a strongly typed network as well). The nodes
    of the layer groups ``fp32_groups`` keep float32 types, which a strongly typed network then obeys."""
    import onnx

    from gpt_triton.routes._onnxruntime import float16_model

    converted, repaired = float16_model(src, (), fp32_groups)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(converted, str(dst))
    notes = ["fp16: network converted to float16 (I/O kept float32), built strongly typed"]
    if fp32_groups:
        notes.append(f"fp16: layer group(s) {', '.join(fp32_groups)} keep float32 types")
    return notes + ([f"fp16: repaired {repaired} Cast type mismatch(es)"] if repaired else [])


def _owner(layer_name: str, nodes: Sequence[str]) -> str | None:
    """The ONNX node a parsed layer comes from: the node of the same name, else the longest node name the layer's
    name extends (the parser names a node's extra layers ``<node>_<n>`` or ``<node>/...``)."""
    best = None
    for node in nodes:
        if layer_name == node:
            return node
        if layer_name.startswith(node) and layer_name[len(node)] in "_/." and (best is None or len(node) > len(best)):
            best = node
    return best


def keep_fp32(trt: Any, network: Any, config: Any, all_nodes: Sequence[str], kept_nodes: Sequence[str],
              errors: list[str]) -> list[str]:
    """TensorRT 10.x, weakly typed: the layers parsed from ``kept_nodes`` run in fp32 (``layer.precision`` and
    their float outputs' ``set_output_type``), and ``OBEY_PRECISION_CONSTRAINTS`` makes the builder honour them
    (``PREFER`` would let it fall back to fp16 where it finds no fp32 kernel). The setters report refusals to
    the logger only, so the log is checked."""
    wanted = set(kept_nodes)
    before = len(errors)
    fp32 = trt.DataType.FLOAT
    floats = {"FLOAT", "HALF", "BF16"}
    layers = 0
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if _owner(str(layer.name), all_nodes) not in wanted:
            continue
        layer.precision = fp32
        for out in range(layer.num_outputs):
            if layer.get_output(out).dtype.name in floats:
                layer.set_output_type(out, fp32)
        layers += 1
    if len(errors) > before:
        raise RuntimeError(f"TensorRT refused per-layer precision: {said(errors[before:])}")
    if not layers:
        raise ValueError(f"no layer of the parsed network comes from the {len(wanted)} node(s) to keep in fp32")
    config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    return [f"{layers} layer(s) kept in fp32 (layer.precision + OBEY_PRECISION_CONSTRAINTS)"]


def creation_flags(trt: Any, version: Version) -> int:
    """11.x networks are strongly typed whatever the flags say; asking for it keeps the intent explicit. 10.x
    networks stay weakly typed so the precision flags apply."""
    if version >= STRONGLY_TYPED_SINCE:
        return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0


def apply_precision(trt: Any, config: Any, precision: str, version: Version) -> None:
    if precision == "tf32":  # BuilderFlag.TF32 is set by default on every release
        return
    if precision == "fp32":
        config.clear_flag(trt.BuilderFlag.TF32)
        return
    if version >= STRONGLY_TYPED_SINCE:
        if precision == "fp16":
            return  # the network's own types carry it (see convert_fp16)
        raise ValueError(f"precision {precision!r} is not offered with TensorRT {version[0]}.{version[1]} "
                         "(networks are strongly typed there); use fp32, tf32 or fp16")
    flag = {"fp16": "FP16", "bf16": "BF16"}.get(precision)
    if flag is None:
        raise ValueError(f"unknown precision {precision!r}; use fp32, tf32, fp16 or bf16")
    config.set_flag(getattr(trt.BuilderFlag, flag))


def apply_classic(trt: Any, config: Any, knobs: dict[str, Any], errors: list[str]) -> None:
    """Optimization level, tiling, aux streams and tactic sources, for the knobs the route has."""
    if "builder_optimization_level" in knobs:
        level = int(knobs["builder_optimization_level"])
        config.builder_optimization_level = level
        if config.builder_optimization_level != level:  # the setter reports a refusal only to the logger
            raise ValueError(f"TensorRT refused builder_optimization_level={level}: {said(errors)}")
    tiling = str(knobs.get("tiling_optimization_level", "none"))
    if tiling != "none":
        member = getattr(trt.TilingOptimizationLevel, tiling.upper(), None)
        if member is None:
            raise ValueError(f"tiling_optimization_level {tiling!r} is not one of none, fast, moderate, full")
        config.tiling_optimization_level = member
    streams = int(knobs.get("max_aux_streams", AUTO_AUX_STREAMS))
    if streams != AUTO_AUX_STREAMS:
        config.max_aux_streams = streams
        if config.max_aux_streams != streams:
            raise ValueError(f"TensorRT refused max_aux_streams={streams}: {said(errors)}")
    sources = str(knobs.get("tactic_sources", "default"))
    if sources != "default":
        if sources not in TACTIC_SOURCE_OFF:
            raise ValueError(f"tactic_sources {sources!r} is not one of default, {', '.join(TACTIC_SOURCE_OFF)}")
        mask = config.get_tactic_sources() & ~(1 << int(getattr(trt.TacticSource, TACTIC_SOURCE_OFF[sources])))
        if not config.set_tactic_sources(mask):
            raise RuntimeError(f"TensorRT refused tactic sources mask {mask:#x} ({sources}): {said(errors)}")


def profile_shapes(context: BuildContext, inputs: list[str]) -> dict[str, dict[str, list[int]]]:
    """min/opt/max per network input. Batched (``max_batch_size`` > 0): batch 1 .. opt .. max_batch_size, the
    range Triton's tensorrt backend requires for the config's max_batch_size; opt is the batch the server will
    mostly run (``opt_batch_size``, else the request's), since TensorRT picks each layer's kernels by timing them
    at opt. Other dims are the request's. Unbatched: the request shape exactly."""
    profile: dict[str, dict[str, list[int]]] = {}
    top = context.max_batch_size
    for name in inputs:
        shape = context.shapes.get(name)
        if shape is None:
            raise ValueError(f"the network input {name!r} has no request shape (shapes given: {sorted(context.shapes)}); "
                             "pass --shape for it")
        if top <= 0:
            profile[name] = {"min": list(shape), "opt": list(shape), "max": list(shape)}
            continue
        if shape[0] > top:
            raise ValueError(f"input {name!r} requests batch {shape[0]} but the serving route's max_batch_size is {top}; "
                             "raise max_batch_size or send smaller batches (--shape)")
        opt = min(max(context.opt_batch_size or shape[0], 1), top)
        rest = list(shape[1:])
        profile[name] = {"min": [1, *rest], "opt": [opt, *rest], "max": [top, *rest]}
    return profile


def add_profile(builder: Any, config: Any, shapes: dict[str, dict[str, list[int]]], errors: list[str]) -> None:
    profile = builder.create_optimization_profile()
    for name, dims in shapes.items():
        profile.set_shape(name, dims["min"], dims["opt"], dims["max"])
    if config.add_optimization_profile(profile) < 0:
        raise RuntimeError(f"TensorRT refused the optimization profile {shapes}: {said(errors)}")


def tensors(network: Any, inputs: bool) -> dict[str, dict[str, Any]]:
    """Name -> dtype (numpy spelling) and dims (-1 dynamic) of the network's inputs or outputs."""
    count = network.num_inputs if inputs else network.num_outputs
    found = {}
    for index in range(count):
        tensor = network.get_input(index) if inputs else network.get_output(index)
        kind = tensor.dtype.name
        found[str(tensor.name)] = {"dtype": DTYPE_NAMES.get(kind, kind.lower()), "shape": [int(d) for d in tensor.shape]}
    return found


def write_plan(plan: Any, target: Path) -> None:
    tmp = target.with_name(target.name + ".part")
    with open(tmp, "wb") as handle:
        handle.write(memoryview(plan))
    tmp.replace(target)
