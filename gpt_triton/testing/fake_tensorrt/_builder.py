"""``tensorrt.Builder``: networks, configs, profiles, and a build that RECORDS instead of compiling.

Bindings followed: pyCore.cpp ``py::class_<IBuilder>(m, "Builder")`` at the tags in ``_releases.RELEASES``:
``Builder(logger)``, ``create_network(flags=0)``, ``create_builder_config()``, ``create_optimization_profile()``,
``build_serialized_network(network, config)`` (returns IHostMemory, or None on failure, the error going to the
logger), ``logger``, ``max_threads``, ``num_DLA_cores``, ``max_DLA_batch_size``, ``error_recorder``;
``platform_has_tf32`` / ``platform_has_fast_fp16`` / ``platform_has_fast_int8`` up to 10.16 (gone in 11.0).

The serialized "engine" is :data:`PLAN_MAGIC` followed by a JSON header of what was asked: the TensorRT version
and the fake GPU's compute capability, the network (inputs/outputs with dtypes and dims, layers with any precision
or output type set), the config (flags by name, optimization level, aux streams, tiling, tactic sources, pool
limits, and at 11.1 the build route in effect), every optimization profile (min/opt/max per input) and the timing
cache's use (hits, misses). ``fake_tensorrt.describe_engine(blob)`` reads it back.

Build failures modelled (None returned, error logged): no network output; a dynamic input (a -1 dim) and no
profile; a profile missing a dynamic input, naming a tensor that is not a network input, with a rank other than
the input's, or changing a static dim; ``ERROR_ON_TIMING_CACHE_MISS`` with a cache miss. Networks without
dynamic inputs get the default profile TensorRT generates (min = opt = max = the network dims).
The timing cache is consulted and filled unless ``DISABLE_TIMING_CACHE`` is set or the optimization level is 0
(NvInfer.h: level 0 "will also not respect a timing cache").
NOT modelled: kernels, timing, memory, DLA, refit, plugins, version-compatible / hardware-compatible plans,
what precision flags do to a strongly typed 10.x network, ``build_engine_with_config``,
``build_serialized_network_to_stream``, ``is_network_supported``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpt_triton.testing.fake_tensorrt._config import load_timing_cache
from gpt_triton.testing.fake_tensorrt._releases import at_least
from gpt_triton.testing.fake_tensorrt._types import Context, IHostMemory, check_int, incompatible

PLAN_MAGIC = b"\x00gpt-triton fake TensorRT plan\x00"
# flags that change which kernels a layer may use, hence the fake timing-cache key
_PRECISION_FLAGS = frozenset({"FP16", "BF16", "INT8", "FP8", "FP4", "INT4", "TF32", "STRICT_NANS"})


def _io(tensor: Any) -> dict[str, Any]:
    return {"name": tensor._name, "dtype": tensor._dtype.name, "shape": list(tensor._shape)}


class BuilderBase:
    __slots__ = ("_logger", "_max_threads", "_error_recorder")
    _ctx: Context

    def __init__(self, logger: Any) -> None:
        if not isinstance(logger, self._ctx.classes["ILogger"]):
            raise TypeError(f"__init__(): incompatible constructor arguments. Invoked with: {logger!r}")
        self._logger, self._max_threads, self._error_recorder = logger, 1, None

    @property
    def logger(self) -> Any:
        return self._logger

    @property
    def max_threads(self) -> int:
        return int(self._max_threads)

    @max_threads.setter
    def max_threads(self, value: int) -> None:
        self._max_threads = check_int(value, "max_threads")

    @property
    def num_DLA_cores(self) -> int:
        return 0

    @property
    def max_DLA_batch_size(self) -> int:
        return 1

    @property
    def error_recorder(self) -> Any:
        return self._error_recorder

    @error_recorder.setter
    def error_recorder(self, value: Any) -> None:
        self._error_recorder = value

    def create_network(self, flags: int = 0) -> Any:
        flags = check_int(flags, "create_network")
        strongly = at_least(self._ctx.key, "11.0") or bool(
            flags & (1 << int(self._ctx.member("NetworkDefinitionCreationFlag", "STRONGLY_TYPED"))))
        return self._ctx.classes["INetworkDefinition"](self, flags, strongly)

    def create_builder_config(self) -> Any:
        return self._ctx.classes["IBuilderConfig"](self)

    def create_optimization_profile(self) -> Any:
        return self._ctx.classes["IOptimizationProfile"]()

    def build_serialized_network(self, network: Any, config: Any) -> IHostMemory | None:
        ctx = self._ctx
        if not isinstance(network, ctx.classes["INetworkDefinition"]) or not isinstance(
                config, ctx.classes["IBuilderConfig"]):
            raise incompatible("build_serialized_network", network, config)
        problem, profiles = _profiles(network, config)
        if problem:
            ctx.emit(self._logger, "ERROR", problem)
            return None
        timing, problem = _timing(ctx, network, config, profiles)
        if problem:
            ctx.emit(self._logger, "ERROR", problem)
            return None
        header = {
            "format": 1, "tensorrt_version": ctx.state.release.version,
            "compute_capability": list(ctx.state.compute_capability),
            "network": {"name": network._name, "strongly_typed": network._strongly_typed,
                        "creation_flags": network._flags, "inputs": [_io(t) for t in network._inputs],
                        "outputs": [_io(t) for t in network._outputs],
                        "layers": [layer.describe() for layer in network._layers]},
            "config": config.describe(), "profiles": profiles, "timing_cache": timing,
        }
        ctx.state.builds.append(header)
        return IHostMemory(PLAN_MAGIC + json.dumps(header).encode())


def _profiles(network: Any, config: Any) -> tuple[str, list[dict[str, dict[str, list[int]]]]]:
    inputs = {t._name: t._shape for t in network._inputs}
    if not network._outputs:
        return "Network must have at least one output", []
    dynamic = [name for name, shape in inputs.items() if any(d < 0 for d in shape)]
    raw = [p._shapes for p in config._profiles]
    if not raw:
        if dynamic:
            return ("Network has dynamic or shape inputs, but no optimization profile has been defined "
                    f"(dynamic inputs: {', '.join(dynamic)})."), []
        raw = [{}]
    profiles = []
    for index, shapes in enumerate(raw):
        profile: dict[str, dict[str, list[int]]] = {}
        for name, selectors in shapes.items():
            if name not in inputs:
                return f"Optimization profile {index}: {name!r} is not a network input.", []
            if set(selectors) != {"min", "opt", "max"}:
                return f"Optimization profile {index}: {name!r} lacks min, opt or max.", []
            network_dims = inputs[name]
            for selector, dims in selectors.items():
                if len(dims) != len(network_dims):
                    return (f"Optimization profile {index}: {selector} dims {list(dims)} of {name!r} have rank "
                            f"{len(dims)}, the network input has rank {len(network_dims)}."), []
                if any(n >= 0 and d != n for n, d in zip(network_dims, dims, strict=False)):
                    return (f"Optimization profile {index}: {selector} dims {list(dims)} of {name!r} differ from "
                            f"its static dims {list(network_dims)}."), []
            profile[name] = {s: list(selectors[s]) for s in ("min", "opt", "max")}
        for name in dynamic:
            if name not in profile:
                return f"Optimization profile {index} is missing values for dynamic input {name!r}.", []
        for name, dims in inputs.items():
            profile.setdefault(name, {s: list(dims) for s in ("min", "opt", "max")})
        profiles.append({name: profile[name] for name in inputs})
    return "", profiles


def _timing(ctx: Context, network: Any, config: Any, profiles: list[Any]) -> tuple[dict[str, Any], str]:
    flag = ctx.enum("BuilderFlag")
    disabled = bool(config._flags & (1 << int(flag["DISABLE_TIMING_CACHE"]))) or config._level == 0
    attached = config._cache is not None
    record = {"attached": attached, "used": not disabled, "hits": 0, "misses": 0,
              "ignore_mismatch": config._cache_ignore}
    if disabled:
        return record, ""
    cache = config._cache if attached else load_timing_cache(ctx, b"")
    opt = {name: p["opt"] for name, p in profiles[0].items()} if profiles else {}
    precision = [m.name for m in flag if m.name in _PRECISION_FLAGS and config._flags & (1 << int(m))]
    keys = []
    for layer in network._layers:
        signature = json.dumps([layer._op, [t._dtype.name for t in layer._inputs], layer.describe(), precision,
                                config._tactics, opt])
        keys.append("0x" + hashlib.sha256(signature.encode()).hexdigest()[:32])
    misses = [k for k in keys if k not in cache._entries]
    record.update(hits=len(keys) - len(misses), misses=len(misses))
    miss_flag = getattr(flag, "ERROR_ON_TIMING_CACHE_MISS", None)
    if misses and miss_flag is not None and config._flags & (1 << int(miss_flag)):
        return record, f"Timing cache miss on {len(misses)} layer(s) with ERROR_ON_TIMING_CACHE_MISS set."
    for key in misses:
        cache._entries[key] = 1.0  # a made-up time: the fake measures nothing
    return record, ""


def _platform(capability: tuple[int, int]) -> dict[str, Any]:
    return {"platform_has_tf32": property(lambda self: capability >= (8, 0)),
            "platform_has_fast_fp16": property(lambda self: capability >= (5, 3)),
            "platform_has_fast_int8": property(lambda self: capability >= (6, 1))}


def version_members(ctx: Context) -> dict[str, Any]:
    return {} if at_least(ctx.key, "11.0") else _platform(ctx.state.compute_capability)
