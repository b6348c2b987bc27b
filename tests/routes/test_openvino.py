"""OpenVINO family: conformance, explicit f32 default, precision offered by the CPU, static shape, NNCF int8."""

from __future__ import annotations

from pathlib import Path

import openvino as ov

from gpt_triton.routes import BuildContext, OpenVinoFamily, Route
from gpt_triton.testing.conformance.families import FamilyConformance, make_inputs, run_artifact
from gpt_triton.testing.models import build_conv_attention


class TestOpenVinoConformance(FamilyConformance):
    family = OpenVinoFamily()
    model_builder = staticmethod(build_conv_attention)
    non_default = {"static_shape": True, "performance_hint": "THROUGHPUT", "num_streams": 2}

    def test_default_is_explicit_f32_and_offers_what_the_cpu_has(self, context: BuildContext) -> None:
        knobs = {k.name: k for k in self.family.knobs(context.model)}
        precision = knobs["inference_precision"]
        assert precision.default == "f32"
        assert "bf16" in precision.help  # the help says OpenVINO's own default is reduced precision
        caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        assert ("bf16" in precision.values) == ("BF16" in caps)
        options = self.family.runtime_options(self.family.default_route(context.model), context.model)
        assert options == {"device": "CPU", "config": {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}}

    def test_static_shape_fixes_the_ir_inputs(self, context: BuildContext, tmp_path: Path) -> None:
        artifact = self.family.build(Route(family="openvino", knobs={"static_shape": True}), context, tmp_path / "out")
        model = ov.Core().read_model(str(Path(artifact.directory) / "model.xml"))
        for port in model.inputs:
            assert port.get_partial_shape().is_static
            assert list(port.get_shape()) == context.shapes[port.get_any_name()]

    def test_f32_route_keeps_fp32_weights(self, context: BuildContext, tmp_path: Path) -> None:
        """ov.save_model compresses weights to fp16 by default; the f32 route must not."""
        artifact = self.family.build(self.family.default_route(context.model), context, tmp_path / "out")
        model = ov.Core().read_model(str(Path(artifact.directory) / "model.xml"))
        consts = [op for op in model.get_ops() if op.get_type_name() == "Constant"]
        assert consts
        assert not any(op.get_element_type() == ov.Type.f16 for op in consts)

    def test_nncf_int8_route(self, context: BuildContext, tmp_path: Path) -> None:
        artifact = self.family.build(Route(family="openvino", knobs={"quantization": "int8"}), context, tmp_path / "out")
        model = ov.Core().read_model(str(Path(artifact.directory) / "model.xml"))
        assert any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())
        outputs = run_artifact(artifact, make_inputs(context.model, context.shapes))
        assert outputs["logits"].shape[-1] == 10
