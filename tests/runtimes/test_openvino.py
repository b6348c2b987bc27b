"""OpenVINO: conformance on an IR, properties applied to the compiled model, output binding by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.routes import FAMILIES, BuildContext
from gpt_triton.runtimes import NativeBackendConfig, OpenVino, RunnerError, open_runner
from gpt_triton.testing.conformance.runtimes import RuntimeConformance, make_feeds, reference_outputs

OPTIONS: dict[str, Any] = {
    "device": "CPU",
    "config": {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"},
}


class TestOpenVinoConformance(RuntimeConformance):
    runtime = OpenVino()
    options = OPTIONS
    bad_options = [
        ({"config": {"NOT_A_PROPERTY": "1"}}, "config.NOT_A_PROPERTY"),
        ({"config": {"NUM_STREAMS": ["1"]}}, "config.NUM_STREAMS"),
        ({"config": ["NUM_STREAMS"]}, "config"),
        ({"device": "NO_SUCH_DEVICE"}, "device"),
        ({"device": 0}, "device"),
    ]
    native_cases = [
        {},
        {"device": "CPU", "config": {"INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": "2"}},
        {"device": "CPU", "config": {"INFERENCE_NUM_THREADS": 2}},
        {"device": "GPU"},
        {"config": {"INFERENCE_PRECISION_HINT": "f16"}},
    ]

    def prepare(self, onnx_path: Path, directory: Path) -> Path:
        import openvino as ov

        # An IR as the openvino family writes it (weights kept f32).
        ov.save_model(ov.convert_model(str(onnx_path)), str(directory / "model.xml"), compress_to_fp16=False)
        return directory / "model.xml"

    def test_properties_reach_the_compiled_model(self, entry: Path) -> None:
        import openvino as ov

        # Not the CPU plugin's defaults (LATENCY, one stream), so a dropped option shows.
        options = {"config": {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": "2"}}
        with self.runtime.open(entry, options) as runner:
            compiled = runner.compiled_model
            assert compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
            assert int(compiled.get_property("NUM_STREAMS")) == 2
            assert str(compiled.get_property("PERFORMANCE_HINT")).endswith("THROUGHPUT")

    def test_a_bad_property_value_fails_at_activate_naming_it(self, entry: Path) -> None:
        runner = self.runtime.open(entry, {"config": {"NUM_STREAMS": "many"}})
        with pytest.raises(RunnerError, match="NUM_STREAMS"):
            runner.activate()
        assert not runner.is_active

    def test_onnx_entry_runs_too(self, model: ModelInfo) -> None:
        self._require_available()
        feeds = make_feeds(model, batch=2)
        with self.runtime.open(Path(model.path), OPTIONS) as runner:
            outputs = runner.infer(feeds)
        np.testing.assert_allclose(outputs["y"], reference_outputs(model, feeds)["y"], rtol=1e-4, atol=1e-5)

    def test_reused_outputs_are_views_the_next_request_overwrites(self, entry: Path, model: ModelInfo) -> None:
        # The adapter's fast path: no copy out of the request; valid until the next infer.
        with self.runtime.open(entry, OPTIONS, reuse_outputs=True) as runner:
            first = runner.infer(make_feeds(model, seed=1))["y"]
            kept = first.copy()
            second = runner.infer(make_feeds(model, seed=2))["y"]
        assert np.shares_memory(first, second)
        assert not np.array_equal(first, kept)

    def test_native_translation_matches_the_backend(self) -> None:
        bf16 = {"device": "CPU", "config": {"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": "1"}}
        assert self.runtime.native_config(bf16) == NativeBackendConfig(
            backend="openvino", parameters={"HINT_BF16": "YES", "NUM_STREAMS": "1"})
        assert self.runtime.native_config(OPTIONS) is None  # an f32 hint: the backend cannot say it
        assert self.runtime.native_config({"device": "GPU"}) is None


def test_aliased_output_binds_by_the_name_asked_for(conv_attention_path: Path) -> None:
    """conv_attention's outputs are Identities: the compiled ports also carry their inputs' names."""
    info = inspect_model(conv_attention_path)
    feeds = make_feeds(info, batch=2)
    expected = reference_outputs(info, feeds)
    with open_runner("openvino", conv_attention_path, OPTIONS, output_names=["embedding", "logits"]) as runner:
        outputs = runner.infer(feeds)
    assert list(outputs) == ["embedding", "logits"]
    for name in outputs:
        np.testing.assert_allclose(outputs[name], expected[name], rtol=1e-3, atol=1e-4, err_msg=name)


def test_family_artifacts_open_with_open_runner(tiny_model_path: Path, tmp_path: Path) -> None:
    info = inspect_model(tiny_model_path)
    context = BuildContext(model=info, shapes=resolve_shapes(info, {}), max_batch_size=8)
    family = FAMILIES["openvino"]
    artifact = family.build(family.default_route(info), context, tmp_path / "ov")
    feeds = make_feeds(info, batch=1)
    with open_runner(artifact.runtime, Path(artifact.directory) / artifact.files[0], artifact.runtime_options) as runner:
        outputs = runner.infer(feeds)
    np.testing.assert_allclose(outputs["y"], reference_outputs(info, feeds)["y"], rtol=1e-4, atol=1e-5)
