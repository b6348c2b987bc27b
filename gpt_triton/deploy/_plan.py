"""A TensorRT plan and the config.pbtxt that serves it must agree, checked here before Triton loads it.

Triton's tensorrt backend refuses a config whose max batch exceeds the engine's profile ("configuration
specified max-batch 16 but TensorRT engine only supports max-batch 8"), and a plan whose batch may grow past
1 gets the dynamic batcher whatever the config says (``deploy._config``). :func:`check_plan_config` is a pure
comparison of a written config with what the plan was built with: tensor names, data types, dims, the
profile's batch range and the warmup request's shape. Equal max batch is required, not merely "within",
so the serving knob that was measured is the one the engine was built for.

The engine's description has the layout the fake TensorRT records in its plans
(``gpt_triton.testing.fake_tensorrt.describe_engine``)::

    {"tensorrt_version": "10.13.3.9",
     "network": {"inputs": [{"name": "x", "dtype": "FLOAT", "shape": [-1, 16]}], "outputs": [...]},
     "profiles": [{"x": {"min": [1, 16], "opt": [1, 16], "max": [8, 16]}}]}

:func:`describe_plan` reads it from a ``model.plan`` with the ``tensorrt`` module's own API
(``deserialize_cuda_engine``, ``get_tensor_*``, ``get_tensor_profile_shape``), so the same code reads a real
plan on a GPU node and a fake one in tests.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton.core.routes import Artifact

# TensorRT DataType member name -> Triton data type (types without a Triton counterpart are absent).
TRT_TO_TRITON = {
    "FLOAT": "TYPE_FP32", "HALF": "TYPE_FP16", "BF16": "TYPE_BF16", "INT8": "TYPE_INT8", "UINT8": "TYPE_UINT8",
    "INT32": "TYPE_INT32", "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL",
}


def describe_plan(path: str | Path) -> dict[str, Any] | None:
    """The plan's inputs, outputs and profiles through the ``tensorrt`` module; None without one.

    Raises ValueError when this TensorRT cannot deserialize the plan (another TensorRT or GPU built it).
    """
    try:
        trt = importlib.import_module("tensorrt")
    except Exception:  # no TensorRT here: nothing to read the plan with
        return None
    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    engine = runtime.deserialize_cuda_engine(Path(path).read_bytes())
    if engine is None:
        raise ValueError(f"TensorRT {trt.__version__} here cannot deserialize {path}: another TensorRT version or "
                         "GPU built it; rebuild the candidate on this machine")
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]

    def tensor(name: str) -> dict[str, Any]:
        return {"name": name, "dtype": engine.get_tensor_dtype(name).name, "shape": list(engine.get_tensor_shape(name))}

    profiles = []
    for index in range(engine.num_optimization_profiles):
        shapes = (engine.get_tensor_profile_shape(name, index) for name in inputs)
        profiles.append({name: dict(zip(("min", "opt", "max"), ([int(d) for d in s] for s in shape), strict=True))
                         for name, shape in zip(inputs, shapes, strict=True)})
    return {"tensorrt_version": str(trt.__version__),
            "network": {"inputs": [tensor(n) for n in inputs], "outputs": [tensor(n) for n in names if n not in inputs]},
            "profiles": profiles}


def plan_path(artifact: Artifact) -> Path:
    return Path(artifact.directory) / artifact.files[0]


# numpy spelling (what the tensorrt family records in Artifact.engine) -> TensorRT DataType member name
_NUMPY_TO_TRT = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BF16", "int8": "INT8", "uint8": "UINT8",
                 "int32": "INT32", "int64": "INT64", "bool": "BOOL"}


def engine_from_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The tensorrt family's ``Artifact.engine`` record (inputs/outputs by name with numpy dtypes, one
    ``profile``) in the layout :func:`check_plan_config` reads."""

    def tensors(by_name: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{"name": name, "dtype": _NUMPY_TO_TRT.get(str(t["dtype"]), str(t["dtype"]).upper()),
                 "shape": [int(d) for d in t["shape"]]} for name, t in by_name.items()]

    profile = record.get("profile") or {}
    return {"tensorrt_version": record.get("tensorrt_version"),
            "network": {"inputs": tensors(record.get("inputs") or {}), "outputs": tensors(record.get("outputs") or {})},
            "profiles": [dict(profile)] if profile else []}


def plan_engine(artifact: Artifact) -> dict[str, Any] | None:
    """What ``artifact``'s plan was built with: the build's record (``Artifact.engine``) when it has one,
    else read from the plan file (:func:`describe_plan`); None when neither is available."""
    if artifact.engine.get("inputs"):
        return engine_from_record(artifact.engine)
    return describe_plan(plan_path(artifact))


def _type_name(value: int) -> str:
    return str(mc.DataType.Name(value))


def _dims_problems(where: str, config_dims: Sequence[int], plan_dims: Sequence[int]) -> list[str]:
    if len(config_dims) != len(plan_dims):
        return [f"{where}: config dims {list(config_dims)} have rank {len(config_dims)}, the plan's "
                f"{list(plan_dims)} rank {len(plan_dims)}"]
    # A dim the plan fixes must be that size in the config; a dynamic one (-1) may be fixed or dynamic there.
    if any(p >= 0 and c != p for c, p in zip(config_dims, plan_dims, strict=True)):
        return [f"{where}: config dims {list(config_dims)} differ from the plan's {list(plan_dims)}"]
    return []


def _within(shape: Sequence[int], low: Sequence[int], high: Sequence[int]) -> bool:
    return len(shape) == len(low) == len(high) and all(lo <= d <= hi for d, lo, hi in zip(shape, low, high, strict=True))


def check_plan_config(config: mc.ModelConfig, engine: Mapping[str, Any]) -> list[str]:
    """What disagrees between ``config`` and the plan ``engine`` describes ([] when they agree)."""
    network = engine.get("network", engine)
    inputs = {t["name"]: t for t in network["inputs"]}
    outputs = {t["name"]: t for t in network["outputs"] if t["name"] not in inputs}
    profiles: list[Mapping[str, Any]] = list(engine.get("profiles") or [])
    batched = config.max_batch_size > 0
    problems: list[str] = []
    config_inputs = {t.name: t for t in config.input}
    config_outputs = {t.name: t for t in config.output}
    if missing := sorted(set(inputs) - set(config_inputs)):
        problems.append(f"plan input(s) {missing} are missing from the config")
    if extra := sorted(set(config_inputs) - set(inputs)):
        problems.append(f"config input(s) {extra} are not inputs of the plan")
    if extra := sorted(set(config_outputs) - set(outputs)):
        problems.append(f"config output(s) {extra} are not outputs of the plan")
    for kind, declared, found in (("input", config_inputs, inputs), ("output", config_outputs, outputs)):
        for name in sorted(set(declared) & set(found)):
            plan, tensor = found[name], declared[name]
            want = TRT_TO_TRITON.get(plan["dtype"])
            if want is None:
                problems.append(f"{kind} {name}: the plan's TensorRT type {plan['dtype']} has no Triton data type")
            elif _type_name(tensor.data_type) != want:
                problems.append(f"{kind} {name}: config data type {_type_name(tensor.data_type)}, the plan's "
                                f"{plan['dtype']} is {want}")
            shape = list(plan["shape"])
            if batched:
                if not shape or shape[0] >= 0 and not (shape[0] == 1 == config.max_batch_size):
                    problems.append(f"{kind} {name}: config batches up to {config.max_batch_size} but the plan's "
                                    f"shape {shape} has no dynamic batch axis")
                    continue
                shape = shape[1:]
            problems += _dims_problems(f"{kind} {name}", list(tensor.dims), shape)
    indices = sorted({int(p) for group in config.instance_group for p in group.profile} or {0})
    for index in indices:
        if index >= len(profiles):
            problems.append(f"the config uses optimization profile {index}; the plan has {len(profiles)}")
            continue
        profile = profiles[index]
        for name in sorted(set(config_inputs) & set(inputs) & set(profile)):
            low, high = profile[name]["min"], profile[name]["max"]
            if batched and (high[0] != config.max_batch_size or low[0] > 1):
                problems.append(f"input {name}: config max_batch_size {config.max_batch_size}, the plan's profile "
                                f"{index} takes batch {low[0]}..{high[0]}; build the plan for batch 1.."
                                f"{config.max_batch_size}")
            for warmup in config.model_warmup:
                if name in warmup.inputs:
                    shape = ([warmup.batch_size] if batched else []) + list(warmup.inputs[name].dims)
                    if not _within(shape, low, high):
                        problems.append(f"input {name}: the tuned request shape {shape} is outside the plan's "
                                        f"profile {index} [{list(low)}, {list(high)}]")
    return problems
