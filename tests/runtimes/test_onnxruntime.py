"""ONNX Runtime: conformance, options applied to the session, profiling, and the family's artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from gpt_triton.core.model_info import ModelInfo, resolve_shapes
from gpt_triton.routes import FAMILIES, BuildContext, Route
from gpt_triton.runtimes import NativeBackendConfig, OnnxRuntime, open_runner, run_once
from gpt_triton.testing.conformance.runtimes import RuntimeConformance, make_feeds, reference_outputs

OPTIONS: dict[str, Any] = {
    "session_options": {"graph_optimization_level": "ORT_ENABLE_BASIC", "intra_op_num_threads": 1,
                        "inter_op_num_threads": 1, "execution_mode": "ORT_SEQUENTIAL",
                        "enable_cpu_mem_arena": False, "enable_mem_pattern": True},
    "config_entries": {"session.intra_op.allow_spinning": "0"},
}


class TestOnnxRuntimeConformance(RuntimeConformance):
    runtime = OnnxRuntime()
    options = OPTIONS
    bad_options = [
        ({"session_options": {"not_a_field": 1}}, "session_options.not_a_field"),
        ({"session_options": {"intra_op_num_threads": "two"}}, "session_options.intra_op_num_threads"),
        ({"session_options": {"graph_optimization_level": "ORT_FASTEST"}}, "session_options.graph_optimization_level"),
        ({"session_options": {"execution_mode": 7}}, "session_options.execution_mode"),
        ({"session_options": ["intra_op_num_threads"]}, "session_options"),
        ({"config_entries": {"session.intra_op.allow_spinning": False}}, "config_entries.session.intra_op.allow_spinning"),
        ({"providers": ["NoSuchExecutionProvider"]}, "providers"),
        ({"providers": "CPUExecutionProvider"}, "providers"),
        ({"provider_options": {"CUDAExecutionProvider": {"device_id": "0"}}}, "provider_options.CUDAExecutionProvider"),
        ({"provider_options": {"CPUExecutionProvider": ["x"]}}, "provider_options.CPUExecutionProvider"),
        ({"provider_options": {"CPUExecutionProvider": {"x": None}}}, "provider_options.CPUExecutionProvider.x"),
    ]
    native_cases = [
        {},
        {"session_options": {"graph_optimization_level": "ORT_ENABLE_EXTENDED", "execution_mode": "ORT_PARALLEL"}},
        {"session_options": {"graph_optimization_level": 0}},
        {"session_options": {"graph_optimization_level": "ORT_ENABLE_LAYOUT"}},
        {"config_entries": {"session.intra_op.allow_spinning": "1"}},
        {"providers": ["CPUExecutionProvider", "AzureExecutionProvider"]},
        {"session_options": {"log_severity_level": 3}},
    ]

    def test_options_reach_the_session(self, entry: Path) -> None:
        with self.runtime.open(entry, OPTIONS) as runner:
            applied = runner.session.get_session_options()
            assert applied.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            assert applied.intra_op_num_threads == 1 and applied.enable_cpu_mem_arena is False
            assert applied.get_session_config_entry("session.intra_op.allow_spinning") == "0"
            assert runner.session.get_providers() == ["CPUExecutionProvider"]

    def test_enum_options_accept_integer_values(self, entry: Path) -> None:
        options = {"session_options": {"graph_optimization_level": 1, "execution_mode": 0}}
        with self.runtime.open(entry, options) as runner:
            applied = runner.session.get_session_options()
            assert applied.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            assert applied.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL

    def test_profile_dir_gives_a_trace_after_deactivate(self, entry: Path, model: ModelInfo, tmp_path: Path) -> None:
        runner = self.runtime.open(entry, {}, profile_dir=tmp_path)
        with runner:
            for seed in range(3):
                runner.infer(make_feeds(model, seed=seed))
        assert runner.profile_path is not None and runner.profile_path.parent == tmp_path
        events = json.loads(runner.profile_path.read_text())
        assert sum(e.get("name") == "model_run" for e in events) == 3
        with self.runtime.open(entry, {}) as plain:
            plain.infer(make_feeds(model))
        assert plain.profile_path is None

    def test_native_translation_matches_the_backend(self) -> None:
        native = self.runtime.native_config(OPTIONS)
        assert native is None  # spinning off: the native backend cannot say it
        native = self.runtime.native_config({**OPTIONS, "config_entries": {}})
        assert native == NativeBackendConfig(
            backend="onnxruntime", graph_level=-1,
            parameters={"execution_mode": "0", "intra_op_thread_count": "1", "inter_op_thread_count": "1",
                        "enable_mem_arena": "0", "enable_mem_pattern": "1"},
        )
        assert self.runtime.native_config({"session_options": {"graph_optimization_level": 2}}) == NativeBackendConfig(
            backend="onnxruntime", graph_level=1)
        for unfaithful in ({"session_options": {"graph_optimization_level": "ORT_ENABLE_LAYOUT"}},
                           {"session_options": {"log_severity_level": 3}},
                           {"providers": ["CPUExecutionProvider", "AzureExecutionProvider"]},
                           {"unknown": 1}):
            assert self.runtime.native_config(unfaithful) is None, unfaithful


@pytest.mark.parametrize("family", ["onnxruntime", "graph", "serving"])
def test_every_family_artifact_opens_with_open_runner(family: str, tiny_model_path: Path, tmp_path: Path) -> None:
    """What the families conformance does: open_runner(artifact.runtime, files[0], runtime_options)."""
    from gpt_triton.core.model_info import inspect_model

    info = inspect_model(tiny_model_path)
    context = BuildContext(model=info, shapes=resolve_shapes(info, {}), max_batch_size=8)
    builder = FAMILIES[family]
    default = builder.default_route(info)
    knobs = {"graph_optimization_level": "disable", "allow_spinning": False} if family == "onnxruntime" else {}
    for route in (default, Route(family=family, knobs={**default.knobs, **knobs})):
        artifact = builder.build(route, context, tmp_path / family / route.digest())
        feeds = make_feeds(info, batch=2)
        outputs = run_once(artifact.runtime, Path(artifact.directory) / artifact.files[0], artifact.runtime_options, feeds)
        np.testing.assert_allclose(outputs["y"], reference_outputs(info, feeds)["y"], rtol=1e-4, atol=1e-5)
        with open_runner(artifact.runtime, Path(artifact.directory) / artifact.files[0], artifact.runtime_options) as runner:
            assert runner.output_names == ["y"]


def test_provider_options_go_to_the_session_as_strings() -> None:
    from gpt_triton.runtimes._onnxruntime import _providers

    options = {"providers": ["CPUExecutionProvider"], "provider_options": {"CPUExecutionProvider": {"a": True, "b": 2}}}
    assert _providers(ort, options) == [("CPUExecutionProvider", {"a": "1", "b": "2"})]
    assert _providers(ort, {}) == ["CPUExecutionProvider"]


CUDA, TRT, CPU = "CUDAExecutionProvider", "TensorrtExecutionProvider", "CPUExecutionProvider"


@pytest.mark.parametrize(("options", "accelerators"), [
    ({"providers": [CUDA]}, {}),
    ({"providers": [CUDA, CPU]}, {}),
    ({"providers": [CUDA], "provider_options": {CUDA: {"cudnn_conv_algo_search": "HEURISTIC"}}},
     {"cuda": {"cudnn_conv_algo_search": "HEURISTIC"}}),
    ({"providers": [TRT, CUDA], "provider_options": {TRT: {"trt_fp16_enable": "1", "trt_max_workspace_size": "1024",
                                                           "trt_engine_cache_enable": "1"}}},
     {"tensorrt": {"precision_mode": "FP16", "max_workspace_size_bytes": "1024", "trt_engine_cache_enable": "1"}}),
    ({"providers": [TRT, CUDA, CPU], "provider_options": {TRT: {"trt_bf16_enable": "True", "trt_fp16_enable": "0"},
                                                         CUDA: {"use_ep_level_unified_stream": "1"}}},
     {"tensorrt": {"precision_mode": "BF16"}, "cuda": {"use_ep_level_unified_stream": "1"}}),
    ({"providers": [TRT, CUDA]}, {"tensorrt": {"precision_mode": "FP32"}}),
])
def test_gpu_providers_map_to_the_backends_accelerators(options: dict[str, Any], accelerators: dict[str, Any]) -> None:
    native = OnnxRuntime().native_config({**options, "session_options": {"graph_optimization_level": "ORT_ENABLE_BASIC"}})
    assert native == NativeBackendConfig(backend="onnxruntime", graph_level=-1, gpu=True, gpu_accelerators=accelerators)


@pytest.mark.parametrize("options", [
    {"providers": [TRT]},  # the backend always keeps CUDA as TensorRT's fallback
    {"providers": [CUDA, TRT]},
    {"providers": [TRT, CUDA], "provider_options": {TRT: {"trt_fp16_enable": "1", "trt_int8_enable": "1"}}},
    {"providers": [TRT, CUDA], "provider_options": {TRT: {"trt_fp16_enable": "maybe"}}},
    {"providers": [TRT, CUDA], "provider_options": {TRT: {"trt_unknown_option": "1"}}},
    {"providers": [CUDA], "provider_options": {CUDA: {"device_id": "1"}}},  # instance groups place instances
    {"providers": [CUDA, CPU], "provider_options": {CPU: {"x": "1"}}},
    {"providers": [CPU], "provider_options": {CPU: {"x": "1"}}},
    {"providers": [CUDA], "provider_options": {TRT: {"trt_fp16_enable": "1"}}},
])
def test_gpu_providers_the_backend_cannot_say_stay_with_the_adapter(options: dict[str, Any]) -> None:
    assert OnnxRuntime().native_config(options) is None
