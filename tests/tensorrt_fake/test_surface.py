"""The fake's API surface per TensorRT release: what exists, what is gone, numeric values, type strictness."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.testing import fake_tensorrt

TEN = ["10.5", "10.13", "10.16"]
ELEVEN = ["11.0", "11.1"]


def _network(trt: Any, model: Path, flags: int = 0) -> tuple[Any, Any, Any]:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(model)), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    return builder, network, parser


def test_versions_and_resolution() -> None:
    assert fake_tensorrt.module("10.13").__version__ == "10.13.3.9"
    assert fake_tensorrt.module("10.13.3").__version__ == "10.13.3.9"
    assert fake_tensorrt.module("11.1").__version__ == "11.1.0.106"
    assert fake_tensorrt.module("10.5.0.18").__version__ == "10.5.0.18"
    for unknown in ("9.3", "10.4", "10.13.1", "12.0"):
        with pytest.raises(ValueError):
            fake_tensorrt.module(unknown)
    assert set(TEN + ELEVEN) <= set(fake_tensorrt.SUPPORTED_VERSIONS)


@pytest.mark.parametrize("version", ELEVEN)
def test_removed_in_11_raise_attribute_error(version: str, tiny_model_path: Path) -> None:
    trt = fake_tensorrt.module(version)
    for name in ("FP16", "BF16", "INT8", "FP8", "FP4", "INT4", "OBEY_PRECISION_CONSTRAINTS", "WEIGHTLESS"):
        with pytest.raises(AttributeError):
            getattr(trt.BuilderFlag, name)
    for name in ("CUBLAS", "CUBLAS_LT", "CUDNN"):
        with pytest.raises(AttributeError):
            getattr(trt.TacticSource, name)
    with pytest.raises(AttributeError):
        _ = trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH
    builder, network, _ = _network(trt, tiny_model_path)
    for name in ("platform_has_fast_fp16", "platform_has_tf32", "platform_has_fast_int8"):
        assert not hasattr(builder, name)
    layer = network.get_layer(0)
    for name in ("precision", "set_output_type", "precision_is_set", "reset_precision"):
        assert not hasattr(layer, name)
    with pytest.raises(AttributeError):
        network.get_input(0).dtype = trt.DataType.HALF  # read-only on 11.x


@pytest.mark.parametrize("version", TEN + ["11.0"])
def test_build_route_absent_before_11_1(version: str) -> None:
    trt = fake_tensorrt.module(version)
    config = trt.Builder(trt.Logger()).create_builder_config()
    with pytest.raises(AttributeError):
        _ = config.build_route
    with pytest.raises(AttributeError):  # pybind objects refuse unknown attributes; so does the fake
        config.build_route = "-conv_use_long_w=off"
    with pytest.raises(AttributeError):
        _ = config.all_build_routes


def test_tiling_optimization_level_from_10_8() -> None:
    for version in ("10.5", "10.6", "10.7"):
        trt = fake_tensorrt.module(version)
        config = trt.Builder(trt.Logger()).create_builder_config()
        assert not hasattr(trt, "TilingOptimizationLevel")
        with pytest.raises(AttributeError):
            config.tiling_optimization_level = 1
    for version in ("10.8", "10.13", "11.1"):
        trt = fake_tensorrt.module(version)
        config = trt.Builder(trt.Logger()).create_builder_config()
        assert config.tiling_optimization_level == trt.TilingOptimizationLevel.NONE
        config.tiling_optimization_level = trt.TilingOptimizationLevel.FAST
        assert config.tiling_optimization_level == trt.TilingOptimizationLevel.FAST


def test_numeric_values_moved_in_11() -> None:
    ten, eleven = fake_tensorrt.module("10.13"), fake_tensorrt.module("11.1")
    assert (int(ten.TacticSource.EDGE_MASK_CONVOLUTIONS), int(eleven.TacticSource.EDGE_MASK_CONVOLUTIONS)) == (3, 0)
    assert (int(ten.TacticSource.JIT_CONVOLUTIONS), int(eleven.TacticSource.JIT_CONVOLUTIONS)) == (4, 1)
    assert (int(ten.BuilderFlag.VERSION_COMPATIBLE), int(eleven.BuilderFlag.VERSION_COMPATIBLE)) == (13, 12)
    assert int(ten.BuilderFlag.TF32) == int(eleven.BuilderFlag.TF32) == 6
    strongly = (int(ten.NetworkDefinitionCreationFlag.STRONGLY_TYPED),
                int(eleven.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    assert strongly == (1, 0)
    assert str(ten.BuilderFlag.FP16) == "BuilderFlag.FP16"
    assert ten.float16 == ten.DataType.HALF and not hasattr(fake_tensorrt.module("10.5"), "fp4")


@pytest.mark.parametrize("version", TEN + ELEVEN)
def test_defaults_and_type_strictness(version: str) -> None:
    trt = fake_tensorrt.module(version)
    other = fake_tensorrt.module(version)
    config = trt.Builder(trt.Logger(trt.Logger.ERROR)).create_builder_config()
    assert config.flags == 1 << int(trt.BuilderFlag.TF32) and config.get_flag(trt.BuilderFlag.TF32)
    defaults = (1 << int(trt.TacticSource.EDGE_MASK_CONVOLUTIONS)) | (1 << int(trt.TacticSource.JIT_CONVOLUTIONS))
    assert config.get_tactic_sources() == defaults  # CUBLAS/CUDNN are off by default on 10.x
    assert config.builder_optimization_level == 3
    with pytest.raises(TypeError):
        config.set_flag(6)
    with pytest.raises(TypeError):
        config.set_flag(other.BuilderFlag.TF32)  # another module's enum
    with pytest.raises(TypeError):
        trt.Builder(object())
    with pytest.raises(TypeError):
        trt.Builder(other.Logger())
    with pytest.raises(AttributeError):
        config.no_such_setting = 1
    assert config.set_tactic_sources(1 << 7) is False and config.get_tactic_sources() == defaults
    config.builder_optimization_level = -1  # refused, reported to the logger, not raised
    assert config.builder_optimization_level == 3
    config.max_aux_streams = -2
    assert config.max_aux_streams == -1


@pytest.mark.parametrize("version", TEN)
def test_10x_keeps_precision_flags_and_platform_queries(version: str) -> None:
    trt = fake_tensorrt.module(version)
    builder = trt.Builder(trt.Logger())
    assert builder.platform_has_fast_fp16 is True and builder.platform_has_tf32 is True
    assert {"FP16", "BF16", "INT8", "FP8"} <= set(trt.BuilderFlag.__members__)
    assert {"CUBLAS", "CUBLAS_LT", "CUDNN"} <= set(trt.TacticSource.__members__)
    assert int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH) == 0


def test_layer_precision_on_10x_and_deprecation(tiny_model_path: Path) -> None:
    old = fake_tensorrt.module("10.5")
    _, network, _ = _network(old, tiny_model_path)
    layer = network.get_layer(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer.precision = old.DataType.HALF  # no warning before 10.12
        layer.set_output_type(0, old.DataType.HALF)
    assert layer.precision == old.DataType.HALF and layer.get_output_type(0) == old.DataType.HALF
    new = fake_tensorrt.module("10.16")
    _, network, _ = _network(new, tiny_model_path)
    with pytest.warns(DeprecationWarning, match="Superseded by strong typing"):
        network.get_layer(0).set_output_type(0, new.DataType.HALF)
    strong_builder, strong, _ = _network(new, tiny_model_path, 1 << int(new.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    with pytest.warns(DeprecationWarning):
        strong.get_layer(0).precision = new.DataType.HALF  # rejected by a strongly typed network
    with pytest.warns(DeprecationWarning):
        assert strong.get_layer(0).precision_is_set is False
    assert any("strongly typed" in message for _, message in fake_tensorrt.state(new).log)
    assert network.num_layers == 6 and network.get_layer(99) is None


def test_parser_errors(tmp_path: Path) -> None:
    trt = fake_tensorrt.module("11.1")
    logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
    network = trt.Builder(logger).create_network()
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(b"not an onnx model") is False
    assert parser.num_errors == 1
    error = parser.get_error(0)
    assert error.code() == trt.ErrorCode.MODEL_DESERIALIZE_FAILED
    assert str(error).startswith("(parse): MODEL_DESERIALIZE_FAILED: ")
    assert parser.get_error(5) is None
    assert parser.parse_from_file(str(tmp_path / "missing.onnx")) is False and parser.num_errors == 2
    parser.clear_errors()
    assert parser.num_errors == 0
    with pytest.raises(TypeError):
        parser.parse("a str is not a buffer")


def test_installed_puts_and_restores_module() -> None:
    before = sys.modules.get("tensorrt")
    with fake_tensorrt.installed("10.13") as trt:
        import tensorrt

        assert tensorrt is trt and tensorrt.__version__ == "10.13.3.9"
        with fake_tensorrt.installed("11.1"):
            import tensorrt as inner

            assert inner.__version__ == "11.1.0.106"
        assert sys.modules["tensorrt"] is trt
    assert sys.modules.get("tensorrt") is before
