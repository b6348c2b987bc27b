"""``gpt-triton canary --k8s-deployments STABLE,CANARY``: the canary over the chart's two Triton Deployments.

Each Deployment pins one model version (the chart's ``pin-version`` init container copies version
``$VERSION`` into the pod's own repository), so both versions already serve when the canary starts and
"serving a set of versions" is about replicas, not Triton's version policy:

* traffic moves by replica ratio (:class:`~gpt_triton.k8s.shifter.DeploymentReplicaShifter`): the
  Service selects both Deployments, real clients hit it, so this mode sends no traffic of its own;
* the gates still read Prometheus, per ``model``/``version`` label that Triton puts on its metrics;
* promotion re-pins the stable Deployment to the candidate (its ``VERSION`` env), rolls it out while the
  canary carries all traffic, then scales the canary to 0; rollback scales the canary to 0 and restores
  the stable replica count, leaving the stable pin alone.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from gpt_triton.canary.controller import (
    EXIT_CODES,
    CanaryController,
    CanaryMetrics,
    CanaryPolicy,
    DecisionLog,
)
from gpt_triton.canary.gates import PromQLGates, gate_config_from_args, window_from_args
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.spec import parse_duration
from gpt_triton.k8s.client import REQUEST_TIMEOUT, KubeClient, api_error, load_api_client
from gpt_triton.k8s.shifter import DeploymentReplicaShifter
from gpt_triton.metrics.prometheus import PrometheusClient

# Where charts/gpt-triton/templates/triton-deployments.yaml pins the served version.
PIN_CONTAINER = "pin-version"
VERSION_ENV = "VERSION"
MODEL_ENV = "MODEL"
DEFAULT_NAMESPACE = "gpt-triton"  # the chart's and k8s/ manifests' namespace
CHART_HINT = "it was not rendered by charts/gpt-triton (the pin-version init container with MODEL/VERSION env)"


def _pin_env(deployment: dict[str, Any]) -> dict[str, Any] | None:
    """The env list entries of the pin-version init container, by name (None: not a chart Deployment)."""
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in spec.get("initContainers") or []:
        if container.get("name") == PIN_CONTAINER:
            return {e.get("name"): e for e in container.get("env") or []}
    return None


@dataclass(frozen=True)
class PinnedDeployment:
    name: str
    model: str
    version: str  # "" = the newest version at pod start (the chart's default)
    replicas: int


def inspect_deployment(kube: KubeClient, name: str) -> PinnedDeployment:
    """Read a chart Deployment (a 404/403 is a one-line GptTritonError from KubeClient)."""
    deployment = kube.deployment(name)
    env = _pin_env(deployment)
    if env is None or VERSION_ENV not in env:
        raise GptTritonError(f"deployment {kube.namespace}/{name} pins no model version: {CHART_HINT}")
    return PinnedDeployment(
        name=name, model=str((env.get(MODEL_ENV) or {}).get("value") or ""),
        version=str(env[VERSION_ENV].get("value") or ""),
        replicas=int((deployment.get("spec") or {}).get("replicas") or 0),
    )


def _converged(deployment: dict[str, Any], replicas: int) -> bool:
    """The Deployment runs exactly ``replicas`` ready pods of its current template.

    A real API server always sets metadata.generation; until the controller has observed it, the status
    describes the previous spec, and updatedReplicas counts only pods of the new template (a status field
    of 0 is omitted, hence the defaults). Fakes without generations are judged on replica counts alone.
    """
    status = deployment.get("status") or {}
    generation = (deployment.get("metadata") or {}).get("generation")
    if generation is not None:
        if int(status.get("observedGeneration") or 0) < int(generation):
            return False
        if int(status.get("updatedReplicas") or 0) < replicas:
            return False
    return int(status.get("readyReplicas") or 0) >= replicas and int(status.get("replicas") or 0) <= replicas


class KubernetesVersions:
    """The canary's ``VersionServer`` over the stable and canary Deployments.

    ``serve([stable, candidate])`` is a no-op (each Deployment already pins its version);
    ``serve([candidate])`` promotes, ``serve([stable])`` restores. The controller calls these only after
    the shifter has moved all traffic off the Deployment that changes, so no request is lost.
    """

    def __init__(self, kube: KubeClient, stable: PinnedDeployment, canary: PinnedDeployment, *,
                 stable_version: int, candidate_version: int, restore_replicas: int,
                 wait_s: float = 600.0, poll_s: float = 2.0) -> None:
        self.kube, self.stable, self.canary = kube, stable, canary
        self.stable_version, self.candidate_version = int(stable_version), int(candidate_version)
        self.restore_replicas = restore_replicas  # the stable Deployment's size before the canary
        self.wait_s, self.poll_s = wait_s, poll_s

    def serve(self, versions: Sequence[int]) -> None:
        wanted = sorted({int(v) for v in versions})
        if wanted == sorted({self.stable_version, self.candidate_version}):
            return
        if wanted == [self.candidate_version]:
            self._promote()
        elif wanted == [self.stable_version]:
            self._restore()
        else:
            raise GptTritonError(f"cannot serve versions {wanted} with deployments {self.stable.name} "
                                 f"(v{self.stable_version}) and {self.canary.name} (v{self.candidate_version})")

    def _promote(self) -> None:
        # The canary carries all traffic now: re-pin stable and roll it out at full size, then retire the canary.
        deployment = self.kube.deployment(self.stable.name)
        template = copy.deepcopy(deployment["spec"]["template"])
        env = _pin_env({"spec": {"template": template}})
        if env is None or VERSION_ENV not in env:
            raise GptTritonError(f"deployment {self.kube.namespace}/{self.stable.name} lost its version pin: {CHART_HINT}")
        env[VERSION_ENV]["value"] = str(self.candidate_version)
        # The whole template as a strategic merge patch (lists merge by name); the resourceVersion makes it
        # conditional, so a concurrent `helm upgrade` is a 409 rather than silently overwritten.
        body = {"metadata": {"resourceVersion": (deployment.get("metadata") or {}).get("resourceVersion")},
                "spec": {"replicas": self.restore_replicas, "template": template}}
        action = (f"pinning deployment {self.kube.namespace}/{self.stable.name} to version {self.candidate_version}")
        try:
            self.kube.apps.patch_namespaced_deployment(
                self.stable.name, self.kube.namespace, body, _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT, _content_type="application/strategic-merge-patch+json")
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise api_error(exc, action, self.kube.host, conflict_hint="the Deployment changed meanwhile (helm "
                            f"upgrade?); the canary {self.canary.name} still serves all traffic: re-run") from exc
        self._wait(self.stable.name, self.restore_replicas, "roll out")
        self._scale(self.canary.name, 0)

    def _restore(self) -> None:
        # Up before down, so serving capacity never dips below what stable had before the canary.
        current = self.kube.deployment_replicas(self.stable.name)
        if current < self.restore_replicas:
            self._scale(self.stable.name, self.restore_replicas)
        self._scale(self.canary.name, 0)
        if current > self.restore_replicas:
            self._scale(self.stable.name, self.restore_replicas)

    def _scale(self, name: str, replicas: int) -> None:
        if self.kube.deployment_replicas(name) != replicas:
            self.kube.scale_deployment(name, replicas)
        self._wait(name, replicas, "scale")

    def _wait(self, name: str, replicas: int, what: str) -> None:
        deadline = time.monotonic() + self.wait_s
        while not _converged(self.kube.deployment(name), replicas):
            if time.monotonic() >= deadline:
                raise GptTritonError(
                    f"deployment {self.kube.namespace}/{name} did not {what} to {replicas} ready replicas within "
                    f"{self.wait_s:.0f} s: check `kubectl describe deployment {name} -n {self.kube.namespace}` "
                    "(capacity, image pulls, the pin-version init container)")
            time.sleep(self.poll_s)  # polling interval of a condition with a deadline


def _deployment_names(text: str) -> tuple[str, str]:
    names = [n.strip() for n in text.split(",")]
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise GptTritonError(f"bad --k8s-deployments {text!r}: pass STABLE,CANARY, e.g. gpt-triton-stable,gpt-triton-canary")
    return names[0], names[1]


def _versions(args: argparse.Namespace, stable: PinnedDeployment, canary: PinnedDeployment) -> tuple[int, int]:
    """(stable, candidate) versions, checked against what the Deployments pin: the gates query by version."""
    for dep in (stable, canary):
        if dep.model and dep.model != args.model:
            raise GptTritonError(f"deployment {dep.name} serves model {dep.model!r}, not --model {args.model!r}")
    candidate = int(args.candidate_version)
    if canary.version != str(candidate):
        raise GptTritonError(f"canary deployment {canary.name} pins version {canary.version or '(newest)'}, not "
                             f"--candidate-version {candidate}: helm upgrade --set canary.version={candidate}")
    if args.stable_version is not None:
        if stable.version and stable.version != str(args.stable_version):
            raise GptTritonError(f"stable deployment {stable.name} pins version {stable.version}, not "
                                 f"--stable-version {args.stable_version}")
        return int(args.stable_version), candidate
    if not stable.version.isdigit():
        raise GptTritonError(f"stable deployment {stable.name} pins no fixed version (the newest at pod start): "
                             "pass --stable-version")
    if int(stable.version) == candidate:
        raise GptTritonError(f"stable deployment {stable.name} already pins version {candidate}: nothing to canary")
    return int(stable.version), candidate


def run_k8s(args: argparse.Namespace, policy: CanaryPolicy, interval: float) -> int:
    """The canary on Kubernetes; returns the exit code (0 promoted, 1 rolled back, 3 halted)."""
    stable_name, canary_name = _deployment_names(args.k8s_deployments)
    if args.total_replicas is not None and args.total_replicas < 1:
        raise GptTritonError("--total-replicas must be at least 1")
    wait_s = parse_duration(args.rollout_timeout)
    # Read-only checks first: a missing Deployment or a forbidden namespace fails before anything changes.
    namespace = args.namespace or DEFAULT_NAMESPACE
    kube = KubeClient(load_api_client(args.kube_server, args.kubeconfig, args.kube_context), namespace)
    stable, canary = inspect_deployment(kube, stable_name), inspect_deployment(kube, canary_name)
    stable_version, candidate = _versions(args, stable, canary)
    prometheus = PrometheusClient(args.prometheus)
    if not prometheus.ready():
        raise GptTritonError(f"Prometheus at {prometheus.url} is not ready; check --prometheus")

    restore = stable.replicas or args.total_replicas or stable.replicas + canary.replicas
    if restore < 1:
        raise GptTritonError(f"deployments {stable_name} and {canary_name} have 0 replicas: pass --total-replicas")
    shifter = DeploymentReplicaShifter(kube, stable_name, canary_name, total_replicas=args.total_replicas,
                                       wait_s=wait_s, poll_s=args.kube_poll)
    versions = KubernetesVersions(kube, stable, canary, stable_version=stable_version, candidate_version=candidate,
                                  restore_replicas=restore, wait_s=wait_s, poll_s=args.kube_poll)
    gates = PromQLGates(
        prometheus, model=args.model, stable=str(stable_version), candidate=str(candidate),
        window_s=window_from_args(args, interval), selector=args.selector, namespace=namespace,
        config=gate_config_from_args(args),
    )
    log_path = Path(args.log) if args.log else Path("runs/canary") / f"{args.model}-v{candidate}-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
    log = DecisionLog(log_path)
    log.record("kubernetes", namespace=namespace, stable_deployment=stable_name, canary_deployment=canary_name,
               stable_replicas=stable.replicas, canary_replicas=canary.replicas, total_replicas=args.total_replicas)
    controller = CanaryController(
        model=args.model, stable=stable_version, candidate=candidate, shifter=shifter, versions=versions, gates=gates,
        policy=policy, log=log, metrics=CanaryMetrics(args.model, str(stable_version), str(candidate),
                                                      pushgateway=args.pushgateway, namespace=namespace),
    )
    result = controller.run()
    if result.outcome == "promoted":
        where = (f"{stable_name} now pins version {candidate} ({restore} replicas), {canary_name} scaled to 0; "
                 f"set stable.version={candidate} in the Helm values so the next upgrade keeps it")
    else:
        where = f"{stable_name} keeps version {stable_version} ({restore} replicas), {canary_name} scaled to 0"
    log.console.print(f"[bold]canary {result.outcome}[/bold]: {where}; {result.failed_checks} failed of "
                      f"{result.checks} checks; log {log.path}")
    return EXIT_CODES[result.outcome]
