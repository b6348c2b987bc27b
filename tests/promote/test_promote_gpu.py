"""Promotion of what was measured (the backend it was served with), a plan's provenance, and `gpt-triton verify`
refusing a TensorRT plan on another TensorRT or GPU. Plans come from the fake TensorRT; the GPU is described,
not present (no GPU runs here)."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy.fake_plans import build_plan, plan_artifact
from tritonclient.grpc import model_config_pb2 as mc

from gpt_triton import environment
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.core.records import Candidate, DeployInfo, Machine, RunReport
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.core.spec import TuneSpec
from gpt_triton.deploy import parse_config
from gpt_triton.promote import verify as verify_module
from gpt_triton.promote.candidate import promote_candidate
from gpt_triton.promote.repository import PROVENANCE_FILE
from gpt_triton.testing import fake_tensorrt
from gpt_triton.testing.models import build_tiny_mlp

from .test_promote_verify_cli import run_verify

T4 = {"name": "Tesla T4", "compute_capability": "7.5", "driver": "550.54"}


@pytest.fixture
def info(tmp_path: Path) -> ModelInfo:
    return inspect_model(build_tiny_mlp(tmp_path / "src" / "model.onnx"))


@pytest.fixture
def gpu_here(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """This machine as a T4 node: what nvidia-smi would report, for provenance and for verify."""
    device = {**environment.device_fingerprint(), "gpus": [dict(T4)]}
    monkeypatch.setattr(environment, "device_fingerprint", lambda: copy.deepcopy(device))
    return device


@pytest.fixture
def trt() -> Iterator[Any]:
    with fake_tensorrt.installed("10.13") as module:  # the builder's (and this node's) TensorRT 10.13.3.9
        yield module


def _report(info: ModelInfo, spec: TuneSpec | None = None) -> RunReport:
    return RunReport(run_id="run-gpu", tool_version="0.1.0", created="2026-12-02T18:00:00Z", model=info,
                     shapes=resolve_shapes(info, {}), spec=spec or TuneSpec(), triton_version="2.51.0",
                     triton_mode="remote", machine=Machine(hostname="h", cpu="cpu", cores=2, memory_bytes=1 << 30))


def _candidate(artifact: Artifact, backend: str | None) -> Candidate:
    deploy = DeployInfo(model_name="c_x", backend=backend, adapter=backend == "python") if backend else None
    return Candidate(id="x", family=artifact.family, route=Route(family=artifact.family), serving=Route(family="serving"),
                     status="measured", artifact=artifact, deploy=deploy)


def _plan_candidate(info: ModelInfo, trt: Any, tmp_path: Path) -> Candidate:
    directory = build_plan(trt, info, resolve_shapes(info, {}), 8, tmp_path / "plan").parent
    return _candidate(plan_artifact(directory), "tensorrt")


def _ort_artifact(info: ModelInfo) -> Artifact:
    return Artifact(family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"),
                    directory=str(Path(info.path).parent), files=["model.onnx"], runtime_options={})


def test_a_measured_plan_is_promoted_with_the_tensorrt_backend(info: ModelInfo, trt: Any, gpu_here: dict[str, Any],
                                                                 tmp_path: Path, key: bytes) -> None:
    """spec.server.native_backends is unset (as by default): the backend is the one the plan was measured with."""
    report = _report(info)
    assert report.spec.server.native_backends is None
    promoted = promote_candidate(tmp_path / "repo", "mlp", report, _plan_candidate(info, trt, tmp_path), 3, key)
    config = parse_config((tmp_path / "repo" / "mlp" / "config.pbtxt").read_text())
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 8
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU and config.HasField("dynamic_batching")
    assert sorted(p.name for p in promoted.path.iterdir() if not p.name.startswith(("provenance", "signatures",
                                                                                        "promoted"))) == ["model.plan"]
    provenance = json.loads((promoted.path / PROVENANCE_FILE).read_text())
    assert provenance["backend"] == "tensorrt" and provenance["runtime"] == "tensorrt"
    assert provenance["tensorrt"] == {"version": "10.13.3.9", "gpu": T4, "serving_image": report.spec.server.image,
                                      "serving_tensorrt": None}
    assert provenance["environment"]["device"]["gpus"] == [T4]


@pytest.mark.parametrize(("backend", "adapter"), [("python", True), ("onnxruntime", False)])
def test_the_measured_backend_is_promoted(info: ModelInfo, tmp_path: Path, backend: str, adapter: bool) -> None:
    promoted = promote_candidate(tmp_path / "repo", "mlp", _report(info), _candidate(_ort_artifact(info), backend), 3, None)
    config = parse_config((tmp_path / "repo" / "mlp" / "config.pbtxt").read_text())
    assert config.backend == backend
    assert (promoted.path / "model.py").exists() == adapter
    assert json.loads((promoted.path / PROVENANCE_FILE).read_text())["backend"] == backend


def test_a_candidate_never_deployed_in_this_run(info: ModelInfo, trt: Any, tmp_path: Path) -> None:
    promoted = promote_candidate(tmp_path / "repo", "mlp", _report(info), _candidate(_ort_artifact(info), None), 3, None)
    assert (promoted.path / "model.py").exists()  # the adapter, as on a server with only python
    plan = _plan_candidate(info, trt, tmp_path).model_copy(update={"deploy": None})
    with pytest.raises(GptTritonError, match="was not deployed in this run"):
        promote_candidate(tmp_path / "repo", "plan", _report(info), plan, 3, None)


# --- gpt-triton verify -----------------------------------------------------------------------------------

@pytest.fixture
def plan_repo(info: ModelInfo, trt: Any, gpu_here: dict[str, Any], tmp_path: Path, key: bytes,
              monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    (tmp_path / "signing.key").write_text(key.hex())
    promote_candidate(tmp_path / "repo", "m", _report(info), _plan_candidate(info, trt, tmp_path), 3, key)
    return tmp_path / "repo"


def _here(monkeypatch: pytest.MonkeyPatch, gpus: list[dict[str, str]]) -> None:
    current = environment.environment_fingerprint()
    current["device"]["gpus"] = gpus
    monkeypatch.setattr(verify_module, "environment_fingerprint", lambda: copy.deepcopy(current))


def _verify(plan_repo: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    return run_verify([str(plan_repo), "--signing-key-file", str(plan_repo.parent / "signing.key"), *extra], capsys)


def test_verify_accepts_a_plan_on_its_own_tensorrt_and_gpu(plan_repo: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _here(monkeypatch, [dict(T4)])
    code, out, err = _verify(plan_repo, capsys)  # this node's TensorRT (the fake 10.13.3.9)
    assert code == 0, err
    assert "valid here" in out
    code, _, err = _verify(plan_repo, capsys, "--tensorrt-version", "10.13.3.9")
    assert code == 0, err
    code, _, err = _verify(plan_repo, capsys, "--serving-image", "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3")
    assert code == 0, err


@pytest.mark.parametrize(("gpus", "flags", "reason"), [
    ([T4], ["--tensorrt-version", "10.11.0.33"],
     "plan built by TensorRT 10.13.3.9, this Triton runs TensorRT 10.11.0.33"),
    ([T4], ["--serving-image", "25.10-trtllm-python-py3"], "this Triton runs TensorRT 10.11.0.33"),
    ([{**T4, "compute_capability": "8.6", "name": "NVIDIA A10"}], [], "compute capability changed 7.5 -> 8.6"),
    ([{**T4, "name": "NVIDIA T4G"}], [], "GPU changed Tesla T4 -> NVIDIA T4G"),
    ([], [], "no NVIDIA GPU here"),
])
@pytest.mark.parametrize("allow_drift", [False, True])
def test_verify_refuses_a_plan_on_another_tensorrt_or_gpu(
    plan_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, gpus: list[dict[str, str]],
    flags: list[str], reason: str, allow_drift: bool,
) -> None:
    _here(monkeypatch, gpus)
    code, out, err = _verify(plan_repo, capsys, *flags, *(["--allow-drift"] if allow_drift else []))
    assert code == 2, (out, err)
    assert "cannot run here" in out
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: 1 version(s) cannot run here; first m/1 (tensorrt): ") and reason in line
    assert line.endswith("(--allow-drift does not cover this)")


def test_a_new_driver_is_refused_even_with_allow_drift(plan_repo: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Serving runs `verify --allow-drift` (CPU engines still run after drift); a plan never gets that pass."""
    _here(monkeypatch, [{**T4, "driver": "560.35"}])
    for flags in ([], ["--allow-drift"]):
        code, out, err = _verify(plan_repo, capsys, *flags)
        assert code == 2 and "GPU driver changed 550.54 -> 560.35" in err, (out, err)
        assert "(--allow-drift does not cover this)" in err


def test_verify_needs_to_know_the_serving_tensorrt(plan_repo: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _here(monkeypatch, [dict(T4)])
    code, _, err = _verify(plan_repo, capsys, "--serving-image", "nvcr.io/nvidia/tritonserver:24.10-py3")
    assert code == 2 and "the TensorRT of nvcr.io/nvidia/tritonserver:24.10-py3 is unknown" in err
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # no TensorRT on this machine either
    code, _, err = _verify(plan_repo, capsys)
    assert code == 2 and "which TensorRT serves here is unknown: pass --serving-image" in err


def test_the_builds_record_of_the_gpu_goes_into_provenance(info: ModelInfo, trt: Any, gpu_here: dict[str, Any],
                                                          tmp_path: Path) -> None:
    from gpt_triton.core.routes import BuildContext
    from gpt_triton.routes._tensorrt import Gpu, TensorRtFamily

    family = TensorRtFamily(tensorrt=lambda: trt, gpu=lambda: Gpu("NVIDIA L4", "8.9"))
    context = BuildContext(model=info, shapes=resolve_shapes(info, {}), max_batch_size=8, cache_dir=str(tmp_path))
    artifact = family.build(family.default_route(info), context, tmp_path / "plan")
    promoted = promote_candidate(tmp_path / "repo", "mlp", _report(info), _candidate(artifact, "tensorrt"), 3, None)
    recorded = json.loads((promoted.path / PROVENANCE_FILE).read_text())["tensorrt"]
    # What built the plan, not what this machine's nvidia-smi says now; the driver is this machine's.
    assert recorded["version"] == "10.13.3.9"
    assert recorded["gpu"] == {"name": "NVIDIA L4", "compute_capability": "8.9", "driver": T4["driver"]}
