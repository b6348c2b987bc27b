"""TensorRT family: conformance against FakeTensorRT 10.13 and 11.1 (no GPU needed), the real thing on a GPU,
and one test per production defect the fake exposed (each fails when its fix is reverted)."""

from __future__ import annotations

import fcntl
import json
import threading
import types
from pathlib import Path
from typing import Any, ClassVar

import onnx
import pytest

from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.routes import Artifact, BuildContext, Route, TensorRtFamily
from gpt_triton.routes._tensorrt import ENGINE_KEYS, Gpu
from gpt_triton.routes._tensorrt_cache import cache_path, save
from gpt_triton.routes._tensorrt_knobs import catalog, classic_knobs, route_string, tuner_options
from gpt_triton.runtimes import TensorRt
from gpt_triton.testing import fake_tensorrt
from gpt_triton.testing.conformance.families import FamilyConformance
from gpt_triton.testing.fake_tensorrt._config import CACHE_MAGIC
from gpt_triton.testing.models import build_tiny_mlp

_AVAILABLE, _WHY = TensorRtFamily().availability()
FAKE_GPU = Gpu("Fake GPU (gpt_triton.testing.fake_tensorrt)", "8.9")


def fake_family(version: str, **options: Any) -> TensorRtFamily:
    """The production family over a fake tensorrt module and a fake GPU probe (the family's own seams)."""
    trt = fake_tensorrt.module(version, **options)
    return TensorRtFamily(tensorrt=lambda: trt, gpu=lambda: FAKE_GPU)


def fake_of(family: TensorRtFamily) -> types.ModuleType:
    module: types.ModuleType = family._load()
    return module


def plan_header(artifact: Artifact) -> dict[str, Any]:
    return fake_tensorrt.describe_engine((Path(artifact.directory) / artifact.files[0]).read_bytes())


def build(family: TensorRtFamily, context: BuildContext, out: Path, **knobs: Any) -> Artifact:
    route = family.default_route(context.model)
    return family.build(Route(family="tensorrt", knobs={**route.knobs, **knobs}), context, out)


# -- conformance -------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not _AVAILABLE, reason=_WHY or "TensorRT unavailable")
class TestTensorRtConformance(FamilyConformance):
    """The real TensorRT on a real GPU: artifacts are run."""

    family = TensorRtFamily()
    model_builder = staticmethod(build_tiny_mlp)
    non_default = {"precision": "fp16"}


class _FakeTensorRtConformance(FamilyConformance):
    """The contract against FakeTensorRT: plans cannot run (no GPU), so the recorded engine is checked instead."""

    family: ClassVar[TensorRtFamily]

    def check_artifact_outputs(self, artifact: Artifact, route: Route, context: BuildContext) -> None:
        header = plan_header(artifact)
        fake = fake_of(self.family)
        assert header["tensorrt_version"] == fake.__version__ and header["compute_capability"] == [8, 9]
        network = header["network"]
        for side, tensors in (("inputs", context.model.inputs), ("outputs", context.model.outputs)):
            assert [t["name"] for t in network[side]] == [t.name for t in tensors]
            assert [t["dtype"] for t in network[side]] == ["FLOAT"] * len(tensors)  # the model's fp32 I/O kept
        (profile,) = header["profiles"]
        for name, shape in context.shapes.items():
            low, opt, high = (profile[name][s] for s in ("min", "opt", "max"))
            assert low == [1, *shape[1:]] and high == [context.max_batch_size, *shape[1:]], profile[name]
            assert 1 <= opt[0] <= context.max_batch_size and opt[1:] == shape[1:]
        engine = artifact.engine
        assert set(engine) == set(ENGINE_KEYS)
        assert engine["tensorrt_version"] == fake.__version__ and engine["compute_capability"] == "8.9"
        assert engine["profile"] == profile and engine["max_batch_size"] == context.max_batch_size
        # The runtime reads the same plan with the same (fake) TensorRT, without CUDA.
        described = TensorRt(tensorrt=lambda: fake).inspect(Path(artifact.directory) / artifact.files[0])
        assert described["inputs"] == engine["inputs"] and described["outputs"] == engine["outputs"]
        assert described["profiles"] == [profile]


class TestFakeTensorRt10Conformance(_FakeTensorRtConformance):
    family = fake_family("10.13")
    non_default = {"precision": "fp16", "builder_optimization_level": 5, "tiling_optimization_level": "fast",
                   "max_aux_streams": 2, "tactic_sources": "no_jit_convolutions"}


class TestFakeTensorRt11Conformance(_FakeTensorRtConformance):
    family = fake_family("11.1")
    non_default = {"precision": "fp16", "conv_use_long_w": "off", "kgen:codegen:cuda_tile": "2"}


# -- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp(tiny_model_path: Path) -> ModelInfo:
    return inspect_model(tiny_model_path)


def context_for(model: ModelInfo, tmp_path: Path, max_batch: int = 8, opt: int | None = None) -> BuildContext:
    return BuildContext(model=model, shapes=resolve_shapes(model, {}), max_batch_size=max_batch, opt_batch_size=opt,
                        cache_dir=str(tmp_path / "artifacts"))


# -- 1: the engine takes the serving route's batch ----------------------------------------------------------
@pytest.mark.parametrize("version", ["10.13", "11.1"])
def test_profile_runs_from_one_to_the_serving_max_batch(version: str, mlp: ModelInfo, tmp_path: Path) -> None:
    family = fake_family(version)
    artifact = build(family, context_for(mlp, tmp_path, max_batch=16, opt=4), tmp_path / "a")
    assert plan_header(artifact)["profiles"] == [{"x": {"min": [1, 16], "opt": [4, 16], "max": [16, 16]}}]
    assert artifact.engine["max_batch_size"] == 16 and artifact.engine["opt_batch_size"] == 4
    unbatched = build(family, context_for(mlp, tmp_path, max_batch=0), tmp_path / "b")
    assert plan_header(unbatched)["profiles"] == [{"x": {"min": [1, 16], "opt": [1, 16], "max": [1, 16]}}]
    with pytest.raises(ValueError, match="max_batch_size is 4"):
        too_big = BuildContext(model=mlp, shapes={"x": [8, 16]}, max_batch_size=4)
        build(family, too_big, tmp_path / "c")


# -- 2: precision where each release has it ----------------------------------------------------------------
def test_fp16_on_10x_is_a_builder_flag(mlp: ModelInfo, tmp_path: Path) -> None:
    family = fake_family("10.13")
    header = plan_header(build(family, context_for(mlp, tmp_path), tmp_path / "a", precision="fp16"))
    assert "FP16" in header["config"]["flags"] and not header["network"]["strongly_typed"]
    assert "BF16" in plan_header(build(family, context_for(mlp, tmp_path), tmp_path / "b", precision="bf16"))["config"]["flags"]
    assert "TF32" not in plan_header(build(family, context_for(mlp, tmp_path), tmp_path / "c", precision="fp32"))["config"]["flags"]


@pytest.mark.parametrize("version", ["11.0", "11.1"])
def test_fp16_on_11x_comes_from_the_network_types(version: str, conv_attention_path: Path, tmp_path: Path) -> None:
    family = fake_family(version)
    trt = fake_of(family)
    model = inspect_model(conv_attention_path)
    artifact = build(family, context_for(model, tmp_path), tmp_path / "a", precision="fp16")
    header = plan_header(artifact)
    network = header["network"]
    assert network["strongly_typed"] and network["creation_flags"] & (1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    assert any(layer["op"] == "Cast" for layer in network["layers"]), "the network was not converted to fp16"
    assert [t["dtype"] for t in network["inputs"] + network["outputs"]] == ["FLOAT"] * 3  # I/O kept fp32
    assert not (Path(artifact.directory) / "_network").exists() and artifact.files == ["model.plan"]
    assert artifact.engine["precision"] == "fp16" and artifact.engine["strongly_typed"] is True
    assert "bf16" not in next(k for k in family.knobs(model) if k.name == "precision").values


@pytest.mark.parametrize(("version", "mask"), [("10.13", 1 << 3), ("11.1", 1 << 0)])
def test_tactic_sources_use_each_release_numbering(version: str, mask: int, mlp: ModelInfo, tmp_path: Path) -> None:
    family = fake_family(version, tuner=False)
    values = next(k for k in family.knobs(mlp) if k.name == "tactic_sources").values
    assert "no_cublas" not in values  # CUBLAS is off by default on 10.x and gone on 11.x
    config = plan_header(build(family, context_for(mlp, tmp_path), tmp_path / "a",
                               tactic_sources="no_jit_convolutions"))["config"]
    assert config["tactic_sources"] == ["EDGE_MASK_CONVOLUTIONS"] and config["tactic_sources_mask"] == mask


# -- 3: the 11.1 tuner --------------------------------------------------------------------------------------
def test_tuner_knobs_parse_the_real_all_build_routes() -> None:
    trt = fake_tensorrt.module("11.1")
    text = trt.Builder(trt.Logger()).create_builder_config().all_build_routes
    options = tuner_options(text)
    assert [(o.name, o.option, o.values, o.default) for o in options] == [
        ("conv_use_long_w", "-conv_use_long_w", ("on", "off"), "on"),
        ("kgen:codegen:cuda_tile", "-kgen:codegen:cuda_tile", ("0", "1", "2", "3"), "1")]
    knobs = {"conv_use_long_w": "off", "kgen:codegen:cuda_tile": "1", "precision": "fp16"}
    assert route_string(knobs, options) == "-conv_use_long_w=off"  # single dash, non-defaults only
    assert route_string({"kgen:codegen:cuda_tile": 2}, options) == "-kgen:codegen:cuda_tile=2"
    assert tuner_options("") == []
    odd = json.dumps({"tuner_options": [{"option": "-free", "allowed_values": "-free=<int>", "default_value": "3"}]})
    assert tuner_options(odd) == []  # not enumerable: stays at the tuner's default


def test_a_refused_build_route_fails_the_build(mlp: ModelInfo, tmp_path: Path) -> None:
    family = fake_family("11.1")
    with pytest.raises(RuntimeError, match=r"refused build route '-conv_use_long_w=maybe'.*reads back ''"):
        build(family, context_for(mlp, tmp_path), tmp_path / "a", conv_use_long_w="maybe")
    artifact = build(family, context_for(mlp, tmp_path), tmp_path / "b", conv_use_long_w="off")
    assert plan_header(artifact)["config"]["build_route"] == "-conv_use_long_w=off"
    assert artifact.engine["build_route"] == "-conv_use_long_w=off"


# -- 4: the timing cache is a shared build input ------------------------------------------------------------
def test_timing_cache_is_shared_per_version_and_gpu(mlp: ModelInfo, tmp_path: Path) -> None:
    family = fake_family("10.13")
    assert "timing_cache" not in {k.name for k in family.knobs(mlp)}
    context = context_for(mlp, tmp_path)
    first = plan_header(build(family, context, tmp_path / "a"))["timing_cache"]
    second = plan_header(build(fake_family("10.13"), context, tmp_path / "b"))["timing_cache"]  # another process
    assert first["misses"] > 0 and (second["hits"], second["misses"]) == (first["misses"], 0)
    path = cache_path(tmp_path / "artifacts", "10.13.3.9", "8.9")
    assert path.name == "trt-10.13.3.9-sm89.cache" and path.is_file()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".part")]
    other = plan_header(build(fake_family("11.1"), context, tmp_path / "c"))["timing_cache"]
    assert other["hits"] == 0  # another TensorRT: its own file
    assert cache_path(tmp_path / "artifacts", "11.1.0.106", "8.9").is_file()


def _config_with_entries(version: str, model: ModelInfo, jit: bool) -> Any:
    """A builder config whose timing cache holds the entries of one build (tactic sources change the keys)."""
    trt = fake_tensorrt.module(version)
    builder = trt.Builder(trt.Logger(trt.Logger.INTERNAL_ERROR))
    network = builder.create_network(0)
    trt.OnnxParser(network, builder.logger).parse_from_file(model.path)
    config = builder.create_builder_config()
    if not jit:
        config.set_tactic_sources(1 << int(trt.TacticSource.EDGE_MASK_CONVOLUTIONS))
    config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    profile = builder.create_optimization_profile()
    profile.set_shape("x", [1, 16], [1, 16], [8, 16])
    config.add_optimization_profile(profile)
    assert builder.build_serialized_network(network, config) is not None
    return config


def test_saving_merges_with_what_another_build_wrote(mlp: ModelInfo, tmp_path: Path) -> None:
    path = tmp_path / "cache" / "trt.cache"
    early, late = _config_with_entries("10.13", mlp, jit=True), _config_with_entries("10.13", mlp, jit=False)
    save(late, path)  # a concurrent build finished first
    save(early, path)  # a plain write would drop late's entries
    entries = json.loads(path.read_bytes()[len(CACHE_MAGIC):])["entries"]
    assert len(entries) == 2 * len(onnx.load(mlp.path).graph.node)


def test_saving_waits_for_the_lock(mlp: ModelInfo, tmp_path: Path) -> None:
    path = tmp_path / "cache" / "trt.cache"
    path.parent.mkdir()
    config = _config_with_entries("10.13", mlp, jit=True)
    with open(path.with_name(path.name + ".lock"), "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        writer = threading.Thread(target=save, args=(config, path))
        writer.start()
        writer.join(timeout=0.5)
        assert writer.is_alive() and not path.exists(), "the cache was written while another build held the lock"
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    writer.join()
    assert path.is_file()


# -- 5 and 6: knobs follow the TensorRT present, and are known without it ----------------------------------
def test_knobs_follow_the_installed_version(mlp: ModelInfo) -> None:
    names = {v: [k.name for k in fake_family(v).knobs(mlp)] for v in ("10.5", "10.8", "11.0", "11.1")}
    assert names["10.5"] == ["precision", "builder_optimization_level", "max_aux_streams", "tactic_sources",
                             "fp32_groups"]
    assert names["10.8"] == ["precision", "builder_optimization_level", "tiling_optimization_level",
                             "max_aux_streams", "tactic_sources", "fp32_groups"]
    assert names["11.0"] == names["10.8"]
    assert names["11.1"] == ["precision", "fp32_groups", "conv_use_long_w", "kgen:codegen:cuda_tile"]
    assert [k.name for k in fake_family("11.1", tuner=False).knobs(mlp)] == names["11.0"]
    precision = {v: next(k for k in fake_family(v).knobs(mlp) if k.name == "precision").values for v in ("10.13", "11.0")}
    assert "bf16" in precision["10.13"] and "bf16" not in precision["11.0"]


def test_without_tensorrt_knobs_are_described_per_version(mlp: ModelInfo) -> None:
    def missing() -> Any:
        raise ModuleNotFoundError("No module named 'tensorrt'")

    family = TensorRtFamily(tensorrt=missing, gpu=lambda: FAKE_GPU)
    available, why = family.availability()
    assert not available and "pip install" in why
    assert family.knobs(mlp) == classic_knobs((10, 8))
    lines = family.knobs_by_version(mlp)
    assert lines == catalog() and len(lines) == 4
    assert any("all_build_routes" in label for label in lines)
    old = TensorRtFamily(tensorrt=lambda: types.SimpleNamespace(__version__="8.6.1.6"), gpu=lambda: FAKE_GPU)
    assert old.availability() == (False, "TensorRT 8.6.1.6 is too old: gpt-triton builds with TensorRT 10 or later "
                                         "(pip install 'tensorrt>=10')")
    no_gpu = TensorRtFamily(tensorrt=lambda: fake_tensorrt.module("10.13"), gpu=lambda: None)
    assert no_gpu.availability()[1].startswith("no NVIDIA GPU")


def test_unavailable_without_gpu_says_why() -> None:
    available, why = TensorRtFamily().availability()
    if available:
        pytest.skip("TensorRT and a GPU are present")
    assert "tensorrt" in why.lower() or "gpu" in why.lower()


def test_a_route_for_another_release_is_refused_by_name(mlp: ModelInfo, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"offers no knob\(s\) \['timing_cache'\]"):
        build(fake_family("10.13"), context_for(mlp, tmp_path), tmp_path / "a", timing_cache=True)
    with pytest.raises(ValueError, match="tiling_optimization_level"):
        build(fake_family("11.1"), context_for(mlp, tmp_path), tmp_path / "b", tiling_optimization_level="fast")


# -- 9: the engine record --------------------------------------------------------------------------------------
def test_engine_record_says_what_the_plan_needs(mlp: ModelInfo, tmp_path: Path) -> None:
    artifact = build(fake_family("10.13"), context_for(mlp, tmp_path, max_batch=16, opt=16), tmp_path / "a")
    engine = artifact.engine
    assert set(engine) == set(ENGINE_KEYS)
    assert engine["tensorrt_version"] == "10.13.3.9" and engine["compute_capability"] == "8.9"
    assert engine["gpu_name"] == FAKE_GPU.name and engine["strongly_typed"] is False
    assert engine["inputs"] == {"x": {"dtype": "float32", "shape": [-1, 16]}}
    assert engine["outputs"] == {"y": {"dtype": "float32", "shape": [-1, 4]}}
    assert engine["profile"] == {"x": {"min": [1, 16], "opt": [16, 16], "max": [16, 16]}}
    assert Path(engine["timing_cache"]) == cache_path(tmp_path / "artifacts", "10.13.3.9", "8.9")
    assert Artifact.model_validate_json(artifact.model_dump_json()).engine == engine  # survives report.json
