"""Profiles validated like the real API, engines that record what was asked, build routes, timing caches."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.testing import fake_tensorrt
from gpt_triton.testing.fake_tensorrt import describe_engine

BOTH = ["10.13", "11.1"]


def _setup(trt: Any, model: Path) -> tuple[Any, Any, Any]:
    logger = trt.Logger(trt.Logger.INTERNAL_ERROR)  # quiet: the fake's state keeps every message anyway
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(model))
    return builder, network, builder.create_builder_config()


def _profile(builder: Any, name: str, low: list[int], opt: list[int], high: list[int]) -> Any:
    profile = builder.create_optimization_profile()
    profile.set_shape(name, low, opt, high)
    return profile


@pytest.mark.parametrize("version", BOTH)
def test_set_shape_validates_like_the_binding(version: str) -> None:
    trt = fake_tensorrt.module(version)
    profile = trt.Builder(trt.Logger()).create_optimization_profile()
    assert profile.get_shape("x") == []
    profile.set_shape("x", [1, 16], [8, 16], [32, 16])
    assert profile.get_shape("x") == [[1, 16], [8, 16], [32, 16]]
    assert isinstance(profile.get_shape("x")[0], trt.Dims)
    cases = {"opt": ([4, 16], [2, 16], [8, 16]), "max": ([1, 16], [8, 16], [4, 16]),
             "min": ([-1, 16], [1, 16], [1, 16])}
    for selector, (low, opt, high) in cases.items():
        fresh = trt.Builder(trt.Logger()).create_optimization_profile()
        with pytest.raises(RuntimeError, match=f"Shape provided for {selector} is inconsistent"):
            fresh.set_shape("y", low, opt, high)
    ranked = trt.Builder(trt.Logger()).create_optimization_profile()
    with pytest.raises(RuntimeError, match="for opt"):
        ranked.set_shape("y", [1, 16], [1, 16, 1], [1, 16, 1])
    assert ranked.get_shape("y")[0] == [1, 16] and not ranked  # min stayed set: the profile is not valid
    assert trt.Builder(trt.Logger()).create_builder_config().add_optimization_profile(ranked) == -1
    with pytest.raises(TypeError):
        ranked.set_shape("y", ["1", 16], [1, 16], [1, 16])
    with pytest.raises(TypeError):
        ranked.set_shape("y", [1] * 9, [1] * 9, [1] * 9)  # more than Dims.MAX_DIMS


@pytest.mark.parametrize("version", BOTH)
def test_build_checks_profiles_against_the_network(version: str, tiny_model_path: Path) -> None:
    trt = fake_tensorrt.module(version)
    state = fake_tensorrt.state(trt)
    builder, network, config = _setup(trt, tiny_model_path)
    assert builder.build_serialized_network(network, config) is None  # dynamic batch, no profile
    assert "no optimization profile" in state.log[-1][1]
    bad = [
        _profile(builder, "images", [1, 16], [1, 16], [1, 16]),  # not an input of this network
        _profile(builder, "x", [1, 16, 1], [1, 16, 1], [1, 16, 1]),  # rank 3 for a rank-2 input
        _profile(builder, "x", [1, 8], [1, 8], [1, 8]),  # changes the static dim 16
    ]
    for profile in bad:
        _, network, config = _setup(trt, tiny_model_path)
        assert config.add_optimization_profile(profile) == 0
        assert builder.build_serialized_network(network, config) is None
    _, network, config = _setup(trt, tiny_model_path)
    config.add_optimization_profile(_profile(builder, "x", [1, 16], [8, 16], [32, 16]))
    config.add_optimization_profile(_profile(builder, "x", [64, 16], [64, 16], [64, 16]))
    plan = builder.build_serialized_network(network, config)
    assert isinstance(plan, trt.IHostMemory) and plan.nbytes == len(bytes(plan))
    header = describe_engine(plan)
    assert header["profiles"] == [{"x": {"min": [1, 16], "opt": [8, 16], "max": [32, 16]}},
                                  {"x": {"min": [64, 16], "opt": [64, 16], "max": [64, 16]}}]
    assert state.builds[-1] == header


def test_static_network_gets_the_default_profile(static_model_path: Path) -> None:
    trt = fake_tensorrt.module("11.1")
    builder, network, config = _setup(trt, static_model_path)
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(builder.build_serialized_network(network, config))
    assert engine.num_optimization_profiles == 1
    assert engine.get_tensor_profile_shape("x", 0) == [[2, 16], [2, 16], [2, 16]]


def test_10x_engine_records_flags_levels_profile_and_dtypes(tiny_model_path: Path) -> None:
    trt = fake_tensorrt.module("10.13")
    builder, network, config = _setup(trt, tiny_model_path)
    config.set_flag(trt.BuilderFlag.FP16)
    config.clear_flag(trt.BuilderFlag.TF32)
    config.builder_optimization_level = 5
    config.max_aux_streams = 2
    config.tiling_optimization_level = trt.TilingOptimizationLevel.FAST
    config.set_tactic_sources(1 << int(trt.TacticSource.JIT_CONVOLUTIONS))
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
    network.get_layer(1).precision = trt.DataType.HALF
    config.add_optimization_profile(_profile(builder, "x", [1, 16], [8, 16], [32, 16]))
    plan = builder.build_serialized_network(network, config)
    recorded = describe_engine(plan)["config"]
    assert recorded["flags"] == ["FP16"] and recorded["builder_optimization_level"] == 5
    assert recorded["max_aux_streams"] == 2 and recorded["tiling_optimization_level"] == "FAST"
    assert recorded["tactic_sources"] == ["JIT_CONVOLUTIONS"]
    assert recorded["memory_pool_limits"] == {"WORKSPACE": 1 << 30}
    assert "build_route" not in recorded
    assert describe_engine(plan)["network"]["layers"][1]["precision"] == "HALF"
    runtime = trt.Runtime(trt.Logger())
    engine = runtime.deserialize_cuda_engine(plan)
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    assert names == ["x", "y"] and engine[1] == "y"
    assert engine.get_tensor_mode("x") == trt.TensorIOMode.INPUT
    assert engine.get_tensor_mode("y") == trt.TensorIOMode.OUTPUT
    assert engine.get_tensor_dtype("x") == trt.DataType.FLOAT
    assert engine.get_tensor_shape("x") == [-1, 16]
    assert engine.get_tensor_profile_shape("x", 0) == [[1, 16], [8, 16], [32, 16]]
    context = engine.create_execution_context()
    assert context.set_input_shape("x", [16, 16]) is True
    assert context.set_input_shape("x", [33, 16]) is False
    assert context.get_tensor_shape("x") == [16, 16] and context.all_binding_shapes_specified
    with pytest.raises(NotImplementedError):
        context.execute_async_v3(0)
    with pytest.raises(RuntimeError):
        context.set_optimization_profile_async(3, 0)


def test_11_precision_comes_from_the_network(half_model_path: Path) -> None:
    trt = fake_tensorrt.module("11.1")
    builder, network, config = _setup(trt, half_model_path)
    assert network.get_input(0).dtype == trt.DataType.HALF and network.get_input(0).shape == [-1, 3, 8, 8]
    config.add_optimization_profile(_profile(builder, "images", [1, 3, 8, 8], [8, 3, 8, 8], [16, 3, 8, 8]))
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(builder.build_serialized_network(network, config))
    assert engine.get_tensor_dtype("images") == trt.DataType.HALF
    assert engine.get_tensor_dtype("out") == trt.DataType.HALF


def test_engine_runs_only_where_it_was_built(tiny_model_path: Path) -> None:
    old = fake_tensorrt.module("10.13")
    builder, network, config = _setup(old, tiny_model_path)
    config.add_optimization_profile(_profile(builder, "x", [1, 16], [1, 16], [8, 16]))
    plan = builder.build_serialized_network(network, config)
    new = fake_tensorrt.module("11.1")
    assert new.Runtime(new.Logger(new.Logger.INTERNAL_ERROR)).deserialize_cuda_engine(plan) is None
    assert "expecting library version 11.1.0.106 got 10.13.3.9" in fake_tensorrt.state(new).log[-1][1]
    other_gpu = fake_tensorrt.module("10.13", compute_capability=(9, 0))
    assert other_gpu.Runtime(other_gpu.Logger(other_gpu.Logger.INTERNAL_ERROR)).deserialize_cuda_engine(plan) is None
    assert old.Runtime(old.Logger()).deserialize_cuda_engine(b"garbage") is None
    with pytest.raises(TypeError):
        old.Runtime(old.Logger()).deserialize_cuda_engine("a str")


def test_all_build_routes_has_the_real_shape() -> None:
    trt = fake_tensorrt.module("11.1")
    data = json.loads(trt.Builder(trt.Logger()).create_builder_config().all_build_routes)
    assert set(data) == {"tuner_version", "tuner_options"} and isinstance(data["tuner_version"], str)
    assert data["tuner_options"]
    for option in data["tuner_options"]:
        assert set(option) == {"option", "allowed_values", "default_value", "help"}
        assert option["option"].startswith("-")
        assert isinstance(option["allowed_values"], str)  # ONE string, not a list
        match = re.fullmatch(re.escape(option["option"]) + r"=\[(.+)\]", option["allowed_values"])
        assert match and option["default_value"] in match.group(1).split("|")
    no_tuner = fake_tensorrt.module("11.1", tuner=False)
    assert no_tuner.Builder(no_tuner.Logger()).create_builder_config().all_build_routes == ""


def test_build_route_rejection_is_silent_but_visible(tiny_model_path: Path) -> None:
    trt = fake_tensorrt.module("11.1")
    builder, network, config = _setup(trt, tiny_model_path)
    assert config.build_route == ""
    config.build_route = "-conv_use_long_w=off -kgen:codegen:cuda_tile=2"
    accepted = config.build_route
    assert accepted == "-conv_use_long_w=off -kgen:codegen:cuda_tile=2"
    for refused in ("-no_such_knob=on", "-conv_use_long_w=maybe", "conv_use_long_w=off",
                    "--conv_use_long_w=off", "-conv_use_long_w=on -conv_use_long_w=off"):
        config.build_route = refused  # no exception: the binding drops setBuildRoute's False
        assert config.build_route == accepted
    with pytest.raises(TypeError):
        config.build_route = 3
    config.add_optimization_profile(_profile(builder, "x", [1, 16], [8, 16], [8, 16]))
    assert describe_engine(builder.build_serialized_network(network, config))["config"]["build_route"] == accepted
    config.build_route = ""
    assert config.build_route == ""
    no_tuner = fake_tensorrt.module("11.1", tuner=False)
    bare = no_tuner.Builder(no_tuner.Logger(no_tuner.Logger.INTERNAL_ERROR)).create_builder_config()
    bare.build_route = "-conv_use_long_w=off"
    assert bare.build_route == ""


@pytest.mark.parametrize("version", BOTH)
def test_timing_cache_round_trip_and_combine(version: str, tiny_model_path: Path) -> None:
    trt = fake_tensorrt.module(version)
    builder, network, config = _setup(trt, tiny_model_path)
    profile = _profile(builder, "x", [1, 16], [8, 16], [8, 16])
    cache = config.create_timing_cache(b"")
    assert config.set_timing_cache(cache, ignore_mismatch=False) and config.get_timing_cache() is cache
    config.add_optimization_profile(profile)
    first = describe_engine(builder.build_serialized_network(network, config))["timing_cache"]
    assert first["misses"] == network.num_layers and first["hits"] == 0
    blob = bytes(cache.serialize())

    again = fake_tensorrt.module(version)  # a later process, same TensorRT, same GPU
    builder2, network2, config2 = _setup(again, tiny_model_path)
    loaded = config2.create_timing_cache(blob)
    assert config2.set_timing_cache(loaded, ignore_mismatch=False)
    config2.set_flag(again.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
    config2.add_optimization_profile(_profile(builder2, "x", [1, 16], [8, 16], [8, 16]))
    second = describe_engine(builder2.build_serialized_network(network2, config2))["timing_cache"]
    assert (second["hits"], second["misses"]) == (network.num_layers, 0)

    empty = config2.create_timing_cache(b"")
    assert empty.combine(loaded, False) is True and bytes(empty.serialize()) == bytes(loaded.serialize())
    other_gpu = fake_tensorrt.module(version, compute_capability=(9, 0))
    foreign = other_gpu.Builder(other_gpu.Logger()).create_builder_config().create_timing_cache(b"")
    foreign_here = config2.create_timing_cache(bytes(foreign.serialize()))
    assert empty.combine(foreign_here, False) is False and empty.combine(foreign_here, True) is True
    assert config2.set_timing_cache(foreign_here, ignore_mismatch=False) is False
    other_version = fake_tensorrt.module("10.5" if version != "10.5" else "11.1")
    alien = other_version.Builder(other_version.Logger()).create_builder_config().create_timing_cache(b"")
    assert config2.create_timing_cache(bytes(alien.serialize())) is None
    assert config2.create_timing_cache(b"not a cache") is None

    _, network3, config3 = _setup(again, tiny_model_path)
    config3.set_timing_cache(config3.create_timing_cache(b""), ignore_mismatch=False)
    config3.set_flag(again.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
    config3.add_optimization_profile(_profile(builder2, "x", [1, 16], [8, 16], [8, 16]))
    assert builder2.build_serialized_network(network3, config3) is None  # every layer misses
    config3.set_flag(again.BuilderFlag.DISABLE_TIMING_CACHE)
    assert describe_engine(builder2.build_serialized_network(network3, config3))["timing_cache"]["used"] is False
