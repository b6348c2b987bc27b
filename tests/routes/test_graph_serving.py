"""Graph-rewrite and serving families: conformance, and what each build does to the files."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from gpt_triton.core.model_info import inspect_model, sha256_file
from gpt_triton.routes import BuildContext, GraphFamily, Route, ServingFamily
from gpt_triton.routes._graph import simplifiers
from gpt_triton.testing.conformance.families import FamilyConformance
from gpt_triton.testing.models import build_conv_attention, build_tiny_mlp


class TestGraphConformance(FamilyConformance):
    family = GraphFamily()
    model_builder = staticmethod(build_conv_attention)
    non_default = {"simplify": "onnxslim", "constant_folding": True, "shape_inference": True}

    def test_default_route_is_the_identity(self, context: BuildContext, tmp_path: Path) -> None:
        artifact = self.family.build(self.family.default_route(context.model), context, tmp_path / "out")
        assert artifact.sha256 == sha256_file(context.model.path)

    @pytest.mark.parametrize("knobs", [{"simplify": "onnxslim"}, {"simplify": "onnxsim"}, {"constant_folding": True}, {"shape_inference": True}])
    def test_each_rewrite_changes_the_graph(self, context: BuildContext, tmp_path: Path, knobs: dict[str, object]) -> None:
        why = simplifiers().get(str(knobs.get("simplify", "none")), "")
        if why:
            pytest.skip(why)
        artifact = self.family.build(Route(family="graph", knobs=knobs), context, tmp_path / "out")
        rewritten = onnx.load(str(Path(artifact.directory) / "model.onnx"))
        original = onnx.load(context.model.path)
        onnx.checker.check_model(rewritten)
        assert artifact.sha256 != sha256_file(context.model.path)
        if knobs.get("shape_inference"):
            assert len(rewritten.graph.value_info) > len(original.graph.value_info)
        else:
            assert len(rewritten.graph.node) < len(original.graph.node)
        assert [o.name for o in rewritten.graph.output] == [o.name for o in original.graph.output]


class TestServingConformance(FamilyConformance):
    family = ServingFamily()
    model_builder = staticmethod(build_tiny_mlp)
    non_default = {"instance_count": 2, "dynamic_batching": True, "max_queue_delay_us": 100}

    def test_build_writes_nothing_and_returns_the_source(self, context: BuildContext, tmp_path: Path) -> None:
        out = tmp_path / "out"
        artifact = self.family.build(Route(family="serving", knobs=self.non_default), context, out)
        assert not out.exists()
        assert Path(artifact.directory) / artifact.files[0] == Path(context.model.path)
        assert artifact.sha256 == sha256_file(context.model.path)

    def test_every_serving_route_is_a_valid_triton_config(self, context: BuildContext) -> None:
        """The deploy stage rejects preferred batch sizes above max_batch_size; no planned route may do that."""
        from gpt_triton.search import knob_space

        space = knob_space(self.family, context.model, None)
        for knobs in space.enumerate():
            limit = ServingFamily.resolved_max_batch_size(Route(family="serving", knobs=knobs), context.model)
            assert all(0 < b <= limit for b in knobs["preferred_batch_sizes"]), knobs
            assert not knobs["dynamic_batching"] or limit > 0

    def test_batching_knobs_only_for_batch_dynamic_models(self, tmp_path: Path) -> None:
        path = build_tiny_mlp(tmp_path / "m.onnx")
        model = onnx.load(str(path))
        for value in list(model.graph.input) + list(model.graph.output):
            value.type.tensor_type.shape.dim[0].dim_value = 1  # a fixed batch axis
        onnx.save(model, str(path))
        info = inspect_model(path)
        assert not info.batch_dynamic
        knobs = {k.name: k for k in self.family.knobs(info)}
        assert knobs["dynamic_batching"].values == [False]
        assert knobs["max_batch_size"].values == [None]
        assert ServingFamily.resolved_max_batch_size(Route(family="serving", knobs={}), info) == 0


def test_gpu_serving_knobs_exist_only_with_a_gpu(tmp_path: Path) -> None:
    """A CPU machine plans the same serving routes as before; a GPU adds CUDA graphs and, with more than one
    GPU, the device an instance group is placed on."""
    from gpt_triton.routes._serving import gpu_count, gpu_knobs

    info = inspect_model(build_tiny_mlp(tmp_path / "m.onnx"))
    names = [k.name for k in ServingFamily().knobs(info)]
    base = ["instance_count", "dynamic_batching", "max_queue_delay_us", "preferred_batch_sizes", "max_batch_size"]
    assert names == base + ([k.name for k in gpu_knobs(gpu_count())])
    assert gpu_knobs(0) == []
    one = {k.name: k for k in gpu_knobs(1)}
    assert one["cuda_graphs"].values == [False, True] and one["cuda_graphs"].default is False
    assert one["gpus"].values == [None] and one["gpus"].default is None
    assert {k.name: k for k in gpu_knobs(2)}["gpus"].values == [None, [0], [1]]
