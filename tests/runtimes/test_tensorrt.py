"""TensorRT: conformance (skips with the availability reason without TensorRT and a GPU), and what
the runtime says and does where TensorRT is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.routes import FAMILIES, BuildContext
from gpt_triton.runtimes import NativeBackendConfig, RuntimeUnavailableError, TensorRt
from gpt_triton.testing.conformance.runtimes import RuntimeConformance


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
