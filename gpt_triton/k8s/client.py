"""A thin layer over the official ``kubernetes`` client: configuration, one-line errors, a resumable Job watch.

Objects travel as plain dicts (``_preload_content=False`` + JSON) so that rendered manifests, the fake API
server in the tests and a real cluster all speak the same shapes, and fields newer than the client's
models (podFailurePolicy rules, backoffLimitPerIndex, native sidecars) are never dropped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from gpt_triton.core.errors import GptTritonError

JobState = Literal["running", "complete", "failed"]
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)


def load_api_client(server: str | None = None, kubeconfig: str | None = None, context: str | None = None,
                    token: str | None = None) -> k8s.ApiClient:
    """``--server`` (tests, proxies) wins; then KUBECONFIG / ~/.kube/config; then the in-cluster account."""
    cfg = k8s.Configuration()
    if server:
        cfg.host = server.rstrip("/")
        if token:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
    else:
        try:
            k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        except (ConfigException, FileNotFoundError, TypeError) as kube_exc:
            try:
                k8s_config.load_incluster_config(client_configuration=cfg)
            except ConfigException:
                raise GptTritonError(
                    f"no Kubernetes configuration ({kube_exc}): set KUBECONFIG, run inside a pod with a "
                    "ServiceAccount, or pass --server URL"
                ) from kube_exc
    # One quick retry: an unreachable server must fail in seconds, not minutes.
    cfg.retries = 1
    return k8s.ApiClient(cfg)


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason or "")
    except (ValueError, TypeError):
        return str(exc.reason or "")


def api_error(exc: Exception, action: str, host: str = "", not_found_hint: str = "",
              conflict_hint: str = "") -> GptTritonError:
    """The one-line error for a failed API call: what failed, why, and what to do."""
    if isinstance(exc, ApiException):
        msg = _status_message(exc)
        if exc.status == 401:
            return GptTritonError(f"unauthorized while {action}: {msg}; refresh your credentials (kubeconfig token/certificate)")
        if exc.status == 403:
            return GptTritonError(
                f"forbidden while {action}: {msg}; bind the Role from k8s/rbac.yaml (or the chart's) to your user "
                "or ServiceAccount and check with `kubectl auth can-i`"
            )
        if exc.status == 404:
            return GptTritonError(f"not found while {action}: {msg}; {not_found_hint or 'check --namespace and the name'}")
        if exc.status == 409:
            return GptTritonError(f"conflict while {action}: {msg}; {conflict_hint or 'delete the existing object or pick another --name'}")
        if exc.status == 422:
            return GptTritonError(f"the API server rejected the object while {action}: {msg}; fix the flags or manifest it names")
        return GptTritonError(f"Kubernetes API error {exc.status} ({exc.reason}) while {action}: {msg}")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return GptTritonError(
            f"cannot reach the Kubernetes API at {host or 'the configured server'} while {action} ({type(exc).__name__}); "
            "check KUBECONFIG/--server and that the cluster is up"
        )
    return GptTritonError(f"{type(exc).__name__} while {action}: {exc}")


def job_state(job: dict[str, Any]) -> JobState:
    """Complete/Failed are the terminal conditions (SuccessCriteriaMet/FailureTarget precede them)."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "complete" if cond["type"] == "Complete" else "failed"
    return "running"


def _failed_reason(job: dict[str, Any]) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    return ""


class KubeClient:
    """The calls `gpt-triton k8s` and the replica shifter make, with errors turned into GptTritonError."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.batch = k8s.BatchV1Api(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def _call(self, action: str, fn: Callable[..., Any], *args: Any, not_found_hint: str = "",
              conflict_hint: str = "", **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        try:
            resp = fn(*args, _preload_content=False, **kwargs)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise api_error(exc, action, self.host, not_found_hint, conflict_hint) from exc
        data = resp.data
        return json.loads(data) if data else {}

    # -- create -------------------------------------------------------------------------------------
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind, name = obj["kind"], obj["metadata"]["name"]
        action = f"creating {kind} {self.namespace}/{name}"
        hint = f"it already exists: `kubectl delete {kind.lower()} {name} -n {self.namespace}` or pass another --name"
        if kind == "Job":
            return dict(self._call(action, self.batch.create_namespaced_job, self.namespace, obj, conflict_hint=hint,
                                   not_found_hint=f"create the namespace first: kubectl create namespace {self.namespace}"))
        if kind == "ConfigMap":
            return dict(self._call(action, self.core.create_namespaced_config_map, self.namespace, obj,
                                   conflict_hint=hint,
                                   not_found_hint=f"create the namespace first: kubectl create namespace {self.namespace}"))
        raise GptTritonError(f"cannot create kind {kind}: only Job and ConfigMap are submitted by gpt-triton")

    # -- jobs ---------------------------------------------------------------------------------------
    def get_job(self, name: str) -> dict[str, Any]:
        return dict(self._call(f"reading job {self.namespace}/{name}", self.batch.read_namespaced_job, name,
                               self.namespace, not_found_hint=f"no such job; list them with `kubectl get jobs -n {self.namespace}`"))

    def _list_job(self, name: str) -> tuple[dict[str, Any] | None, str]:
        out = self._call(f"listing job {self.namespace}/{name}", self.batch.list_namespaced_job, self.namespace,
                         field_selector=f"metadata.name={name}")
        items = out.get("items") or []
        return (items[0] if items else None), str((out.get("metadata") or {}).get("resourceVersion", ""))

    def _watch_events(self, name: str, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        resp: Any = self.batch.list_namespaced_job(
            self.namespace, field_selector=f"metadata.name={name}", watch=True, resource_version=resource_version,
            allow_watch_bookmarks=True, timeout_seconds=timeout_s, _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], timeout_s + 30),
        )
        try:
            for line in iter_resp_lines(resp):
                if line.strip():
                    yield json.loads(line)
        finally:
            resp.release_conn()

    def watch_job(self, name: str, on_change: Callable[[dict[str, Any]], None], timeout_s: float | None = None,
                  max_reconnects: int = 20) -> dict[str, Any]:
        """Follow a Job until Complete or Failed; returns its final object.

        List, then watch from the list's resourceVersion. When the stream ends or breaks, re-list and resume
        from the newest version seen, so nothing is missed and a finished Job is noticed at once; a 410 Gone
        (version too old) also re-lists. ``on_change`` gets every new Job state.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        failures = 0
        while True:
            job, rv = self._list_job(name)
            if job is None:
                raise GptTritonError(f"job {self.namespace}/{name} not found; check --namespace and --name "
                                     f"(kubectl get jobs -n {self.namespace})")
            on_change(job)
            if job_state(job) != "running":
                return job
            remaining = 300 if deadline is None else int(deadline - time.monotonic())
            if remaining <= 0:
                raise GptTritonError(f"timed out watching job {self.namespace}/{name}; it is still running: "
                                     "watch again or raise --timeout")
            broken: Exception | None = None
            try:
                for event in self._watch_events(name, rv, max(1, min(remaining, 300))):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":  # 410 Gone (compacted) and friends: re-list
                        broken = GptTritonError(f"watch error {obj.get('code')}: {obj.get('message')}")
                        break
                    rv = str((obj.get("metadata") or {}).get("resourceVersion", rv))
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        raise GptTritonError(f"job {self.namespace}/{name} was deleted while being watched")
                    failures = 0
                    on_change(obj)
                    if job_state(obj) != "running":
                        return obj
            except ApiException as exc:
                if exc.status != 410:
                    raise api_error(exc, f"watching job {self.namespace}/{name}", self.host) from exc
                broken = exc
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                broken = exc
            if broken is not None:
                failures += 1
                if failures > max_reconnects:
                    raise api_error(broken, f"watching job {self.namespace}/{name}", self.host) from broken
                # Back off only after repeated breaks: the first re-list is immediate.
                time.sleep(min(2.0 ** (failures - 1) - 1, 10.0))

    def job_pods(self, name: str) -> list[dict[str, Any]]:
        out = self._call(f"listing pods of job {self.namespace}/{name}", self.core.list_namespaced_pod,
                         self.namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
        return list(out.get("items") or [])

    def pod_log(self, pod: str, container: str) -> str:
        try:
            resp: Any = self.core.read_namespaced_pod_log(pod, self.namespace, container=container,
                                                     _preload_content=False, _request_timeout=(5.0, 300.0))
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise api_error(exc, f"reading the log of pod {self.namespace}/{pod}", self.host,
                            not_found_hint="the pod is gone (ttlSecondsAfterFinished?); copy results from the PVC") from exc
        return bytes(resp.data).decode("utf-8", errors="replace")

    # -- deployments --------------------------------------------------------------------------------
    def deployment(self, name: str) -> dict[str, Any]:
        return dict(self._call(f"reading deployment {self.namespace}/{name}", self.apps.read_namespaced_deployment,
                               name, self.namespace,
                               not_found_hint="install the chart (helm install) or check the Deployment name"))

    def deployment_replicas(self, name: str) -> int:
        """The desired replicas, read through the scale subresource (what RBAC grants the canary)."""
        scale = self._call(f"reading the scale of deployment {self.namespace}/{name}",
                           self.apps.read_namespaced_deployment_scale, name, self.namespace,
                           not_found_hint="install the chart (helm install) or check the Deployment name")
        return int((scale.get("spec") or {}).get("replicas") or 0)

    def scale_deployment(self, name: str, replicas: int) -> None:
        """Set the replicas through ``deployments/scale``: the operator may scale, never change the pods."""
        self._call(f"scaling deployment {self.namespace}/{name} to {replicas}",
                   self.apps.patch_namespaced_deployment_scale, name, self.namespace, {"spec": {"replicas": replicas}},
                   not_found_hint="install the chart (helm install) or check the Deployment name")


def job_failed_reason(job: dict[str, Any]) -> str:
    return _failed_reason(job)
