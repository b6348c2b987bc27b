"""Rendering: the k8s/ manifests are current, valid for two Kubernetes versions, and carry the Job's contract."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpt_triton.cli import main
from gpt_triton.core.errors import EXIT_BAD_INPUT, EXIT_NO_WINNER, EXIT_TRANSIENT, GptTritonError
from gpt_triton.k8s.examples import example_files
from gpt_triton.k8s.render import TuneJobParams, dns_name, render_job, render_rbac
from gpt_triton.server import SUMMARY_METRICS_ARGS

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "k8s"
# The tuning range bundled by kubernetes-validate: native sidecars are beta (on by default) from 1.29, GA in 1.33.
VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]


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
    # The exit codes of gpt_triton.core.errors: 1 (no winner) and 2 (bad input) fail at once, 3 (transient)
    # is retried against the backoff limit, a node disruption is retried without counting.
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailJob", "onExitCodes": {"containerName": "tuner", "operator": "In",
                                                             "values": [EXIT_NO_WINNER, EXIT_BAD_INPUT]}}
    assert rules[1] == {"action": "Count", "onExitCodes": {"containerName": "tuner", "operator": "In",
                                                           "values": [EXIT_TRANSIENT]}}
    assert rules[2]["action"] == "Ignore" and rules[2]["onPodConditions"][0]["type"] == "DisruptionTarget"
    # The repository of this namespace and GPU product; the tuner (untrusted ONNX) gets no API token.
    assert tuner["args"][tuner["args"].index("--repository") + 1] == "/data/repository/gpt-triton/NVIDIA-A100-SXM4-80GB"
    assert pod["serviceAccountName"] == "gpt-triton-tuner" and pod["automountServiceAccountToken"] is False
    assert {"name": "GPT_TRITON_GPU_PRODUCT", "value": "NVIDIA-A100-SXM4-80GB"} in tuner["env"]
    # Triton as it serves: latency summaries (as the embedded server asks for them), Guaranteed QoS.
    assert set(SUMMARY_METRICS_ARGS) <= set(sidecar["args"])
    assert sidecar["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
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
    operator, tuner, serving, role, binding = render_rbac("ns1")
    assert [a["metadata"]["name"] for a in (operator, tuner, serving)] == [
        "gpt-triton-operator", "gpt-triton-tuner", "gpt-triton-serving"]
    # Only the operator talks to the API server.
    assert [a["automountServiceAccountToken"] for a in (operator, tuner, serving)] == [True, False, False]
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding"
    reads = [r for r in role["rules"] if "resourceNames" not in r]
    verbs = {r["resources"][0]: set(r["verbs"]) for r in reads}
    assert verbs["deployments"] == {"get", "list", "watch"}  # read only: scaling goes through the subresource
    scale, pin = (r for r in role["rules"] if "resourceNames" in r)
    # The one pod-template write: a promoted canary re-pins the stable Deployment, and only that one.
    assert pin == {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["gpt-triton-stable"],
                   "verbs": ["patch"]}
    assert scale["resourceNames"] == ["gpt-triton-stable", "gpt-triton-canary"]
    verbs["deployments/scale"] = set(scale["verbs"])
    assert verbs["deployments/scale"] == {"get", "patch", "update"}
    assert verbs["jobs"] == {"create", "get", "list", "watch"}
    assert verbs["leases"] == {"create", "get", "update"}
    assert all("delete" not in v and "*" not in v for v in verbs.values())
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "gpt-triton-operator", "namespace": "ns1"}
    gitops_role = render_rbac("ns1", canary_promotes=False)[3]
    assert not any(r["resources"] == ["deployments"] and "patch" in r["verbs"] for r in gitops_role["rules"])
    with_lease = render_rbac("ns1", lease_for_tuner=True)
    assert with_lease[1]["automountServiceAccountToken"] is True
    lease_role = with_lease[-2]
    assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                    "verbs": ["create", "get", "update"]}]
    validate_all(with_lease)


def test_lease_lock_and_mig() -> None:
    job = render_job(TuneJobParams(models=("m",), gpu_product="NVIDIA-A100-SXM4-40GB", promotion_lock="lease",
                                   gpu_resource="nvidia.com/mig-3g.20gb", triton_extra_args=("--log-verbose=1",)))
    pod = _pod(job)
    assert pod["automountServiceAccountToken"] is True
    assert {"name": "GPT_TRITON_PROMOTION_LOCK", "value": "lease"} in pod["containers"][0]["env"]
    assert pod["initContainers"][0]["resources"]["limits"]["nvidia.com/mig-3g.20gb"] == "1"
    assert pod["initContainers"][0]["args"][-1] == "--log-verbose=1"
    assert "--log-bundle" not in pod["containers"][0]["args"]
    logged = _pod(render_job(TuneJobParams(models=("m",), log_bundle=True)))
    assert "--log-bundle" in logged["containers"][0]["args"]
    validate_all([job])
    with pytest.raises(GptTritonError, match="use file or lease"):
        TuneJobParams(models=("m",), promotion_lock="etcd")


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
