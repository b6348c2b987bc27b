"""The log result bundle, the in-pod runner's plumbing, and the replica-ratio canary shifter."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.cli import main
from gpt_triton.core.errors import GptTritonError
from gpt_triton.k8s import bundle
from gpt_triton.k8s.client import KubeClient, load_api_client
from gpt_triton.k8s.shifter import DeploymentReplicaShifter, split_replicas
from gpt_triton.testing.conformance.shifters import TrafficShifterConformance

from .fake_apiserver import FakeKubernetesApiServer

NS = "gpt-triton"


def _run(tmp_path: Path, size: int) -> tuple[Path, Path]:
    run, version = tmp_path / "run", tmp_path / "repo" / "m" / "2"
    run.mkdir(parents=True)
    version.mkdir(parents=True)
    (version / "model.plan").write_bytes(b"\x01" * size)
    (version / "__pycache__").mkdir()  # written by Triton's python backend while serving
    (version / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\x00" * 64)
    (run / "report.json").write_text(json.dumps({"status": "done", "promoted_path": str(version)}))
    return run, version


def test_bundle_round_trip_in_noisy_log(tmp_path: Path) -> None:
    run, version = _run(tmp_path, 5000)
    text = "progress 1\n" + bundle.format_bundle(bundle.make_bundle(run, version)) + "trailing line\n"
    data = bundle.parse_bundle(text)
    assert data is not None
    manifest = bundle.extract_bundle(data, tmp_path / "out")
    assert manifest["artifact"] == "artifact"
    assert (tmp_path / "out" / "artifact" / "model.plan").read_bytes() == b"\x01" * 5000
    assert sorted(p.name for p in (tmp_path / "out" / "artifact").iterdir()) == ["model.plan"]
    assert manifest["artifact_bytes"] == 5000
    assert bundle.parse_bundle("no bundle here\n") is None


def test_bundle_leaves_out_artifact_over_cap(tmp_path: Path) -> None:
    run, version = _run(tmp_path, 4096)
    manifest = bundle.extract_bundle(bundle.make_bundle(run, version, max_bytes=1024), tmp_path / "out")
    assert manifest["artifact"] is None and "4096 bytes exceeds" in manifest["artifact_omitted"]
    assert (tmp_path / "out" / "report.json").is_file() and not (tmp_path / "out" / "artifact").exists()


def test_bundle_checksum_detects_tampering(tmp_path: Path) -> None:
    run, version = _run(tmp_path, 100)
    lines = bundle.format_bundle(bundle.make_bundle(run, version)).splitlines()
    lines[1] = ("A" if lines[1][0] != "A" else "B") + lines[1][1:]
    with pytest.raises(GptTritonError, match="checksum"):
        bundle.parse_bundle("\n".join(lines))


def test_bundle_refuses_paths_outside_destination(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tarfile.TarError):
        bundle.extract_bundle(buf.getvalue(), tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()


# -- the in-pod runner -----------------------------------------------------------------------------

def _fake_tune_capture(monkeypatch: pytest.MonkeyPatch, calls: list[list[str]], rc: int) -> None:
    """Stand-in for the `gpt-triton tune` child: records its argv and writes what tune writes."""

    def call(cmd: list[str]) -> int:
        calls.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        repo = Path(cmd[cmd.index("--repository") + 1])
        version = repo / cmd[cmd.index("--model-name") + 1] / "1"
        version.mkdir(parents=True, exist_ok=True)
        (version / "model.onnx").write_bytes(b"onnx")
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps({"status": "done" if rc == 0 else "failed",
                                                     "promoted_path": str(version) if rc == 0 else None}))
        return rc

    monkeypatch.setattr("gpt_triton.k8s.cli.subprocess.call", call)


def test_run_picks_model_by_completion_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for name in ("a", "b"):
        (inputs / f"{name}.onnx").write_bytes(b"x")
    models = tmp_path / "models"
    models.write_text("a\nb\n")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    monkeypatch.setenv("JOB_NAME", "tune-fan")
    calls: list[list[str]] = []
    _fake_tune_capture(monkeypatch, calls, rc=0)
    argv = ["k8s", "run", "--models-file", str(models), "--inputs", str(inputs), "--runs", str(tmp_path / "runs"),
            "--repository", str(tmp_path / "repo"), "--triton-url", "127.0.0.1:8001", "--", "--max-builds", "3"]
    assert main(argv) == 0
    cmd = calls[0]
    assert cmd[:4] == [sys.executable, "-m", "gpt_triton", "tune"] and cmd[4] == str(inputs / "b.onnx")
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "runs" / "tune-fan" / "1")
    assert cmd[-2:] == ["--max-builds", "3"] and "--resume" not in cmd
    # The result goes to the shared volume; the log gets one pointer line and no base64.
    out = capsys.readouterr().out
    stored = tmp_path / "runs" / "tune-fan" / "1" / "result.tar.gz"
    assert f"==> gpt-triton result {stored} sha256=" in out and bundle.parse_bundle(out) is None
    data = bundle.read_result(stored.parent)
    assert data is not None and len(out) < 2000
    manifest = bundle.extract_bundle(data, tmp_path / "got")
    assert manifest["artifact"] == "artifact" and (tmp_path / "got" / "artifact" / "model.onnx").read_bytes() == b"onnx"
    # A retried pod (after a node disruption) resumes from the run directory.
    assert main(argv) == 0
    assert "--resume" in calls[1]


def test_run_reports_failure_exit_code_and_still_prints_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.onnx").write_bytes(b"x")
    _fake_tune_capture(monkeypatch, [], rc=2)
    assert main(["k8s", "run", "--model", "m", "--inputs", str(tmp_path), "--runs", str(tmp_path / "r"),
                 "--repository", str(tmp_path / "repo"), "--log-bundle"]) == 2
    # With --log-bundle (nobody can read the volume) the log carries the bundle as well.
    data = bundle.parse_bundle(capsys.readouterr().out)
    assert data is not None
    bundle.extract_bundle(data, tmp_path / "got")
    assert json.loads((tmp_path / "got" / "report.json").read_text())["status"] == "failed"


def test_run_input_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--inputs", str(tmp_path), "--runs", str(tmp_path / "r"), "--repository", str(tmp_path / "repo")]
    assert main(["k8s", "run", "--model", "missing", *base]) == 2
    assert "copy missing.onnx into the PVC's inputs/" in capsys.readouterr().err
    models = tmp_path / "models"
    models.write_text("a\n")
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    assert main(["k8s", "run", "--models-file", str(models), *base]) == 2
    assert "JOB_COMPLETION_INDEX is not set" in capsys.readouterr().err
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert main(["k8s", "run", "--models-file", str(models), *base]) == 2
    assert "lists 1 models" in capsys.readouterr().err


# -- the replica shifter ---------------------------------------------------------------------------

@pytest.mark.parametrize("total", [2, 3, 5, 10])
def test_split_replicas_properties(total: int) -> None:
    for step in range(0, 101):
        weight = step / 100
        stable, canary = split_replicas(weight, total)
        assert stable + canary == total
        assert abs(canary / total - weight) <= 1 / total
        if weight > 0:
            assert canary >= 1
        if weight < 1:
            assert stable >= 1
    assert split_replicas(0.0, total) == (total, 0) and split_replicas(1.0, total) == (0, total)


def test_split_replicas_rejects_bad_input() -> None:
    with pytest.raises(GptTritonError, match="outside"):
        split_replicas(1.5, 4)
    with pytest.raises(GptTritonError, match="at least 2 replicas"):
        split_replicas(0.3, 1)


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"replicas": replicas}}


def test_shifter_patches_deployments_up_before_down(fake_api: FakeKubernetesApiServer) -> None:
    fake_api.put("deployments", _deployment("triton-stable", 4))
    fake_api.put("deployments", _deployment("triton-canary", 0))
    kube = KubeClient(load_api_client(fake_api.url), NS)
    shifter = DeploymentReplicaShifter(kube, "triton-stable", "triton-canary")
    shifter.set_weight(0.25)
    assert [(n, b["spec"]["replicas"]) for n, b, _ in fake_api.patches] == [("triton-canary", 1), ("triton-stable", 3)]
    assert shifter.effective_weight == 0.25
    shifter.set_weight(1.0)
    assert [(n, b["spec"]["replicas"]) for n, b, _ in fake_api.patches[2:]] == [("triton-canary", 4), ("triton-stable", 0)]
    shifter.set_weight(0.0)  # rollback: stable scales up first so capacity never dips
    assert [n for n, _, _ in fake_api.patches[4:]] == ["triton-stable", "triton-canary"]
    stable, canary = fake_api.get("deployments", NS, "triton-stable"), fake_api.get("deployments", NS, "triton-canary")
    assert stable is not None and canary is not None
    assert (stable["spec"]["replicas"], canary["spec"]["replicas"]) == (4, 0)
    assert all(ctype == "application/strategic-merge-patch+json" for _, _, ctype in fake_api.patches)
    # Through the scale subresource only (what the operator Role grants), never a PATCH of the Deployment.
    assert len(fake_api.scale_requests) == len(fake_api.patches) == 6
    assert not [path for method, path in fake_api.requests if method == "PATCH" and not path.split("?")[0].endswith("/scale")]


class TestDeploymentReplicaShifterConformance(TrafficShifterConformance):
    """The shared shifter contract against the fake API server: the observed share is the canary's
    share of *ready* replicas, read back from the cluster after set_weight returned."""

    resolution = 0.25  # 4 replicas: steps of 1/4, and any positive weight gets a pod (0.1 -> 0.25)
    observed_tolerance = 0.0  # replicas are counted, not sampled

    @pytest.fixture(autouse=True)
    def _cluster(self, fake_api: FakeKubernetesApiServer) -> None:
        for name, replicas in (("triton-stable", 4), ("triton-canary", 0)):
            deployment = _deployment(name, replicas)
            deployment["status"] = {"replicas": replicas, "readyReplicas": replicas}
            fake_api.put("deployments", deployment)
        self.fake_api = fake_api

    def make(self) -> DeploymentReplicaShifter:
        return DeploymentReplicaShifter(KubeClient(load_api_client(self.fake_api.url), NS), "triton-stable",
                                        "triton-canary", wait_s=5.0, poll_s=0.01)

    def observed_share(self) -> float:
        ready = {}
        for name in ("triton-stable", "triton-canary"):
            deployment = self.fake_api.get("deployments", NS, name)
            assert deployment is not None
            ready[name] = int((deployment.get("status") or {}).get("readyReplicas") or 0)
        return ready["triton-canary"] / (ready["triton-stable"] + ready["triton-canary"])


def test_shifter_waits_until_the_split_is_in_effect(fake_api: FakeKubernetesApiServer) -> None:
    fake_api.put("deployments", _deployment("s", 2))
    fake_api.put("deployments", _deployment("c", 0))
    fake_api.deployments_converge = False  # e.g. no GPU left for the canary pod
    kube = KubeClient(load_api_client(fake_api.url), NS)
    shifter = DeploymentReplicaShifter(kube, "s", "c", wait_s=0.3, poll_s=0.02)
    with pytest.raises(GptTritonError, match="deployment c did not reach 1 ready replicas"):
        shifter.set_weight(0.5)
    # The stable side was never scaled down: capacity is kept when the canary cannot come up.
    assert [n for n, _, _ in fake_api.patches] == ["c"]
    reads = sum(1 for m, path in fake_api.requests if m == "GET" and path.endswith("/deployments/c"))
    assert reads >= 3  # polled until the deadline


def test_shifter_errors(fake_api: FakeKubernetesApiServer) -> None:
    kube = KubeClient(load_api_client(fake_api.url), NS)
    with pytest.raises(GptTritonError, match="install the chart"):
        DeploymentReplicaShifter(kube, "nope", "nope-canary").set_weight(0.1)
    fake_api.put("deployments", _deployment("s", 2))
    fake_api.put("deployments", _deployment("c", 0))
    fake_api.fail("PATCH", "scale", 403, message="cannot patch deployments/scale")
    with pytest.raises(GptTritonError, match="forbidden while scaling deployment"):
        DeploymentReplicaShifter(kube, "s", "c").set_weight(0.5)
