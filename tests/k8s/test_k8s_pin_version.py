"""The chart's pin-version init container, run as rendered: a pinned older version is served with ITS OWN
config (not the newest promotion's) and `gpt-triton verify` passes on what the pod would serve.

The script is taken from `helm template` output and run with /bin/sh against a repository that two real,
signed promotions with different serving configs wrote (v1: python-backend adapter, one instance, no
batching; v2: native onnxruntime platform, two instances, dynamic batching); the result is verified by the
CLI and loaded by a real embedded Triton."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.deploy import model_config, write_version_files
from gpt_triton.promote.repository import PROMOTED_CONFIG_FILE, promote
from gpt_triton.server import EmbeddedTriton
from gpt_triton.testing.models import build_tiny_mlp

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpt-triton"
KEY = bytes.fromhex("5a" * 32)
PRODUCT = "NVIDIA-A100-SXM4-80GB"


def _pin_container(helm: str, *sets: str) -> dict[str, Any]:
    proc = subprocess.run([helm, "template", "rel", str(CHART), "--namespace", "ml", "--set", "model.name=mlp",
                           "--set", f"gpu.product={PRODUCT}", *[a for s in sets for a in ("--set", s)]],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    stable, = (o for o in yaml.safe_load_all(proc.stdout)
               if o and o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-stable"))
    pin, = (c for c in stable["spec"]["template"]["spec"]["initContainers"] if c["name"] == "pin-version")
    return dict(pin)


def _run_pin(pin: dict[str, Any], root: Path) -> subprocess.CompletedProcess[str]:
    """The container's command, args and env as rendered; /data and /serving are moved under ``root``."""
    env = {e["name"]: e["value"] for e in pin["env"]}
    assert env["REPOSITORY"] == f"/data/repository/ml/{PRODUCT}" and env["SERVING"] == "/serving"
    env = {**env, "REPOSITORY": f"{root}{env['REPOSITORY']}", "SERVING": f"{root}/serving",
           "PATH": os.environ["PATH"]}
    assert pin["command"] == ["/bin/sh", "-c"]
    return subprocess.run([*pin["command"], *pin["args"]], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def _verify(serving: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPT_TRITON_SIGNING_KEY": KEY.hex()}
    return subprocess.run([sys.executable, "-m", "gpt_triton", "verify", str(serving), "--model", "mlp", "--allow-drift"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def _config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """Two signed promotions of one model with different serving configs, under the chart's layout."""
    source = build_tiny_mlp(tmp_path / "src" / "model.onnx")
    info = inspect_model(source)
    artifact = Artifact(family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"),
                        directory=str(source.parent), files=["model.onnx"], runtime_options={})
    repo = tmp_path / "data" / "repository" / "ml" / PRODUCT
    provenance = {"run_id": "pin", "runtime": "onnxruntime", "model_sha256": info.sha256}
    v1 = model_config("mlp", info, {"x": [1, 16]}, artifact, Route(family="serving"), "python")
    promote(repo, "mlp", v1, lambda d: write_version_files(d, artifact, "python"), provenance, signing_key=KEY)
    batched = Route(family="serving", knobs={"instance_count": 2, "dynamic_batching": True, "max_batch_size": 8})
    v2 = model_config("mlp", info, {"x": [1, 16]}, artifact, batched, "onnxruntime")
    promote(repo, "mlp", v2, lambda d: write_version_files(d, artifact, "onnxruntime"), provenance, signing_key=KEY,
            serving_version=1)
    first, second = _config(repo / "mlp" / "1" / PROMOTED_CONFIG_FILE), _config(repo / "mlp" / "config.pbtxt")
    # The configs really differ: backend, batching and instances.
    assert (first.backend, second.backend) == ("python", "onnxruntime")
    assert second.HasField("dynamic_batching") and not first.HasField("dynamic_batching")
    assert (first.instance_group[0].count, second.instance_group[0].count) == (1, 2)
    return repo


def test_pinned_older_version_is_served_with_its_own_config(helm: str, tmp_path: Path, repository: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _run_pin(_pin_container(helm, "stable.version=1"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "serving mlp version 1 with its own config" in proc.stdout
    served = tmp_path / "serving" / "mlp"
    assert sorted(p.name for p in served.iterdir()) == ["1", "config.pbtxt"]
    config = _config(served / "config.pbtxt")
    own = _config(repository / "mlp" / "1" / PROMOTED_CONFIG_FILE)
    assert list(config.version_policy.specific.versions) == [1]
    config.ClearField("version_policy")
    own.ClearField("version_policy")
    assert config == own  # v1's backend, batching and instances, not the newest promotion's
    result = _verify(tmp_path / "serving")
    assert result.returncode == 0, result.stdout + result.stderr

    # And Triton serves it: the adapter inside checks the config against the signed copy before loading.
    monkeypatch.setenv("GPT_TRITON_SIGNING_KEY", KEY.hex())
    with EmbeddedTriton(tmp_path / "serving", workdir=tmp_path / "server") as server:
        server.load(served)
        assert server.client().is_model_ready("mlp", "1")
        x = grpcclient.InferInput("x", [1, 16], "FP32")
        x.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
        assert server.client().infer("mlp", [x], model_version="1").as_numpy("y") is not None
        server.unload("mlp")


def test_the_old_copy_of_the_newest_config_fails_verify(helm: str, tmp_path: Path, repository: Path) -> None:
    """What the chart did before: the model-level (newest) config beside version 1. verify calls it tampered,
    so the check above can fail."""
    assert _run_pin(_pin_container(helm, "stable.version=1"), tmp_path).returncode == 0
    (tmp_path / "serving" / "mlp" / "config.pbtxt").write_text((repository / "mlp" / "config.pbtxt").read_text())
    result = _verify(tmp_path / "serving")
    assert result.returncode == 2 and "tampered file" in result.stderr


def test_default_version_is_the_newest_with_its_config(helm: str, tmp_path: Path, repository: Path) -> None:
    proc = _run_pin(_pin_container(helm), tmp_path)
    assert proc.returncode == 0, proc.stderr
    served = tmp_path / "serving" / "mlp"
    assert sorted(p.name for p in served.iterdir()) == ["2", "config.pbtxt"]
    config = _config(served / "config.pbtxt")
    assert list(config.version_policy.specific.versions) == [2] and config.backend == "onnxruntime"
    result = _verify(tmp_path / "serving")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("version", "message"), [
    ("7", "version 7 of mlp not found"),
])
def test_missing_version_is_one_line(helm: str, tmp_path: Path, repository: Path, version: str, message: str) -> None:
    proc = _run_pin(_pin_container(helm, f"stable.version={version}"), tmp_path)
    assert proc.returncode == 1 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_empty_repository_says_tune_first(helm: str, tmp_path: Path) -> None:
    proc = _run_pin(_pin_container(helm), tmp_path)
    assert proc.returncode == 1 and "tune and promote first" in proc.stderr
