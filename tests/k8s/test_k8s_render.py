"""Rendering: the k8s/ manifests are current, valid for two Kubernetes versions, and carry the Job's contract."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpt_triton.cli import main
from gpt_triton.core.errors import GptTritonError
from gpt_triton.k8s.render import TuneJobParams, dns_name, example_files, render_job, render_rbac

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "k8s"
# Two recent versions bundled by kubernetes-validate (1.34 .. 1.37); native sidecars are GA from 1.33.
VERSIONS = ["1.34.0", "1.37.0"]


def _objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def validate_all(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        for version in VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_k8s_dir_is_current() -> None:
    """k8s/ is generated from render.py; a stale file means someone edited one and not the other."""
    for name, text in example_files().items():
        assert (K8S_DIR / name).read_text() == text, f"k8s/{name} is stale: run `gpt-triton k8s examples k8s/`"


@pytest.mark.parametrize("path", sorted(K8S_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_k8s_files_validate(path: Path) -> None:
    objects = _objects(path.read_text())
    assert objects
    validate_all(objects)


def test_validation_is_strict() -> None:
    """The check above can fail: a misspelt field is rejected."""
    job = render_job(TuneJobParams(models=("m",)))
    job["spec"]["template"]["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, VERSIONS[0], strict=True)


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["template"]["spec"])


def test_single_job_contract() -> None:
    job = render_job(TuneJobParams(models=("resnet50",), gpu_product="NVIDIA-A100-SXM4-80GB"))
    pod = _pod(job)
    sidecar, = pod["initContainers"]
    tuner, = pod["containers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert "--model-control-mode=explicit" in sidecar["args"]
    assert sidecar["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8000}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert sidecar["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # Staging repository shared through an emptyDir; production repository on the PVC.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["staging"] and volumes["data"]["persistentVolumeClaim"]["claimName"]
    assert {"name": "staging", "mountPath": "/staging"} in sidecar["volumeMounts"]
    assert {"name": "staging", "mountPath": "/staging"} in tuner["volumeMounts"]
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailJob", "onExitCodes": {"containerName": "tuner", "operator": "In", "values": [2]}}
    assert rules[1]["action"] == "Ignore" and rules[1]["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert pod["restartPolicy"] == "Never"
    for key in ("activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"):
        assert job["spec"][key] > 0
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert all(c["securityContext"]["readOnlyRootFilesystem"] for c in (sidecar, tuner))
    # The signing key is a reference into a Secret, never a literal.
    key_env, = (e for e in tuner["env"] if e["name"] == "GPT_TRITON_SIGNING_KEY")
    assert "value" not in key_env and key_env["valueFrom"]["secretKeyRef"]["name"]
    assert tuner["args"][:4] == ["k8s", "run", "--model", "resnet50"]


def test_cpu_only_job_has_no_gpu_constraints() -> None:
    pod = _pod(render_job(TuneJobParams(models=("m",))))
    assert "nodeSelector" not in pod
    assert all("nvidia.com/gpu" not in c["resources"]["limits"] for c in pod["containers"] + pod["initContainers"])


def test_indexed_fanout() -> None:
    job = render_job(TuneJobParams(models=("a", "b", "c"), gpu_product="NVIDIA-L4", parallelism=5))
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 3 and spec["parallelism"] == 3
    assert spec["podFailurePolicy"]["rules"][0]["action"] == "FailIndex"  # one bad model spares the others
    assert "backoffLimitPerIndex" in spec and "backoffLimit" not in spec
    assert "--models-file" in spec["template"]["spec"]["containers"][0]["args"]
    validate_all([job])


def test_rbac_is_namespaced_and_least_privilege() -> None:
    sa, role, binding = render_rbac("ns1")
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding"
    verbs = {r["resources"][0]: set(r["verbs"]) for r in role["rules"]}
    assert verbs["deployments"] == {"get", "list", "watch", "patch"}
    assert verbs["jobs"] == {"create", "get", "list", "watch"}
    assert all("delete" not in v and "*" not in v for v in verbs.values())
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "ns1"}


def test_names_are_dns_labels() -> None:
    long = dns_name("tune", "a" * 80, "NVIDIA-A100-SXM4-80GB")
    assert len(long) <= 63 and long == long.lower()
    assert dns_name("tune", "a" * 80, "x") != dns_name("tune", "a" * 80, "y")
    with pytest.raises(GptTritonError):
        dns_name("!!!")


def test_render_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("objective:\n  metric: p50\n")
    out = tmp_path / "job.yaml"
    assert main(["k8s", "render", "--model", "a", "--model", "b", "--spec", str(spec), "--gpu-product", "NVIDIA-L4",
                 "--gpu-product", "NVIDIA-H100-80GB-HBM3", "--image", "reg.example/gpt-triton:9", "--out", str(out),
                 "--tune-arg=--time-budget=2h"]) == 0
    objects = _objects(out.read_text())
    assert [o["kind"] for o in objects] == ["ConfigMap", "Job", "ConfigMap", "Job"]
    assert objects[0]["data"]["models"] == "a\nb\n" and "metric: p50" in objects[0]["data"]["spec.yaml"]
    assert objects[1]["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.example/gpt-triton:9"
    assert objects[1]["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--", "--time-budget=2h"]
    validate_all(objects)
    capsys.readouterr()
    # Without --out the YAML goes to stdout.
    assert main(["k8s", "render", "--model", "a"]) == 0
    assert _objects(capsys.readouterr().out)[1]["kind"] == "Job"


def test_render_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["k8s", "render", "--model", "a", "--model", "a"]) == 2
    assert "listed twice" in capsys.readouterr().err
    assert main(["k8s", "render", "--model", "a", "--signing-secret", "nokey"]) == 2
    assert "NAME:KEY" in capsys.readouterr().err
    assert main(["k8s", "render", "--model", "a", "--deadline", "soon"]) == 2
    assert "bad duration" in capsys.readouterr().err


def test_params_are_not_shared_between_renders() -> None:
    a = render_job(TuneJobParams(models=("m",)))
    b = copy.deepcopy(a)
    a["spec"]["template"]["spec"]["containers"][0]["args"].append("x")
    assert render_job(TuneJobParams(models=("m",))) == b
