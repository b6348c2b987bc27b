"""The Triton-side check of a TensorRT plan against its config.pbtxt, with plans built by the fake TensorRT.

Every serving route the serving family offers is rendered for a plan built the way the tensorrt family builds
one (profile batch 1..max_batch_size) and must agree with it; each kind of disagreement is named.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from deploy.fake_plans import build_plan, plan_artifact
from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.core.routes import Route
from gpt_triton.deploy import (
    UnservableError,
    check_plan_config,
    config_text,
    describe_plan,
    model_config,
    parse_config,
    serving_notes,
    verify_plan,
    write_model,
)
from gpt_triton.routes import FAMILIES, ServingFamily
from gpt_triton.search import knob_space
from gpt_triton.testing import fake_tensorrt

VERSION = "10.13"


@pytest.fixture(scope="module")
def conv_info(conv_attention_path: Path) -> ModelInfo:
    return inspect_model(conv_attention_path)


@pytest.fixture
def trt() -> Iterator[Any]:
    with fake_tensorrt.installed(VERSION) as module:
        yield module


def _config(info: ModelInfo, directory: Path, serving: Route, shapes: dict[str, list[int]] | None = None) -> mc.ModelConfig:
    config = model_config("m", info, shapes or resolve_shapes(info, {}), plan_artifact(directory), serving, "tensorrt")
    return parse_config(config_text(config))  # what Triton reads


def test_every_serving_route_agrees_with_its_plan(conv_info: ModelInfo, trt: Any, tmp_path: Path) -> None:
    shapes = resolve_shapes(conv_info, {})
    routes = list(knob_space(FAMILIES["serving"], conv_info, None).enumerate())
    assert {r["max_batch_size"] for r in routes} == {None, 4, 16} and {r["instance_count"] for r in routes} == {1, 2}
    assert {r["dynamic_batching"] for r in routes} == {False, True}
    plans: dict[int, Path] = {}
    for knobs in routes:
        route = Route(family="serving", knobs=knobs)
        max_batch = ServingFamily.resolved_max_batch_size(route, conv_info)
        if max_batch not in plans:
            plans[max_batch] = build_plan(trt, conv_info, shapes, max_batch, tmp_path / f"b{max_batch}").parent
        config = _config(conv_info, plans[max_batch], route)
        engine = describe_plan(plans[max_batch] / "model.plan")
        assert engine is not None and engine["tensorrt_version"] == trt.__version__
        recorded = fake_tensorrt.describe_engine((plans[max_batch] / "model.plan").read_bytes())
        assert engine["network"]["inputs"] == recorded["network"]["inputs"] and engine["profiles"] == recorded["profiles"]
        assert check_plan_config(config, engine) == [], knobs
        assert check_plan_config(config, recorded) == [], knobs
        assert config.max_batch_size == max_batch and config.instance_group[0].count == knobs["instance_count"]
        assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
        # Triton's tensorrt backend adds the dynamic batcher to any plan batching past 1: written explicitly.
        assert config.HasField("dynamic_batching")
        assert bool(serving_notes(config, route)) == (not knobs["dynamic_batching"])
        verify_plan(config, plan_artifact(plans[max_batch]))  # raises on disagreement
    assert sorted(plans) == [4, 8, 16]


def test_an_unbatched_plan_and_config_agree(conv_info: ModelInfo, trt: Any, tmp_path: Path) -> None:
    shapes = resolve_shapes(conv_info, {})
    directory = build_plan(trt, conv_info, shapes, 0, tmp_path).parent
    config = _config(conv_info, directory, Route(family="serving", knobs={"max_batch_size": 0}))
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [-1, 3, 64, 64]
    assert not config.HasField("dynamic_batching")
    assert check_plan_config(config, describe_plan(directory / "model.plan") or {}) == []


def _problems(config: mc.ModelConfig, directory: Path) -> str:
    return " | ".join(check_plan_config(config, describe_plan(directory / "model.plan") or {}))


def test_disagreements_are_named(conv_info: ModelInfo, trt: Any, tmp_path: Path) -> None:
    shapes = resolve_shapes(conv_info, {})
    plan8 = build_plan(trt, conv_info, shapes, 8, tmp_path / "b8").parent
    plan16 = build_plan(trt, conv_info, shapes, 16, tmp_path / "b16").parent
    from2 = build_plan(trt, conv_info, shapes, 8, tmp_path / "from2", batch_range=(2, 8)).parent
    default, sixteen = Route(family="serving"), Route(family="serving", knobs={"max_batch_size": 16})

    assert "config max_batch_size 16, the plan's profile 0 takes batch 1..8" in _problems(
        _config(conv_info, plan8, sixteen), plan8)
    assert "config max_batch_size 8, the plan's profile 0 takes batch 1..16" in _problems(
        _config(conv_info, plan16, default), plan16)
    assert "takes batch 2..8" in _problems(_config(conv_info, from2, default), from2)

    config = _config(conv_info, plan8, default)
    config.input[0].data_type = mc.TYPE_FP16
    assert "input images: config data type TYPE_FP16, the plan's FLOAT is TYPE_FP32" in _problems(config, plan8)

    config = _config(conv_info, plan8, default)
    config.output[0].name = "scores"
    assert "config output(s) ['scores'] are not outputs of the plan" in _problems(config, plan8)

    config = _config(conv_info, plan8, default)
    config.input[0].name = "pixels"
    assert "plan input(s) ['images'] are missing from the config" in _problems(config, plan8)

    config = _config(conv_info, plan8, default)
    del config.input[0].dims[-1]
    assert "input images: config dims [3, 64] have rank 2" in _problems(config, plan8)

    config = _config(conv_info, plan8, default)
    config.input[0].dims[1] = 32
    assert "input images: config dims [3, 32, 64] differ from the plan's [3, 64, 64]" in _problems(config, plan8)

    config = _config(conv_info, plan8, default)
    config.instance_group[0].profile.append("1")
    assert "uses optimization profile 1; the plan has 1" in _problems(config, plan8)

    config = _config(conv_info, plan8, default)
    config.model_warmup[0].batch_size = 9
    assert "the tuned request shape [9, 3, 64, 64] is outside the plan's profile 0" in _problems(config, plan8)

    # A plan built for the request shape alone (no batch range) cannot serve a batching config.
    single = build_plan(trt, conv_info, shapes, 0, tmp_path / "single").parent
    assert "takes batch 1..1" in _problems(_config(conv_info, single, default), single)


def test_verify_plan_and_write_model_refuse_a_disagreeing_plan(conv_info: ModelInfo, trt: Any, tmp_path: Path) -> None:
    shapes = resolve_shapes(conv_info, {})
    plan8 = build_plan(trt, conv_info, shapes, 8, tmp_path / "b8").parent
    sixteen = Route(family="serving", knobs={"max_batch_size": 16})
    with pytest.raises(UnservableError, match=r"model.plan and its config disagree: input images: config max_batch_size 16"):
        verify_plan(_config(conv_info, plan8, sixteen), plan_artifact(plan8))
    with pytest.raises(UnservableError, match="disagree"):
        write_model(tmp_path / "repo", "c", conv_info, shapes, plan_artifact(plan8), sixteen, "tensorrt")
    assert list((tmp_path / "repo").iterdir()) == []  # nothing half-written
    info = write_model(tmp_path / "repo", "c", conv_info, shapes, plan_artifact(plan8), Route(family="serving"), "tensorrt")
    assert info.backend == "tensorrt" and not info.adapter and info.notes  # the autocompleted batcher is said
    assert sorted(p.name for p in (tmp_path / "repo" / "c" / "1").iterdir()) == ["model.plan"]


def test_a_plan_from_another_tensorrt_is_refused(conv_info: ModelInfo, tmp_path: Path) -> None:
    shapes = resolve_shapes(conv_info, {})
    directory = build_plan(fake_tensorrt.module("10.8"), conv_info, shapes, 8, tmp_path).parent
    with fake_tensorrt.installed(VERSION), pytest.raises(UnservableError, match="cannot deserialize"):
        verify_plan(_config(conv_info, directory, Route(family="serving")), plan_artifact(directory))


def test_without_tensorrt_there_is_nothing_to_read_the_plan_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt raises ImportError
    assert describe_plan(tmp_path / "model.plan") is None


def test_plans_the_tensorrt_family_builds_agree_with_every_serving_route(conv_info: ModelInfo, tmp_path: Path) -> None:
    """The tensorrt family's own builds (fake TensorRT behind its seam) for each max batch the serving family
    offers; deploy checks the build's record (Artifact.engine) and, read back, the plan itself."""
    from gpt_triton.core.routes import BuildContext
    from gpt_triton.deploy import engine_from_record, plan_engine
    from gpt_triton.routes._tensorrt import Gpu, TensorRtFamily

    fake = fake_tensorrt.module(VERSION)
    family = TensorRtFamily(tensorrt=lambda: fake, gpu=lambda: Gpu("NVIDIA L4", "8.9"))
    shapes = resolve_shapes(conv_info, {})
    built = {}
    for knobs in knob_space(FAMILIES["serving"], conv_info, None).enumerate():
        route = Route(family="serving", knobs=knobs)
        top = ServingFamily.resolved_max_batch_size(route, conv_info)
        if top not in built:
            context = BuildContext(model=conv_info, shapes=shapes, max_batch_size=top, opt_batch_size=1,
                                   cache_dir=str(tmp_path))
            built[top] = family.build(family.default_route(conv_info), context, tmp_path / f"b{top}")
        artifact = built[top]
        config = parse_config(config_text(model_config("m", conv_info, shapes, artifact, route, "tensorrt")))
        assert artifact.engine["max_batch_size"] == config.max_batch_size == top
        assert plan_engine(artifact) == engine_from_record(artifact.engine)
        assert check_plan_config(config, engine_from_record(artifact.engine)) == [], knobs
        with fake_tensorrt.installed(VERSION):
            assert check_plan_config(config, describe_plan(plan_path_of(artifact)) or {}) == [], knobs
        verify_plan(config, artifact)
    config = parse_config(config_text(model_config("m", conv_info, shapes, built[8], Route(
        family="serving", knobs={"max_batch_size": 16}), "tensorrt")))
    with pytest.raises(UnservableError, match="config max_batch_size 16, the plan's profile 0 takes batch 1..8"):
        verify_plan(config, built[8])


def plan_path_of(artifact: Any) -> Path:
    return Path(artifact.directory) / artifact.files[0]
