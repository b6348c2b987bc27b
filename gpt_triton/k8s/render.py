"""Kubernetes objects for tuning runs, rendered as plain dicts.

This module is the single source of truth for the plain manifests: the files in ``k8s/`` are its output
for example parameters (``gpt-triton k8s examples k8s/`` regenerates them and a test checks they
are current), and ``gpt-triton k8s render|submit`` use the same functions. The Helm chart mirrors the
same pod layout in Go templates; a test compares the two on the fields that matter (sidecar, probes,
failure policy, security).

Pod layout of a tuning run:
- ``triton``: Triton 2.51 (NGC 24.10) as a *native sidecar* (init container with ``restartPolicy:
  Always``). Its startupProbe gates the tuner's start, and it is stopped when the tuner exits, so the
  Job completes. Explicit model control; the staging repository is an emptyDir shared with the tuner.
- ``tuner``: ``gpt-triton k8s run`` which picks the model (by ``JOB_COMPLETION_INDEX`` in a fan-out),
  runs ``gpt-triton tune --triton-url 127.0.0.1:8001`` and writes its result bundle beside the run
  directory on the PVC (``k8s collect`` reads it there; the pod log carries only a pointer).
- The production repository, the input models and the run directories live on one PVC. The repository is
  keyed by namespace and GPU product (``repository/<namespace>/<product|cpu>``): an engine tuned on one GPU
  product is never served by a release on another.
- The tuner parses untrusted ONNX: its ServiceAccount has no API permissions and no token is mounted
  (unless the promotion lock is a Lease). Triton gets the same arguments and resources as in serving.

GPU: the sidecar and the tuner each get one GPU of the selected product. Measuring on a GPU that the
tuner is not building TensorRT engines on keeps builds from disturbing the timings; both GPUs are the
same product on the same node, so engines built on one run on the other.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpt_triton import __version__
from gpt_triton.core.errors import EXIT_BAD_INPUT, EXIT_NO_WINNER, EXIT_TRANSIENT, GptTritonError

TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"  # Triton 2.51
DEFAULT_IMAGE = f"gpt-triton:{__version__}"
GPU_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
TUNER_CONTAINER = "tuner"
SIDECAR_CONTAINER = "triton"
PART_OF = "gpt-triton"
# Triton's flags after the repository and control mode, in serving and in the tuning sidecar alike (the chart's
# gpt-triton.tritonArgs): latency summaries give the p99 the canary gates and dashboards read.
TRITON_ARGS = (
    "--strict-readiness=true",
    "--http-port=8000",
    "--grpc-port=8001",
    "--metrics-port=8002",
    "--metrics-config=summary_latencies=true",
)
# The three ServiceAccounts (the chart names them <release>-gpt-triton-<role>).
OPERATOR_ACCOUNT = "gpt-triton-operator"
TUNER_ACCOUNT = "gpt-triton-tuner"
SERVING_ACCOUNT = "gpt-triton-serving"

# Paths inside the tuner pod.
SPEC_DIR = "/etc/gpt-triton"
DATA_DIR = "/data"
STAGING_DIR = "/staging"

_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def dns_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label from free text; long names keep a hash suffix so they stay unique."""
    raw = "-".join(p for p in parts if p)
    name = _DNS_LABEL.sub("-", raw.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)
    if not name:
        raise GptTritonError(f"cannot make a Kubernetes name from {raw!r}: use letters, digits or '-'")
    if len(name) > limit:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        name = name[: limit - 9].rstrip("-") + "-" + digest
    return name


def label_value(text: str) -> str:
    """A valid label value (<=63 chars, alphanumeric at both ends)."""
    value = _LABEL_VALUE.sub("-", text).strip("-._")[:63].rstrip("-._")
    return value


@dataclass(frozen=True)
class SecretRef:
    name: str = "gpt-triton-signing"
    key: str = "signing-key"


@dataclass(frozen=True)
class TuneJobParams:
    """Everything a tuning Job depends on. One model: a plain Job; several: an Indexed Job (one index each)."""

    models: tuple[str, ...]
    gpu_product: str | None = None  # None: CPU only (no GPU node selector or limits)
    name: str | None = None  # default: tune-<model|N-models>-<gpu product>
    namespace: str = "gpt-triton"
    image: str = DEFAULT_IMAGE
    triton_image: str = TRITON_IMAGE
    service_account: str = TUNER_ACCOUNT
    pvc: str = "gpt-triton-data"
    spec_configmap: str | None = None  # default: <job name>-spec
    signing_secret: SecretRef | None = field(default_factory=SecretRef)
    pushgateway: str | None = None  # HOST:PORT
    parallelism: int = 1  # fan-out: how many indexes run at once
    active_deadline_s: int = 6 * 3600
    backoff_limit: int = 2
    ttl_after_finished_s: int = 7 * 24 * 3600
    tuner_gpus: int | None = None  # None: 1 with a GPU product, 0 without
    tuner_cpu: str = "2"
    tuner_memory: str = "8Gi"
    # Triton as it serves (the chart's triton block): requests == limits, whole CPUs -> Guaranteed QoS.
    triton_cpu: str = "4"
    triton_memory: str = "16Gi"
    triton_extra_args: tuple[str, ...] = ()
    gpu_resource: str = GPU_RESOURCE  # or a MIG slice, e.g. nvidia.com/mig-1g.10gb
    promotion_lock: str = "file"  # file (flock on the PVC) or lease (coordination.k8s.io; mounts a token)
    log_bundle: bool = False  # also print the result bundle to the log (results always go to the PVC)
    extra_tune_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.models:
            raise GptTritonError("no model given: pass --model NAME (repeat it for a fan-out)")
        if len(set(self.models)) != len(self.models):
            raise GptTritonError("a model is listed twice: give each --model once")
        if self.parallelism < 1:
            raise GptTritonError("--parallelism must be at least 1")
        if self.promotion_lock not in ("file", "lease"):
            raise GptTritonError(f"promotion lock {self.promotion_lock!r}: use file or lease")

    @property
    def indexed(self) -> bool:
        return len(self.models) > 1

    @property
    def job_name(self) -> str:
        if self.name:
            return dns_name(self.name)
        what = self.models[0] if not self.indexed else f"{len(self.models)}-models"
        return dns_name("tune", what, self.gpu_product or "cpu")

    @property
    def configmap_name(self) -> str:
        return self.spec_configmap or dns_name(self.job_name, "spec", limit=253)

    @property
    def repository(self) -> str:
        return repository_path(self.namespace, self.gpu_product)


def repository_path(namespace: str, gpu_product: str | None, data_dir: str = DATA_DIR) -> str:
    """The production repository of one namespace and GPU product on the PVC (the chart's
    gpt-triton.repositoryPath): ``<data>/repository/<namespace>/<product or cpu>``."""
    return f"{data_dir}/repository/{namespace}/{gpu_product or 'cpu'}"


def _labels(params: TuneJobParams) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "gpt-triton",
        "app.kubernetes.io/component": "tuner",
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/version": label_value(__version__),
    }
    if not params.indexed:
        labels["gpt-triton.io/model"] = label_value(params.models[0])
    if params.gpu_product:
        labels["gpt-triton.io/gpu-product"] = label_value(params.gpu_product)
    return labels


def _security(read_only_root: bool) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": read_only_root,
        "capabilities": {"drop": ["ALL"]},
    }


def _resources(cpu: str, memory: str, gpus: int, gpu_resource: str = GPU_RESOURCE) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        # Extended resources are limits-only; the request defaults to the limit.
        limits[gpu_resource] = str(gpus)
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}


def triton_sidecar(params: TuneJobParams) -> dict[str, Any]:
    """Triton as a native sidecar: started first, ready before the tuner starts, stopped after it."""
    probe = {"httpGet": {"path": "/v2/health/ready", "port": 8000}, "periodSeconds": 5, "timeoutSeconds": 3}
    return {
        "name": SIDECAR_CONTAINER,
        "image": params.triton_image,
        "restartPolicy": "Always",  # this is what makes an init container a native sidecar
        "command": ["tritonserver"],
        "args": [
            f"--model-repository={STAGING_DIR}",
            "--model-control-mode=explicit",
            "--exit-on-error=false",
            *TRITON_ARGS,
            *params.triton_extra_args,
        ],
        "ports": [
            {"name": "http", "containerPort": 8000},
            {"name": "grpc", "containerPort": 8001},
            {"name": "metrics", "containerPort": 8002},
        ],
        # Up to 10 minutes for a cold NGC image to initialise its backends.
        "startupProbe": {**probe, "failureThreshold": 120},
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": 8000}, "periodSeconds": 10,
                          "failureThreshold": 6},
        "resources": _resources(params.triton_cpu, params.triton_memory, 1 if params.gpu_product else 0,
                                params.gpu_resource),
        "securityContext": _security(read_only_root=True),
        "volumeMounts": [
            {"name": "staging", "mountPath": STAGING_DIR},
            {"name": "triton-tmp", "mountPath": "/tmp"},
            {"name": "dshm", "mountPath": "/dev/shm"},  # python backend and CUDA IPC use shared memory
        ],
    }


def tuner_args(params: TuneJobParams) -> list[str]:
    args = ["k8s", "run"]
    if params.indexed:
        args += ["--models-file", f"{SPEC_DIR}/models"]
    else:
        args += ["--model", params.models[0]]
    args += [
        "--spec", f"{SPEC_DIR}/spec.yaml",
        "--inputs", f"{DATA_DIR}/inputs",
        "--runs", f"{DATA_DIR}/runs",
        "--repository", params.repository,
        "--triton-url", "127.0.0.1:8001",
    ]
    if params.pushgateway:
        args += ["--pushgateway", params.pushgateway]
    if params.log_bundle:
        args.append("--log-bundle")
    if params.extra_tune_args:
        args += ["--", *params.extra_tune_args]
    return args


def tuner_container(params: TuneJobParams) -> dict[str, Any]:
    gpus = params.tuner_gpus if params.tuner_gpus is not None else (1 if params.gpu_product else 0)
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},
        # The label the Job controller puts on its pods; names the run directory.
        {"name": "JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # Pushgateway grouping: one group per namespace and GPU product.
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "GPT_TRITON_GPU_PRODUCT", "value": params.gpu_product or "cpu"},
    ]
    if params.promotion_lock == "lease":
        env.append({"name": "GPT_TRITON_PROMOTION_LOCK", "value": "lease"})
    if params.signing_secret:
        env.append({
            "name": "GPT_TRITON_SIGNING_KEY",
            "valueFrom": {"secretKeyRef": {"name": params.signing_secret.name, "key": params.signing_secret.key}},
        })
    return {
        "name": TUNER_CONTAINER,
        "image": params.image,
        "command": ["gpt-triton"],
        "args": tuner_args(params),
        "env": env,
        "resources": _resources(params.tuner_cpu, params.tuner_memory, gpus, params.gpu_resource),
        "securityContext": _security(read_only_root=True),
        "volumeMounts": [
            {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "staging", "mountPath": STAGING_DIR},
            {"name": "tuner-tmp", "mountPath": "/tmp"},
        ],
    }


def pod_failure_policy(indexed: bool) -> dict[str, Any]:
    """The exit codes of gpt_triton.core.errors: no winner (1) and bad input (2) cannot pass on a retry, so
    the Job (or, in a fan-out, the index) fails at once; a transient failure (3: Triton unreachable, lock
    held) is retried and counts against the backoff limit; a node disruption is retried without counting."""
    fail = "FailIndex" if indexed else "FailJob"

    def on_exit(action: str, codes: list[int]) -> dict[str, Any]:
        return {"action": action, "onExitCodes": {"containerName": TUNER_CONTAINER, "operator": "In",
                                                  "values": codes}}

    return {
        "rules": [
            on_exit(fail, [EXIT_NO_WINNER, EXIT_BAD_INPUT]),
            on_exit("Count", [EXIT_TRANSIENT]),
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }


def render_job(params: TuneJobParams) -> dict[str, Any]:
    labels = _labels(params)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": params.service_account,
        # No API token for a pod that parses untrusted ONNX, unless it must take the promotion Lease.
        "automountServiceAccountToken": params.promotion_lock == "lease",
        "restartPolicy": "Never",  # required by podFailurePolicy; retries are new pods
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [triton_sidecar(params)],
        "containers": [tuner_container(params)],
        "volumes": [
            {"name": "spec", "configMap": {"name": params.configmap_name}},
            {"name": "data", "persistentVolumeClaim": {"claimName": params.pvc}},
            {"name": "staging", "emptyDir": {}},
            {"name": "tuner-tmp", "emptyDir": {}},
            {"name": "triton-tmp", "emptyDir": {}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        ],
    }
    if params.gpu_product:
        pod_spec["nodeSelector"] = {GPU_LABEL: params.gpu_product}
        pod_spec["tolerations"] = [{"effect": "NoSchedule", "key": GPU_RESOURCE, "operator": "Exists"}]
    spec: dict[str, Any] = {
        "activeDeadlineSeconds": params.active_deadline_s,
        "ttlSecondsAfterFinished": params.ttl_after_finished_s,
        "podFailurePolicy": pod_failure_policy(params.indexed),
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if params.indexed:
        # One index per model; a model that fails does not stop the others (per-index backoff).
        spec.update({
            "completionMode": "Indexed",
            "completions": len(params.models),
            "parallelism": min(params.parallelism, len(params.models)),
            "backoffLimitPerIndex": params.backoff_limit,
        })
    else:
        spec["backoffLimit"] = params.backoff_limit
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": params.job_name, "namespace": params.namespace, "labels": labels},
        "spec": spec,
    }


def render_configmap(params: TuneJobParams, spec_text: str) -> dict[str, Any]:
    """The tuning spec and, for a fan-out, the model list (line i = JOB_COMPLETION_INDEX i)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": params.configmap_name, "namespace": params.namespace,
                     "labels": {"app.kubernetes.io/name": "gpt-triton", "app.kubernetes.io/part-of": PART_OF}},
        "data": {"spec.yaml": spec_text, "models": "".join(f"{m}\n" for m in params.models)},
    }


def render_rbac(namespace: str, deployments: tuple[str, ...] = ("gpt-triton-stable", "gpt-triton-canary"),
                lease_for_tuner: bool = False, canary_promotes: bool = True) -> list[dict[str, Any]]:
    """Three accounts, least privilege, namespaced. The operator (``gpt-triton k8s``, the canary) submits and
    follows Jobs and scales ``deployments`` through the scale subresource; its one pod-template write is a
    promoted canary's re-pin of the first (stable) Deployment, unless ``canary_promotes`` is off (GitOps). The
    tuner (untrusted ONNX) and serving accounts get no permissions and no token (the tuner: Leases only with
    ``lease_for_tuner``). Mirrors the chart's templates/rbac.yaml."""
    labels = {"app.kubernetes.io/name": "gpt-triton"}

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": dict(labels)}

    def account(name: str, token: bool) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name),
                "automountServiceAccountToken": token}

    def role(name: str, rules: list[dict[str, Any]], subject: str) -> list[dict[str, Any]]:
        return [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(name), "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(name),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": namespace}]},
        ]

    leases = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]}
    operator_rules = [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "resourceNames": list(deployments),
         "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]},
        leases,
    ]
    if canary_promotes:
        operator_rules.insert(2, {"apiGroups": ["apps"], "resources": ["deployments"],
                                  "resourceNames": [deployments[0]], "verbs": ["patch"]})
    objects = [
        account(OPERATOR_ACCOUNT, True),
        account(TUNER_ACCOUNT, lease_for_tuner),
        account(SERVING_ACCOUNT, False),
        *role(OPERATOR_ACCOUNT, operator_rules, OPERATOR_ACCOUNT),
    ]
    if lease_for_tuner:
        objects += role(f"{TUNER_ACCOUNT}-lease", [leases], TUNER_ACCOUNT)
    return objects


def render_pvc(namespace: str, name: str = "gpt-triton-data", size: str = "100Gi") -> dict[str, Any]:
    """Production repository + inputs + run directories. RWX so Triton Deployments can mount it too."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "gpt-triton"}},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}},
    }


def render_run(params: TuneJobParams, spec_text: str) -> list[dict[str, Any]]:
    """What `submit` creates, in order: the spec ConfigMap, then the Job that mounts it."""
    return [render_configmap(params, spec_text), render_job(params)]


class _NoAliasDumper(yaml.SafeDumper):
    """Manifests are read by people and kubectl: repeat shared dicts instead of writing &id001 anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: list[dict[str, Any]], header: str = "") -> str:
    body = yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=False, width=120)
    return header + body
