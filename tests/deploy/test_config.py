"""config.pbtxt rendering and version files (no server): parse the text back and check the fields."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton import runtimes
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, TensorInfo, inspect_model, resolve_shapes
from gpt_triton.core.routes import Artifact, Route, Runtime
from gpt_triton.deploy import (
    RUNTIME_FILE,
    choose_backend,
    default_max_batch_size,
    model_config,
    parse_config,
    write_model,
)

ALL_NATIVE = frozenset({"onnxruntime", "openvino", "tensorrt"})


def _artifact(runtime: Runtime, options: dict[str, Any] | None = None, directory: str = "/nowhere",
              files: list[str] | None = None) -> Artifact:
    entry = {"onnxruntime": "model.onnx", "openvino": "model.xml", "tensorrt": "model.plan"}[runtime]
    return Artifact(family=runtime, runtime=runtime, route=Route(family=runtime), directory=directory,
                    files=files or [entry], runtime_options=options or {})


def _render(info: ModelInfo, artifact: Artifact, backend: str, **knobs: Any) -> mc.ModelConfig:
    from gpt_triton.deploy import config_text

    config = model_config("m", info, resolve_shapes(info, {}), artifact, Route(family="serving", knobs=knobs), backend)
    return parse_config(config_text(config))  # what Triton reads, not the in-memory message


@pytest.fixture(scope="module")
def conv_info(conv_attention_path: Path) -> ModelInfo:
    return inspect_model(conv_attention_path)


def _fixed_model() -> ModelInfo:
    return ModelInfo(path="/m.onnx", name="fixed", sha256="", size_bytes=0, opset=17,
                     inputs=[TensorInfo(name="x", dtype="float32", dims=[1, 3, "h", 8])],
                     outputs=[TensorInfo(name="y", dtype="int64", dims=[1, 5])])


def test_default_max_batch_size(conv_info: ModelInfo) -> None:
    assert default_max_batch_size(conv_info) == 8
    assert default_max_batch_size(_fixed_model()) == 0


def test_python_config_drops_the_batch_axis_and_adds_warmup(conv_info: ModelInfo) -> None:
    config = _render(conv_info, _artifact("onnxruntime"), "python")
    assert config.backend == "python" and not config.platform and not config.default_model_filename
    assert config.max_batch_size == 8
    assert [(i.name, list(i.dims), i.data_type) for i in config.input] == [("images", [3, 64, 64], mc.TYPE_FP32)]
    assert {o.name: list(o.dims) for o in config.output} == {"logits": [10], "embedding": [64]}
    assert [(g.kind, g.count) for g in config.instance_group] == [(mc.ModelInstanceGroup.KIND_CPU, 1)]
    assert not config.HasField("dynamic_batching")
    warmup = config.model_warmup[0]
    assert warmup.batch_size == 1 and list(warmup.inputs["images"].dims) == [3, 64, 64]


def test_unbatched_model_keeps_full_dims_with_dynamic_as_minus_one() -> None:
    info = _fixed_model()
    config = model_config("m", info, {"x": [1, 3, 4, 8]}, _artifact("onnxruntime"), Route(family="serving"), "python")
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [1, 3, -1, 8]
    assert config.output[0].data_type == mc.TYPE_INT64
    assert list(config.model_warmup[0].inputs["x"].dims) == [1, 3, 4, 8]


def test_serving_knobs(conv_info: ModelInfo) -> None:
    config = _render(conv_info, _artifact("onnxruntime"), "python", instance_count=3, dynamic_batching=True,
                     max_queue_delay_us=500, preferred_batch_sizes=[2, 4], max_batch_size=4)
    assert config.max_batch_size == 4
    assert config.instance_group[0].count == 3
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]


@pytest.mark.parametrize(("knobs", "message"), [
    ({"dynamic_batching": True, "max_batch_size": 0}, "dynamic_batching with max_batch_size 0"),
    ({"preferred_batch_sizes": [16]}, "preferred_batch_sizes"),
    ({"instance_count": 0}, "instance_count"),
])
def test_bad_serving_knobs_are_user_errors(conv_info: ModelInfo, knobs: dict[str, Any], message: str) -> None:
    with pytest.raises(GptTritonError, match=message):
        _render(conv_info, _artifact("onnxruntime"), "python", **knobs)


def test_batching_a_model_without_batch_axis_is_refused() -> None:
    with pytest.raises(GptTritonError, match="no dynamic batch axis"):
        model_config("m", _fixed_model(), {"x": [1, 3, 4, 8]}, _artifact("onnxruntime"),
                     Route(family="serving", knobs={"max_batch_size": 4}), "python")


def test_native_onnxruntime_parameters(conv_info: ModelInfo) -> None:
    options = {"session_options": {"graph_optimization_level": "ORT_ENABLE_EXTENDED", "intra_op_num_threads": 2,
                                   "inter_op_num_threads": 1, "execution_mode": "ORT_PARALLEL",
                                   "enable_cpu_mem_arena": False, "enable_mem_pattern": True}}
    artifact = _artifact("onnxruntime", options)
    assert choose_backend(artifact, ALL_NATIVE) == "onnxruntime"
    config = _render(conv_info, artifact, "onnxruntime")
    assert config.backend == "onnxruntime" and config.default_model_filename == "model.onnx"
    assert config.optimization.graph.level == 1  # the backend's code for ORT_ENABLE_EXTENDED
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params == {"intra_op_thread_count": "2", "inter_op_thread_count": "1", "execution_mode": "1",
                      "enable_mem_arena": "0", "enable_mem_pattern": "1"}


@pytest.mark.parametrize(("level", "code"), [("ORT_DISABLE_ALL", 2), ("ORT_ENABLE_BASIC", -1), ("ORT_ENABLE_ALL", None)])
def test_native_onnxruntime_graph_levels(conv_info: ModelInfo, level: str, code: int | None) -> None:
    config = _render(conv_info, _artifact("onnxruntime", {"session_options": {"graph_optimization_level": level}}),
                     "onnxruntime")
    assert config.HasField("optimization") == (code is not None)
    if code is not None:
        assert config.optimization.graph.level == code


def test_native_openvino_parameters(conv_info: ModelInfo) -> None:
    artifact = _artifact("openvino", {"device": "CPU", "config": {
        "INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}})
    assert choose_backend(artifact, ALL_NATIVE) == "openvino"
    config = _render(conv_info, artifact, "openvino")
    assert config.backend == "openvino" and config.default_model_filename == "model.xml"
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params == {"HINT_BF16": "YES", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}


def test_tensorrt_plan(conv_info: ModelInfo) -> None:
    artifact = _artifact("tensorrt")
    assert choose_backend(artifact, ALL_NATIVE) == "tensorrt"
    config = _render(conv_info, artifact, "tensorrt")
    assert config.platform == "tensorrt_plan" and not config.backend
    assert config.default_model_filename == "model.plan"
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    with pytest.raises(GptTritonError, match="tensorrt backend"):
        choose_backend(artifact, frozenset())


@pytest.mark.parametrize(("artifact", "why"), [
    (_artifact("onnxruntime"), "no native backend on the server"),
    (_artifact("onnxruntime", {"config_entries": {"session.intra_op.allow_spinning": "0"}}), "spinning"),
    (_artifact("openvino", {"config": {"INFERENCE_PRECISION_HINT": "f32"}}), "f32 hint"),
])
def test_python_adapter_where_native_cannot_be_faithful(artifact: Artifact, why: str) -> None:
    natives = frozenset() if "no native" in why else ALL_NATIVE
    assert choose_backend(artifact, natives) == "python", why


def test_a_native_backend_that_cannot_express_the_options_is_refused(conv_info: ModelInfo) -> None:
    spinning_off = _artifact("onnxruntime", {"config_entries": {"session.intra_op.allow_spinning": "0"}})
    with pytest.raises(GptTritonError, match="onnxruntime backend cannot serve"):
        _render(conv_info, spinning_off, "onnxruntime")
    with pytest.raises(GptTritonError, match="openvino backend cannot serve"):
        _render(conv_info, _artifact("onnxruntime"), "openvino")


def test_spinning_at_its_default_stays_native() -> None:
    artifact = _artifact("onnxruntime", {"config_entries": {"session.intra_op.allow_spinning": "1"}})
    assert choose_backend(artifact, ALL_NATIVE) == "onnxruntime"


def test_write_model_python(tmp_path: Path, conv_attention_path: Path) -> None:
    info = inspect_model(conv_attention_path)
    options = {"session_options": {"intra_op_num_threads": 1}}
    artifact = _artifact("onnxruntime", options, directory=str(conv_attention_path.parent))
    deploy = write_model(tmp_path, "cand", info, resolve_shapes(info, {}), artifact, Route(family="serving"), "python")
    assert deploy.model_name == "cand" and deploy.adapter and deploy.backend == "python"
    assert (tmp_path / "cand" / "config.pbtxt").read_text() == deploy.config_pbtxt
    version = tmp_path / "cand" / "1"
    assert sorted(p.name for p in version.iterdir()) == sorted(
        ["__pycache__", "gpt_triton_runtimes", "model.onnx", "model.py", RUNTIME_FILE])
    # The runtime modules the adapter imports ship with hash-checked bytecode, like model.py, so the
    # stub writes nothing into the (possibly signed) version directory.
    shipped = version / "gpt_triton_runtimes"
    modules = sorted(p.name for p in Path(runtimes.__file__).parent.glob("*.py"))
    assert sorted(p.name for p in shipped.glob("*.py")) == modules and "__init__.py" in modules
    for source in [version / "model.py", *shipped.glob("*.py")]:
        pyc = Path(importlib.util.cache_from_source(str(source)))
        assert pyc.is_file(), pyc
        assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b11, f"{pyc} is not a checked-hash pyc"
    assert (version / "model.onnx").read_bytes() == conv_attention_path.read_bytes()
    import json

    assert json.loads((version / RUNTIME_FILE).read_text()) == {
        "runtime": "onnxruntime", "entry": "model.onnx", "runtime_options": options}
    # Rewriting replaces the model (here as version 2 only) and leaves no staging directory.
    write_model(tmp_path, "cand", info, resolve_shapes(info, {}), artifact, Route(family="serving"), "python", version=2)
    assert sorted(p.name for p in (tmp_path / "cand").iterdir()) == ["2", "config.pbtxt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cand"]


def test_write_model_native_has_no_adapter(tmp_path: Path, conv_attention_path: Path) -> None:
    info = inspect_model(conv_attention_path)
    artifact = _artifact("onnxruntime", directory=str(conv_attention_path.parent))
    deploy = write_model(tmp_path, "native", info, resolve_shapes(info, {}), artifact, Route(family="serving"),
                         "onnxruntime")
    assert not deploy.adapter
    assert [p.name for p in (tmp_path / "native" / "1").iterdir()] == ["model.onnx"]


def test_missing_artifact_file_leaves_nothing_behind(tmp_path: Path, conv_attention_path: Path) -> None:
    info = inspect_model(conv_attention_path)
    artifact = _artifact("openvino", directory=str(tmp_path / "missing"), files=["model.xml", "model.bin"])
    with pytest.raises(GptTritonError, match="artifact file .*model.xml is missing"):
        write_model(tmp_path / "repo", "cand", info, resolve_shapes(info, {}), artifact, Route(family="serving"), "python")
    assert list((tmp_path / "repo").iterdir()) == []


def test_request_batch_must_fit_max_batch_size(conv_info: ModelInfo) -> None:
    artifact = _artifact("onnxruntime")
    shapes = {"images": [16, 3, 64, 64]}
    config = model_config("m", conv_info, shapes, artifact, Route(family="serving"), "python")
    assert config.max_batch_size == 16  # the default grows to the tuned request's batch
    assert config.model_warmup[0].batch_size == 16
    with pytest.raises(GptTritonError, match="max_batch_size=4 but requests carry batch 16"):
        model_config("m", conv_info, shapes, artifact, Route(family="serving", knobs={"max_batch_size": 4}), "python")


# --- what Triton would auto-complete is written explicitly ------------------------------------------------

@pytest.mark.parametrize("backend", ["onnxruntime", "openvino", "tensorrt"])
def test_native_backends_get_the_scheduler_triton_would_add(conv_info: ModelInfo, backend: str) -> None:
    """Triton's native backends add `dynamic_batching {}` to a config with max_batch_size > 1 and no
    scheduler; the written config says so, and the deploy record says how it differs from the route."""
    from gpt_triton.deploy import serving_notes

    artifact = _artifact(backend)  # type: ignore[arg-type]  # each backend serves its own runtime's artifact
    route = Route(family="serving", knobs={"dynamic_batching": False})
    config = _render(conv_info, artifact, backend, dynamic_batching=False)
    assert config.max_batch_size == 8 and config.HasField("dynamic_batching")
    assert config.dynamic_batching == mc.ModelDynamicBatching()  # what the backend adds: every field default
    notes = serving_notes(config, route)
    assert notes == [f"dynamic_batching=false is served with dynamic_batching {{}}: Triton's {backend} backend adds "
                     "the dynamic batcher to every config with max_batch_size 8 > 1 and no scheduler"]
    # Asked for, it is written with its settings and nothing needs saying.
    config = _render(conv_info, artifact, backend, dynamic_batching=True, max_queue_delay_us=100)
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert serving_notes(config, Route(family="serving", knobs={"dynamic_batching": True})) == []
    # max_batch_size 1: no backend adds a batcher, none is written.
    assert not _render(conv_info, artifact, backend, max_batch_size=1).HasField("dynamic_batching")


def test_the_python_adapter_is_served_unbatched_as_asked(conv_info: ModelInfo) -> None:
    config = _render(conv_info, _artifact("onnxruntime"), "python", dynamic_batching=False)
    assert config.max_batch_size == 8 and not config.HasField("dynamic_batching")
    assert _render(conv_info, _artifact("onnxruntime"), "python", dynamic_batching=True).HasField("dynamic_batching")


# --- GPU serving ---------------------------------------------------------------------------------------------

def _ort_gpu(conv_info: ModelInfo, **knobs: Any) -> Artifact:
    from gpt_triton.routes import OnnxRuntimeGpuFamily

    options = OnnxRuntimeGpuFamily().runtime_options(Route(family="onnxruntime_gpu", knobs=knobs), conv_info)
    return _artifact("onnxruntime", options)


def test_onnxruntime_cuda_provider_is_served_on_gpu_instances(conv_info: ModelInfo) -> None:
    artifact = _ort_gpu(conv_info, execution_provider="cuda", cudnn_conv_algo_search="HEURISTIC")
    assert artifact.runtime_options["providers"] == ["CUDAExecutionProvider"]
    assert choose_backend(artifact, ALL_NATIVE) == "onnxruntime"
    config = _render(conv_info, artifact, "onnxruntime", gpus=[1], instance_count=2)
    assert config.backend == "onnxruntime"
    assert [(g.kind, g.count, list(g.gpus)) for g in config.instance_group] == [(mc.ModelInstanceGroup.KIND_GPU, 2, [1])]
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert [(a.name, dict(a.parameters)) for a in accelerators] == [("cuda", {"cudnn_conv_algo_search": "HEURISTIC"})]
    assert not config.optimization.execution_accelerators.cpu_execution_accelerator


@pytest.mark.parametrize(("precision", "mode"), [("fp16", "FP16"), ("fp32", "FP32")])
def test_onnxruntime_tensorrt_provider_becomes_the_tensorrt_accelerator(conv_info: ModelInfo, precision: str,
                                                                        mode: str) -> None:
    artifact = _ort_gpu(conv_info, execution_provider="tensorrt", trt_precision=precision)
    assert artifact.runtime_options["providers"] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    config = _render(conv_info, artifact, "onnxruntime", dynamic_batching=True)
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU and not config.instance_group[0].gpus
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert [(a.name, dict(a.parameters)) for a in accelerators] == [
        ("tensorrt", {"precision_mode": mode, "max_workspace_size_bytes": str(1 << 30)})]
    assert config.optimization.graph.level == 0  # not written: the backend's ORT_ENABLE_ALL


def test_gpu_knobs_the_backend_cannot_apply_make_the_candidate_unservable(conv_info: ModelInfo) -> None:
    from gpt_triton.deploy import UnservableError

    with pytest.raises(UnservableError, match="places instances on GPUs"):
        _render(conv_info, _artifact("onnxruntime"), "python", gpus=[0])
    with pytest.raises(UnservableError, match="CUDA graphs, which only Triton's tensorrt backend runs"):
        _render(conv_info, _ort_gpu(conv_info), "onnxruntime", cuda_graphs=True)
    config = _render(conv_info, _artifact("tensorrt"), "tensorrt", cuda_graphs=True, gpus=[0, 1])
    assert config.optimization.cuda.graphs and list(config.instance_group[0].gpus) == [0, 1]
    assert not _render(conv_info, _artifact("tensorrt"), "tensorrt").HasField("optimization")


def test_servers_without_a_plan_backend(conv_info: ModelInfo) -> None:
    from gpt_triton.deploy import UnservableError, unservable_runtimes

    assert unservable_runtimes(ALL_NATIVE) == {}
    reasons = unservable_runtimes(frozenset())
    assert list(reasons) == ["tensorrt"] and "no tensorrt backend (it has only python)" in reasons["tensorrt"]
    with pytest.raises(UnservableError, match="needs a Triton with the tensorrt backend"):
        choose_backend(_artifact("tensorrt"), frozenset({"onnxruntime"}))
