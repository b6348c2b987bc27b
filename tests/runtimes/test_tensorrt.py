"""TensorRT: conformance with the real TensorRT (skips with the availability reason without TensorRT and a GPU),
conformance against FakeTensorRT 10.13 and 11.1 as far as it goes without CUDA (plans deserialize and declare
their I/O; nothing executes), and what the runtime says where TensorRT, CUDA or the right version is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import onnx
import pytest
from onnx import TensorProto, helper

from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.routes import FAMILIES, BuildContext, Route, TensorRtFamily
from gpt_triton.routes._tensorrt import Gpu
from gpt_triton.runtimes import NativeBackendConfig, RunnerError, RuntimeUnavailableError, TensorRt
from gpt_triton.testing import fake_tensorrt
from gpt_triton.testing.conformance.runtimes import RuntimeConformance

FAKES = {version: fake_tensorrt.module(version) for version in ("10.13", "11.1")}


def no_cuda() -> Any:
    raise ModuleNotFoundError("No module named 'cuda'")


def build_plan(onnx_path: Path, directory: Path, version: str, **knobs: Any) -> Path:
    """A plan built by the production tensorrt family over FakeTensorRT ``version``."""
    family = TensorRtFamily(tensorrt=lambda: FAKES[version], gpu=lambda: Gpu("Fake GPU", "8.9"))
    info = inspect_model(onnx_path)
    context = BuildContext(model=info, shapes=resolve_shapes(info, {}), max_batch_size=8 if info.batch_dynamic else 0)
    route = family.default_route(info)
    artifact = family.build(Route(family="tensorrt", knobs={**route.knobs, **knobs}), context, directory / "trt")
    return Path(artifact.directory) / artifact.files[0]


class TestTensorRtConformance(RuntimeConformance):
    runtime = TensorRt()
    bad_options = [({"precision": "fp16"}, "precision")]
    native_cases = [{}, {"precision": "fp16"}]

    def prepare(self, onnx_path: Path, directory: Path) -> Path:
        info = inspect_model(onnx_path)
        context = BuildContext(model=info, shapes=resolve_shapes(info, {}), max_batch_size=8)
        family = FAMILIES["tensorrt"]
        artifact = family.build(family.default_route(info), context, directory / "trt")
        return Path(artifact.directory) / artifact.files[0]

    def test_native_config_is_the_plan_platform_on_gpu(self) -> None:
        assert self.runtime.native_config({}) == NativeBackendConfig(backend="tensorrt", platform="tensorrt_plan", gpu=True)
        assert not self.runtime.python_backend


class _FakeTensorRtConformance(RuntimeConformance):
    """Without CUDA the runtime is unavailable (the lifecycle tests skip with that reason); plans are built and
    read through the fake: ``inspect_entry`` checks their I/O against the model."""

    version: ClassVar[str]
    bad_options = [({"precision": "fp16"}, "precision")]
    native_cases = [{}, {"precision": "fp16"}]

    def prepare(self, onnx_path: Path, directory: Path) -> Path:
        return build_plan(onnx_path, directory, self.version)

    def offline_availability(self) -> tuple[bool, str]:
        return True, ""

    def inspect_entry(self, entry: Path) -> dict[str, Any] | None:
        return TensorRt(tensorrt=lambda: FAKES[self.version], cudart=no_cuda).inspect(entry)


class TestFakeTensorRt10Conformance(_FakeTensorRtConformance):
    version = "10.13"
    runtime = TensorRt(tensorrt=lambda: FAKES["10.13"], cudart=no_cuda)


class TestFakeTensorRt11Conformance(_FakeTensorRtConformance):
    version = "11.1"
    runtime = TensorRt(tensorrt=lambda: FAKES["11.1"], cudart=no_cuda)


def test_without_tensorrt_open_says_how_to_get_it(tmp_path: Path) -> None:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("tensorrt is installed here")
    available, why = TensorRt().availability()
    assert not available and "tensorrt" in why and "pip install" in why
    with pytest.raises(RuntimeUnavailableError, match="pip install"):
        TensorRt().open(tmp_path / "model.plan", {})


def test_a_plan_from_another_tensorrt_is_refused_with_both_versions(tiny_model_path: Path, tmp_path: Path) -> None:
    plan = build_plan(tiny_model_path, tmp_path, "10.13")
    newer = TensorRt(tensorrt=lambda: FAKES["11.1"], cudart=no_cuda)
    for attempt in (lambda: newer.inspect(plan), lambda: newer.open(plan, {}).activate()):
        with pytest.raises(RunnerError) as caught:
            attempt()
        message = str(caught.value)
        assert "expecting library version 11.1.0.106 got 10.13.3.9" in message, message
        assert "rebuild the candidate with TensorRT 11.1.0.106" in message
    other_gpu = fake_tensorrt.module("10.13", compute_capability=(9, 0))
    with pytest.raises(RunnerError, match="incompatible device"):
        TensorRt(tensorrt=lambda: other_gpu).inspect(plan)


def test_activate_reads_the_plan_then_needs_cuda(tiny_model_path: Path, tmp_path: Path) -> None:
    """Deserialization and the output check need only TensorRT; the CUDA stream is what is missing here."""
    plan = build_plan(tiny_model_path, tmp_path, "11.1")
    runtime = TensorRt(tensorrt=lambda: FAKES["11.1"], cudart=no_cuda)
    assert runtime.availability() == (False, "cuda-python cannot be imported (ModuleNotFoundError: No module named "
                                             "'cuda'); pip install 'gpt-triton[tensorrt]' cuda-python on a machine "
                                             "with an NVIDIA GPU")
    with pytest.raises(RunnerError, match=r"no output named \['nope'\]; the engine's outputs are \['y'\]"):
        runtime.open(plan, {}, output_names=["nope"]).activate()
    runner = runtime.open(plan, {})
    with pytest.raises(RuntimeUnavailableError, match="cuda-python"):
        runner.activate()
    assert not runner.is_active


def test_11x_tensor_types_map_by_name(tmp_path: Path) -> None:
    """fp16 I/O reads as float16; bf16 I/O (no numpy dtype) is refused at activate, by tensor and type."""
    for elem, kind in ((TensorProto.FLOAT16, "float16"), (TensorProto.BFLOAT16, "bfloat16")):
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "typed",
                                  [helper.make_tensor_value_info("x", elem, ["N", 4])],
                                  [helper.make_tensor_value_info("y", elem, ["N", 4])])
        path = tmp_path / f"{kind}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        plan = build_plan(path, tmp_path / kind, "11.1", precision="fp32")
        runtime = TensorRt(tensorrt=lambda: FAKES["11.1"], cudart=no_cuda)
        described = runtime.inspect(plan)
        assert described["inputs"] == {"x": {"dtype": kind, "shape": [-1, 4]}}
        assert described["profiles"] == [{"x": {"min": [1, 4], "opt": [1, 4], "max": [8, 4]}}]
        if kind == "bfloat16":
            with pytest.raises(RunnerError, match=r"\{'x': 'BF16', 'y': 'BF16'\} have TensorRT types numpy cannot hold"):
                runtime.open(plan, {}).activate()
