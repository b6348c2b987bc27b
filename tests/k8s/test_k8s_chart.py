"""The Helm chart: lint --strict and template with every ci/ values file, schema rejection, Kubernetes
validation of every rendered object, and agreement with the Python-rendered tuner Job."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpt_triton.core.spec import TuneSpec
from gpt_triton.k8s.render import TuneJobParams, render_job

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpt-triton"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
VERSIONS = ["1.34.0", "1.37.0"]
# CRDs are not in kubernetes-validate's bundle: they are checked against minimal schemas of the used fields.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", kind): json.loads((Path(__file__).parent / "crd_schemas" / f"{kind.lower()}-monitoring-v1.json").read_text())
    for kind in ("ServiceMonitor", "PrometheusRule")
}


def _helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)


def _template(helm: str, *args: str) -> list[dict[str, Any]]:
    proc = _helm(helm, "template", "rel", str(CHART), "--namespace", "ml", *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _validate(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if key in CRD_SCHEMAS:
        jsonschema.validate(obj, CRD_SCHEMAS[key])
        return
    for version in VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_lint_strict(helm: str, values: Path) -> None:
    proc = _helm(helm, "lint", "--strict", str(CHART), "-f", str(values))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lint_defaults(helm: str) -> None:
    proc = _helm(helm, "lint", "--strict", str(CHART))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda p: p.stem if p else "defaults")
def test_template_validates(helm: str, values: Path | None) -> None:
    objects = _template(helm, *(["-f", str(values)] if values else []))
    assert _by_kind(objects, "Deployment") and _by_kind(objects, "Service")
    for obj in objects:
        _validate(obj)
    # The spec the chart stores is a valid TuneSpec.
    configmap, = (o for o in _by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-spec"))
    TuneSpec.model_validate(yaml.safe_load(configmap["data"]["spec.yaml"]) or {})


@pytest.mark.parametrize("bad", [
    "stable:\n  replicas: -1\n",
    "gpu:\n  enabled: true\n  product: 'A100 80GB'\n",
    "tuner:\n  cronJob:\n    schedule: every sunday\n",
    "typo_at_top: 1\n",
    "signing:\n  enabled: true\n  secretName: Not_A_DNS_Name\n",
    "canary:\n  enabled: true\n  replicas: 1\n  version: latest\n",
], ids=["negative-replicas", "bad-gpu-label", "bad-cron", "unknown-key", "bad-secret-name", "bad-version"])
def test_schema_rejects_bad_values(helm: str, tmp_path: Path, bad: str) -> None:
    values = tmp_path / "bad.yaml"
    values.write_text(bad)
    proc = _helm(helm, "lint", "--strict", str(CHART), "-f", str(values))
    assert proc.returncode != 0
    assert "schema" in (proc.stdout + proc.stderr)


def test_canary_needs_a_version(helm: str) -> None:
    proc = _helm(helm, "template", "rel", str(CHART), "--set", "canary.enabled=true")
    assert proc.returncode != 0 and "canary.enabled needs canary.version" in proc.stderr


def test_gpu_canary_values(helm: str) -> None:
    objects = _template(helm, "-f", str(CHART / "ci" / "gpu-a100-canary-values.yaml"))
    deployments = {d["metadata"]["name"]: d for d in _by_kind(objects, "Deployment")}
    stable, canary = deployments["rel-gpt-triton-stable"], deployments["rel-gpt-triton-canary"]
    assert (stable["spec"]["replicas"], canary["spec"]["replicas"]) == (4, 1)
    for dep, version in ((stable, "3"), (canary, "4")):
        pod = dep["spec"]["template"]["spec"]
        pin = pod["initContainers"][0]
        assert {"name": "VERSION", "value": version} in pin["env"]
        verify = pod["initContainers"][1]  # after the copy: checks exactly the pinned version
        assert verify["args"][:2] == ["verify", "/serving"]
        assert verify["env"][1]["valueFrom"]["secretKeyRef"] == {"name": "gpt-triton-signing", "key": "signing-key"}
        triton = pod["containers"][0]
        assert "--load-model=resnet50" in triton["args"] and "--model-control-mode=explicit" in triton["args"]
        assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/models/resnet50/ready"
        assert {p["containerPort"] for p in triton["ports"]} == {8000, 8001, 8002}
        assert triton["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "models-rwx"
    # One Service over both tracks: the replica ratio is the traffic split the shifter controls.
    service, = _by_kind(objects, "Service")
    assert "gpt-triton.io/track" not in service["spec"]["selector"]
    assert all(service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
               for d in deployments.values())
    role, = _by_kind(objects, "Role")
    patch_rule, = (r for r in role["rules"] if "patch" in r["verbs"])
    assert sorted(patch_rule["resourceNames"]) == sorted(deployments)
    rule, = _by_kind(objects, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((ROOT / "gpt_triton" / "monitoring" / "rules.yml").read_text())
    monitor, = _by_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert not _by_kind(objects, "PersistentVolumeClaim")  # existingClaim


def test_rules_copy_is_current() -> None:
    """The chart ships a copy of the monitoring rules (Helm cannot read outside the chart)."""
    assert (CHART / "files" / "rules.yml").read_text() == (ROOT / "gpt_triton" / "monitoring" / "rules.yml").read_text(), \
        "cp gpt_triton/monitoring/rules.yml charts/gpt-triton/files/rules.yml"


def test_cronjob_values(helm: str) -> None:
    objects = _template(helm, "-f", str(CHART / "ci" / "cronjob-values.yaml"))
    cron, = _by_kind(objects, "CronJob")
    assert cron["spec"]["schedule"] == "0 3 * * 0" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-3:] == ["--", "--time-budget", "3h"]
    assert "--pushgateway" in args and "pushgateway.monitoring.svc:9091" in args
    assert not _by_kind(objects, "Job")


def test_chart_tuner_job_matches_python_render(helm: str) -> None:
    """The chart and gpt_triton/k8s/render.py describe the same tuning pod."""
    objects = _template(helm, "--set", "tuner.enabled=true", "--set", "gpu.product=NVIDIA-L4")
    chart_job, = _by_kind(objects, "Job")
    py_job = render_job(TuneJobParams(models=("resnet50",), gpu_product="NVIDIA-L4", tuner_gpus=1))
    c_spec, p_spec = chart_job["spec"], py_job["spec"]
    assert c_spec["podFailurePolicy"] == p_spec["podFailurePolicy"]
    c_pod, p_pod = c_spec["template"]["spec"], p_spec["template"]["spec"]
    for key in ("restartPolicy", "securityContext", "nodeSelector", "tolerations"):
        assert c_pod[key] == p_pod[key], key
    c_side, p_side = c_pod["initContainers"][0], p_pod["initContainers"][0]
    for key in ("name", "image", "restartPolicy", "command", "args", "ports", "startupProbe", "livenessProbe",
                "securityContext", "volumeMounts"):
        assert c_side[key] == p_side[key], key
    assert c_side["resources"]["limits"]["nvidia.com/gpu"] == p_side["resources"]["limits"]["nvidia.com/gpu"]
    c_tuner, p_tuner = c_pod["containers"][0], p_pod["containers"][0]
    for key in ("name", "command", "args", "securityContext", "volumeMounts"):
        assert c_tuner[key] == p_tuner[key], key
    assert [e["name"] for e in c_tuner["env"]] == [e["name"] for e in p_tuner["env"]]
    assert sorted(v["name"] for v in c_pod["volumes"]) == sorted(v["name"] for v in p_pod["volumes"])
