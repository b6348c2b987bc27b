"""ONNX Runtime family: conformance, every precision route, runtime-options schema, fp16 Cast repair."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from gpt_triton.core.errors import GptTritonError
from gpt_triton.routes import BuildContext, OnnxRuntimeFamily, OnnxRuntimeGpuFamily, Route
from gpt_triton.routes._onnxruntime import repair_fp16_casts
from gpt_triton.testing.conformance.families import FamilyConformance, make_inputs, run_artifact
from gpt_triton.testing.models import build_conv_attention


class TestOnnxRuntimeConformance(FamilyConformance):
    family = OnnxRuntimeFamily()
    model_builder = staticmethod(build_conv_attention)
    non_default = {"precision": "fp16", "fp16_op_block_list": ["Resize", "Softmax"], "allow_spinning": False}

    def test_runtime_options_schema(self, context: BuildContext) -> None:
        route = Route(family="onnxruntime", knobs={"allow_spinning": False, "graph_optimization_level": "basic", "intra_op_threads": 1})
        options = self.family.runtime_options(route, context.model)
        assert options == {
            "session_options": {
                "graph_optimization_level": "ORT_ENABLE_BASIC", "intra_op_num_threads": 1, "inter_op_num_threads": 0,
                "execution_mode": "ORT_SEQUENTIAL", "enable_cpu_mem_arena": True, "enable_mem_pattern": True,
            },
            "config_entries": {"session.intra_op.allow_spinning": "0"},
        }
        default = self.family.runtime_options(self.family.default_route(context.model), context.model)
        assert default is not None  # ONNX Runtime knows every route's options without building
        assert default["session_options"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
        assert default["config_entries"]["session.intra_op.allow_spinning"] == "1"

    @pytest.mark.parametrize("knobs", [
        {"precision": "int8_dynamic"},
        {"precision": "int8_static", "int8_activation_type": "uint8"},
        {"precision": "int8_static", "int8_activation_type": "int8"},
        {"precision": "fp16"},
        # Several blocked ops: the converter's Cast names collide on unnamed nodes unless we name them.
        {"precision": "fp16", "fp16_op_block_list": ["Resize", "Softmax", "LayerNormalization", "ReduceMean"]},
    ])
    def test_precision_routes_change_files_and_stay_close(self, context: BuildContext, tmp_path: Path, knobs: dict[str, object]) -> None:
        reference = self.family.build(self.family.default_route(context.model), context, tmp_path / "fp32")
        artifact = self.family.build(Route(family="onnxruntime", knobs=knobs), context, tmp_path / "route")
        assert artifact.sha256 != reference.sha256
        feeds = make_inputs(context.model, context.shapes, seed=3)
        want, got = run_artifact(reference, feeds), run_artifact(artifact, feeds)
        # The error is compared with the output's own scale (max |fp32 output|, about 1 here), and the bound
        # follows from the number format over the ~10 rounded layers in sequence (3 convs, q/k/v, attention,
        # projection, 2 MLP linears, logits):
        # * fp16 rounds to 2^-11 = 4.9e-4 relative; a couple of roundings per layer stay below 20 of them, 1e-2
        #   (measured: 1.5e-3 to 1.7e-3). A lost Cast or an fp16 overflow is off by O(1) and fails.
        # * int8 steps are 1/255 of each quantized tensor's range (0.4%); ten of them in sequence, amplified by
        #   the layers after them, stay below 15% (measured: 2.5% dynamic, 3.9% to 6.6% static). Wrong scales,
        #   a bad calibration set or swapped u8/s8 types are off by tens of percent or more and fail.
        bound = 1e-2 if knobs["precision"] == "fp16" else 0.15
        for name, value in want.items():
            scale = float(np.abs(value).max())
            assert scale > 0.1, f"{name}: the fp32 output is near zero, so a relative bound would say nothing"
            error = float(np.abs(got[name] - value).max()) / scale
            assert error < bound, f"{name}: max error {error:.3g} of the output's scale, above {bound} for {knobs}"
        if knobs.get("precision") == "int8_static":
            ops = {n.op_type for n in onnx.load(str(Path(artifact.directory) / "model.onnx")).graph.node}
            assert "QuantizeLinear" in ops
            assert any("int8 static QDQ" in note for note in artifact.notes)

    def test_int8_static_without_calibration_names_the_problem(self, context: BuildContext, tmp_path: Path) -> None:
        bare = context.model_copy(update={"calibration_npz": None})
        with pytest.raises(GptTritonError, match="calibration"):
            self.family.build(Route(family="onnxruntime", knobs={"precision": "int8_static"}), bare, tmp_path / "out")


@pytest.mark.parametrize("mix", ["node_inputs", "graph_output"])
def test_fp16_cast_repair_makes_a_mismatched_model_loadable(mix: str) -> None:
    """The two mismatches fp16 conversion leaves: a node fed fp16 and fp32, and an fp16 producer of a
    graph output declared fp32. ORT refuses both until repaired."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    half = helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16)
    add = helper.make_node("Add", ["x16", "x"] if mix == "node_inputs" else ["x16", "x16"], ["y"])
    model = helper.make_model(helper.make_graph([half, add], "mixed", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="(?i)type"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert repair_fp16_casts(model) == 1
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = session.run(None, {"x": data})[0]
    assert result.dtype == np.float32
    # 0..5 and their doubles are exact in fp16, so a correct repair reproduces 2x exactly; any tolerance
    # would only hide a wrong cast.
    np.testing.assert_array_equal(result, 2 * data)


def test_quantisation_preprocessing_degrades_gracefully(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Symbolic shape inference failing (as on real CNNs) must not fail the int8 route."""
    import onnxruntime.quantization.shape_inference as si

    from gpt_triton.routes._onnxruntime import _preprocess
    from gpt_triton.testing.models import build_tiny_mlp

    real = si.quant_pre_process
    calls: list[bool] = []

    def flaky(src: str, dst: str, skip_symbolic_shape: bool = False, **kw: object) -> None:
        calls.append(skip_symbolic_shape)
        if not skip_symbolic_shape:
            raise RuntimeError("symbolic shape inference failed")
        real(src, dst, skip_symbolic_shape=True)

    monkeypatch.setattr(si, "quant_pre_process", flaky)
    src = build_tiny_mlp(tmp_path / "m.onnx")
    notes = _preprocess(src, tmp_path / "pre.onnx")
    assert calls == [False, True]
    assert notes and "without it" in notes[0]
    onnx.checker.check_model(onnx.load(str(tmp_path / "pre.onnx")))

    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("no shapes at all")

    monkeypatch.setattr(si, "quant_pre_process", broken)
    notes = _preprocess(src, tmp_path / "pre2.onnx")
    assert "skipped" in notes[0] and (tmp_path / "pre2.onnx").read_bytes() == src.read_bytes()


# --- ONNX Runtime on a GPU (served by Triton's onnxruntime backend) --------------------------------------------

_GPU_AVAILABLE, _GPU_WHY = OnnxRuntimeGpuFamily().availability()


@pytest.mark.gpu
@pytest.mark.skipif(not _GPU_AVAILABLE or "CUDAExecutionProvider" not in ort.get_available_providers(),
                    reason=_GPU_WHY or "onnxruntime here has no CUDAExecutionProvider")
class TestOnnxRuntimeGpuConformance(FamilyConformance):
    family = OnnxRuntimeGpuFamily()
    model_builder = staticmethod(build_conv_attention)
    non_default = {"precision": "fp16", "cudnn_conv_algo_search": "HEURISTIC"}


def test_gpu_family_is_unavailable_without_a_gpu_and_says_why() -> None:
    if _GPU_AVAILABLE:
        pytest.skip("an NVIDIA GPU is present")
    assert "no NVIDIA GPU" in _GPU_WHY


def test_gpu_family_runtime_options_name_the_providers(tmp_path: Path) -> None:
    from gpt_triton.core.model_info import inspect_model
    from gpt_triton.runtimes import OnnxRuntime

    info = inspect_model(build_conv_attention(tmp_path / "m.onnx"))
    family = OnnxRuntimeGpuFamily()
    default = family.runtime_options(family.default_route(info), info)
    assert default == {"providers": ["CUDAExecutionProvider"],
                       "provider_options": {"CUDAExecutionProvider": {"cudnn_conv_algo_search": "EXHAUSTIVE"}},
                       "session_options": {"graph_optimization_level": "ORT_ENABLE_ALL"}}
    trt = family.runtime_options(Route(family="onnxruntime_gpu", knobs={"execution_provider": "tensorrt",
                                                                         "trt_precision": "fp16"}), info)
    assert trt["providers"] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    assert trt["provider_options"] == {"TensorrtExecutionProvider": {"trt_fp16_enable": "1",
                                                                     "trt_max_workspace_size": str(1 << 30)}}
    for options in (default, trt):  # every route is served natively, on GPU instances
        native = OnnxRuntime().native_config(options)
        assert native is not None and native.gpu and native.backend == "onnxruntime"
    # Knobs of the other provider do not apply (the search resets them to their defaults).
    assert family.conditional == {"trt_precision": ("execution_provider", ("tensorrt",)),
                                  "cudnn_conv_algo_search": ("execution_provider", ("cuda",))}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_family_builds_without_a_gpu(tmp_path: Path, precision: str) -> None:
    """Building writes only the ONNX file; serving it needs the GPU Triton."""
    from gpt_triton.core.model_info import inspect_model, resolve_shapes

    info = inspect_model(build_conv_attention(tmp_path / "m.onnx"))
    context = BuildContext(model=info, shapes=resolve_shapes(info, {}))
    family = OnnxRuntimeGpuFamily()
    route = Route(family="onnxruntime_gpu", knobs={"precision": precision})
    artifact = family.build(route, context, tmp_path / "out")
    assert artifact.files == ["model.onnx"] and artifact.runtime == "onnxruntime"
    assert artifact.runtime_options == family.runtime_options(route, info)
    model = onnx.load(str(Path(artifact.directory) / "model.onnx"))
    weights = {init.data_type for init in model.graph.initializer}
    assert (TensorProto.FLOAT16 in weights) == (precision == "fp16")
    # fp32 I/O either way, so the config and the requests do not change with the precision.
    assert all(i.type.tensor_type.elem_type == TensorProto.FLOAT for i in model.graph.input)
    # Served through the CPU provider here only to check the file is a valid model.
    options = {**artifact.runtime_options, "providers": ["CPUExecutionProvider"], "provider_options": {}}
    out = run_artifact(artifact.model_copy(update={"runtime_options": options}), make_inputs(info, context.shapes))
    assert set(out) == {"logits", "embedding"}
