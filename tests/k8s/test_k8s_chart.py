"""The Helm chart: lint --strict and template with every ci/ values file, schema rejection, Kubernetes
validation of every rendered object over the supported range (serving from 1.25, tuning from 1.29), and
agreement with the Python-rendered tuner Job. The pin-version script runs in test_k8s_pin_version.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpt_triton.core.errors import EXIT_BAD_INPUT, EXIT_NO_WINNER, EXIT_TRANSIENT
from gpt_triton.core.spec import TuneSpec
from gpt_triton.k8s.render import TuneJobParams, render_job
from gpt_triton.server import SUMMARY_METRICS_ARGS

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpt-triton"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
# The supported range, as kubernetes-validate bundles it: serving-only installs from 1.25; the tuning
# CronJob (native sidecar) from 1.29, where SidecarContainers is beta and on by default.
SERVING_VERSIONS = ["1.25.0", "1.29.0", "1.33.0", "1.37.0"]
TUNING_VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]
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


def _validate(obj: dict[str, Any], version: str) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if key in CRD_SCHEMAS:
        jsonschema.validate(obj, CRD_SCHEMAS[key])
        return
    kubernetes_validate.validate(obj, version, strict=True)


def _has_tuning(values: Path | None) -> bool:
    return values is not None and bool(((yaml.safe_load(values.read_text()) or {}).get("tuner") or {})
                                       .get("cronJob", {}).get("enabled"))


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
    """Every object, for every Kubernetes version of the supported range the values can install on."""
    for version in TUNING_VERSIONS if _has_tuning(values) else SERVING_VERSIONS:
        objects = _template(helm, "--kube-version", version, *(["-f", str(values)] if values else []))
        assert _by_kind(objects, "Deployment") and _by_kind(objects, "Service")
        assert not _by_kind(objects, "Job")  # never a one-shot Job: upgrades must not start or kill a tune
        for obj in objects:
            _validate(obj, version)
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
    "tuner:\n  enabled: true\n",
    "gpu:\n  enabled: true\n  product: NVIDIA-L4\n  resourceName: amd.com/gpu\n",
    "autoscaling:\n  enabled: true\n  metric: {type: Object, name: q, target: '1'}\n",
    "tuner:\n  promotionLock: etcd\n",
    "extraVolumeMounts:\n  - {name: cache}\n",
    "affinity:\n  nodeAfinity: {}\n",
], ids=["negative-replicas", "bad-gpu-label", "bad-cron", "unknown-key", "bad-secret-name", "bad-version",
        "no-one-shot-job", "bad-gpu-resource", "bad-hpa-metric-type", "bad-lock", "mount-without-path",
        "affinity-typo"])
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
        # The repository of this namespace and GPU product.
        assert {"name": "REPOSITORY", "value": "/data/repository/ml/NVIDIA-A100-SXM4-80GB"} in pin["env"]
        verify = pod["initContainers"][1]  # after the copy: checks exactly the pinned version
        assert verify["args"][:2] == ["verify", "/serving"]
        # Plans are checked against this pod's GPU (and the builder's TensorRT: no tensorrtVersion given).
        assert verify["args"][-1] == "--allow-drift"
        assert verify["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        # Serving pods: their own account, no token.
        assert pod["serviceAccountName"] == "rel-gpt-triton-serving" and pod["automountServiceAccountToken"] is False
        # Extensions from the values file.
        assert pod["priorityClassName"] == "inference-critical"
        assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
        assert dep["spec"]["template"]["metadata"]["annotations"] == {"prometheus.io/scrape": "false"}
        assert {"name": "CUDA_MODULE_LOADING", "value": "LAZY"} in pod["containers"][0]["env"]
        assert {"name": "cache", "mountPath": "/cache"} in pod["containers"][0]["volumeMounts"]
        assert {"name": "cache", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]
        assert verify["env"][1]["valueFrom"]["secretKeyRef"] == {"name": "gpt-triton-signing", "key": "signing-key"}
        triton = pod["containers"][0]
        assert "--load-model=resnet50" in triton["args"] and "--model-control-mode=explicit" in triton["args"]
        assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/models/resnet50/ready"
        assert {p["containerPort"] for p in triton["ports"]} == {8000, 8001, 8002}
        assert triton["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "models-rwx"
        assert set(SUMMARY_METRICS_ARGS) <= set(triton["args"]) and "--log-verbose=0" in triton["args"]
    # One Service over both tracks: the replica ratio is the traffic split the shifter controls.
    service, = _by_kind(objects, "Service")
    assert "gpt-triton.io/track" not in service["spec"]["selector"]
    assert all(service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
               for d in deployments.values())
    role, = _by_kind(objects, "Role")
    scale_rule, pin_rule = (r for r in role["rules"] if "patch" in r["verbs"])
    # The canary scales through the scale subresource of exactly these two Deployments; the only pod-template
    # write is promotion's re-pin of the stable Deployment (rbac.canaryPromotes, on by default).
    assert scale_rule["resources"] == ["deployments/scale"] and scale_rule["verbs"] == ["get", "patch", "update"]
    assert sorted(scale_rule["resourceNames"]) == sorted(deployments)
    stable_name, = (name for name in deployments if name.endswith("-stable"))
    assert pin_rule == {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [stable_name],
                        "verbs": ["patch"]}
    pdb, = _by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"]["matchLabels"]["gpt-triton.io/track"] == "stable"
    rule, = _by_kind(objects, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((ROOT / "gpt_triton" / "monitoring" / "rules.yml").read_text())
    monitor, = _by_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert not _by_kind(objects, "PersistentVolumeClaim")  # existingClaim


def test_rules_copy_is_current() -> None:
    """The chart ships a copy of the monitoring rules (Helm cannot read outside the chart)."""
    assert (CHART / "files" / "rules.yml").read_text() == (ROOT / "gpt_triton" / "monitoring" / "rules.yml").read_text(), \
        "cp gpt_triton/monitoring/rules.yml charts/gpt-triton/files/rules.yml"


def _cron_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    cron, = _by_kind(objects, "CronJob")
    return dict(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"])


def test_cronjob_values(helm: str) -> None:
    objects = _template(helm, "-f", str(CHART / "ci" / "cronjob-values.yaml"))
    cron, = _by_kind(objects, "CronJob")
    assert cron["spec"]["schedule"] == "0 3 * * 0" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = _cron_pod(objects)
    args = pod["containers"][0]["args"]
    assert args[-3:] == ["--", "--time-budget", "3h"]
    assert "--pushgateway" in args and "pushgateway.monitoring.svc:9091" in args
    assert args[args.index("--repository") + 1] == "/data/repository/ml/NVIDIA-L4"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["GPT_TRITON_GPU_PRODUCT"] == "NVIDIA-L4" and "POD_NAMESPACE" in env
    # promotionLock: lease: the tuner gets a token and a Role for Leases only.
    assert env["GPT_TRITON_PROMOTION_LOCK"] == "lease" and pod["automountServiceAccountToken"] is True
    lease_role, = (r for r in _by_kind(objects, "Role") if r["metadata"]["name"].endswith("-tuner-lease"))
    assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                    "verbs": ["create", "get", "update"]}]
    assert not _by_kind(objects, "Job")


def test_default_values_render_no_job_and_a_helm_test(helm: str) -> None:
    objects = _template(helm)
    assert not _by_kind(objects, "Job") and not _by_kind(objects, "CronJob")
    test_pod, = _by_kind(objects, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    container, = test_pod["spec"]["containers"]
    assert container["args"][-1] == "http://rel-gpt-triton.ml.svc:8000/v2/health/ready"
    assert test_pod["spec"]["automountServiceAccountToken"] is False


def test_helm_test_pod_checks_readiness(tmp_path: Path, helm: str) -> None:
    """The test pod's script, run against a local HTTP server: exit 0 on 200 ready, non-zero otherwise."""
    import http.server
    import sys
    import threading

    test_pod, = _by_kind(_template(helm), "Pod")
    container, = test_pod["spec"]["containers"]
    script = container["args"][0]
    ready = {"ok": True}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/v2/health/ready" and ready["ok"] else 400)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v2/health/ready"
        run = lambda: subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True,  # noqa: E731
                                     timeout=30, check=False)
        assert run().returncode == 0
        ready["ok"] = False
        assert run().returncode != 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_tuning_needs_native_sidecars_but_serving_does_not(helm: str) -> None:
    """kubeVersion does not block a serving-only install on an older cluster; tuning on one fails at template
    time with one clear message."""
    assert _template(helm, "--kube-version", "1.25.0")
    proc = _helm(helm, "template", "rel", str(CHART), "--kube-version", "1.28.0", "--set", "tuner.cronJob.enabled=true")
    assert proc.returncode != 0 and "needs Kubernetes >= 1.29" in proc.stderr
    assert _by_kind(_template(helm, "--kube-version", "1.29.0", "--set", "tuner.cronJob.enabled=true"), "CronJob")


def test_rbac_separates_the_accounts(helm: str) -> None:
    objects = _template(helm, "--set", "tuner.cronJob.enabled=true")
    accounts = {a["metadata"]["name"]: a for a in _by_kind(objects, "ServiceAccount")}
    assert set(accounts) == {"rel-gpt-triton-operator", "rel-gpt-triton-tuner", "rel-gpt-triton-serving"}
    assert accounts["rel-gpt-triton-operator"]["automountServiceAccountToken"] is True
    assert accounts["rel-gpt-triton-tuner"]["automountServiceAccountToken"] is False
    assert accounts["rel-gpt-triton-serving"]["automountServiceAccountToken"] is False
    role, = _by_kind(objects, "Role")  # the operator's only: the tuner (file lock) and serving have none
    binding, = _by_kind(objects, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-gpt-triton-operator", "namespace": "ml"}]
    pins = [r for r in role["rules"] if "deployments" in r["resources"] and "patch" in r["verbs"]]
    assert [r["resourceNames"] for r in pins] == [["rel-gpt-triton-stable"]]  # promotion's re-pin, nothing wider
    gitops, = _by_kind(_template(helm, "--set", "rbac.canaryPromotes=false"), "Role")
    assert not any("deployments" in r["resources"] and "patch" in r["verbs"] for r in gitops["rules"])
    pod = _cron_pod(objects)
    assert pod["serviceAccountName"] == "rel-gpt-triton-tuner" and pod["automountServiceAccountToken"] is False


def test_pod_failure_policy_matches_the_exit_codes(helm: str) -> None:
    cron, = _by_kind(_template(helm, "--set", "tuner.cronJob.enabled=true"), "CronJob")
    rules = cron["spec"]["jobTemplate"]["spec"]["podFailurePolicy"]["rules"]
    by_action = {r["action"]: r for r in rules}
    assert sorted(by_action["FailJob"]["onExitCodes"]["values"]) == sorted([EXIT_NO_WINNER, EXIT_BAD_INPUT])
    assert by_action["Count"]["onExitCodes"]["values"] == [EXIT_TRANSIENT]
    assert by_action["Ignore"]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]


def test_one_triton_block_for_serving_and_tuning(helm: str) -> None:
    """The tuning sidecar runs Triton as serving does: same flags (extraArgs, latency summaries), resources."""
    objects = _template(helm, "--set", "tuner.cronJob.enabled=true", "--set", "triton.extraArgs={--log-verbose=1}",
                        "--set", "gpu.resourceName=nvidia.com/mig-3g.40gb")
    sidecar = _cron_pod(objects)["initContainers"][0]
    serving, = (d for d in _by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("-stable"))
    triton = serving["spec"]["template"]["spec"]["containers"][0]
    assert sidecar["args"][3:] == triton["args"][3:]
    # The latency summaries as the embedded server asks for them.
    assert set(SUMMARY_METRICS_ARGS) <= set(sidecar["args"]) and "--log-verbose=1" in sidecar["args"]
    assert sidecar["resources"] == triton["resources"]
    assert triton["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    # Guaranteed QoS by default: requests equal limits.
    assert triton["resources"]["requests"] == {k: v for k, v in triton["resources"]["limits"].items() if k in ("cpu", "memory")}


def test_hpa_on_queue_time(helm: str) -> None:
    objects = _template(helm, "-f", str(CHART / "ci" / "serving-hpa-mig-values.yaml"))
    hpa, = _by_kind(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    metric, = hpa["spec"]["metrics"]
    assert metric["type"] == "External" and metric["external"]["metric"]["name"] == "gpt_triton_queue_time_us_per_request"
    assert metric["external"]["metric"]["selector"]["matchLabels"] == {"namespace": "ml", "model": "bert-base"}
    stable, = (d for d in _by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("-stable"))
    assert "replicas" not in stable["spec"]  # the HPA owns it; an upgrade does not reset it
    assert hpa["spec"]["scaleTargetRef"]["name"] == stable["metadata"]["name"]
    pod = stable["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia" and "nodeAffinity" in pod["affinity"]
    verify = pod["initContainers"][1]
    assert verify["args"][-2:] == ["--tensorrt-version", "10.5.0"]
    pods = _template(helm, "--set", "autoscaling.enabled=true")
    hpa, = _by_kind(pods, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["target"] == {"type": "AverageValue", "averageValue": "20000"}


def test_chart_tuner_job_matches_python_render(helm: str) -> None:
    """The chart's CronJob and gpt_triton/k8s/render.py describe the same tuning pod."""
    objects = _template(helm, "--set", "tuner.cronJob.enabled=true", "--set", "gpu.product=NVIDIA-L4",
                        "--set", "tuner.logBundle=true")
    cron, = _by_kind(objects, "CronJob")
    py_job = render_job(TuneJobParams(models=("resnet50",), gpu_product="NVIDIA-L4", tuner_gpus=1, namespace="ml",
                                      log_bundle=True))
    c_spec, p_spec = cron["spec"]["jobTemplate"]["spec"], py_job["spec"]
    assert c_spec["podFailurePolicy"] == p_spec["podFailurePolicy"]
    c_pod, p_pod = c_spec["template"]["spec"], p_spec["template"]["spec"]
    for key in ("restartPolicy", "securityContext", "nodeSelector", "tolerations", "automountServiceAccountToken"):
        assert c_pod[key] == p_pod[key], key
    c_side, p_side = c_pod["initContainers"][0], p_pod["initContainers"][0]
    for key in ("name", "image", "restartPolicy", "command", "args", "ports", "startupProbe", "livenessProbe",
                "securityContext", "volumeMounts", "resources"):
        assert c_side[key] == p_side[key], key
    c_tuner, p_tuner = c_pod["containers"][0], p_pod["containers"][0]
    for key in ("name", "command", "args", "securityContext", "volumeMounts"):
        assert c_tuner[key] == p_tuner[key], key
    assert [e["name"] for e in c_tuner["env"]] == [e["name"] for e in p_tuner["env"]]
    assert sorted(v["name"] for v in c_pod["volumes"]) == sorted(v["name"] for v in p_pod["volumes"])
