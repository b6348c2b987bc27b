"""FakeKubernetesApiServer: the few Kubernetes API paths `gpt-triton k8s` uses, on an ephemeral loopback port.

No API server can run here, so this stands in for one. It keeps objects as dicts with resourceVersions,
records a watch event log, and can inject what real clusters do to clients: 403, 409, a watch that breaks
mid-stream (cleanly or abruptly), a 410 Gone watch, and Jobs that complete or fail as a watch follows them.

Paths: jobs (POST, GET, list with fieldSelector/labelSelector, ?watch=true JSON lines), configmaps (POST,
GET), pods (list with labelSelector), pods/{name}/log, deployments (GET, PATCH), deployments/{name}/scale
(GET, PATCH, PUT), coordination.k8s.io leases (POST, GET, PUT).

Faithful where clients depend on it: a create of an existing name is 409 AlreadyExists; an update (PUT)
whose metadata.resourceVersion is not the stored one is 409 Conflict, as the API server's optimistic
concurrency answers; an update of a missing object is 404.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_ROUTES = [
    ("jobs", re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs(?:/(?P<name>[^/]+))?$")),
    ("configmaps", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps(?:/(?P<name>[^/]+))?$")),
    ("podlog", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")),
    ("pods", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+))?$")),
    ("scale", re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments/(?P<name>[^/]+)/scale$")),
    ("deployments", re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments(?:/(?P<name>[^/]+))?$")),
    ("leases", re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$")),
]
_KINDS = {"jobs": ("batch/v1", "Job"), "configmaps": ("v1", "ConfigMap"), "pods": ("v1", "Pod"),
          "deployments": ("apps/v1", "Deployment"), "leases": ("coordination.k8s.io/v1", "Lease")}


@dataclass
class _Failure:
    method: str
    resource: str
    code: int
    times: int
    message: str


def _status(code: int, message: str, reason: str | None = None) -> dict[str, Any]:
    reasons = {403: "Forbidden", 404: "NotFound", 409: "AlreadyExists", 410: "Expired", 422: "Invalid"}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason or reasons.get(code, "InternalError"), "code": code}


def _matches(obj: dict[str, Any], field_selector: str | None, label_selector: str | None) -> bool:
    meta = obj.get("metadata") or {}
    if field_selector:
        key, _, value = field_selector.partition("=")
        if key != "metadata.name" or meta.get("name") != value:
            return False
    if label_selector:
        labels = meta.get("labels") or {}
        for term in label_selector.split(","):
            key, _, value = term.partition("=")
            if labels.get(key) != value:
                return False
    return True


class FakeKubernetesApiServer:
    """Start with ``with FakeKubernetesApiServer() as fake:``; point clients at ``fake.url``."""

    def __init__(self, namespaces: tuple[str, ...] = ("gpt-triton", "default")) -> None:
        self.namespaces = set(namespaces)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (resource, ns, name) -> object
        self.logs: dict[tuple[str, str, str], str] = {}  # (ns, pod, container) -> text
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, resource, type, object)
        self.requests: list[tuple[str, str]] = []  # (method, path?query)
        self.patches: list[tuple[str, dict[str, Any], str]] = []  # (deployment, body, content type)
        self.scale_requests: list[tuple[str, str]] = []  # (method, deployment) on deployments/{name}/scale
        self.watch_connections = 0
        # Deployments converge at once on PATCH (status.replicas/readyReplicas); False: they never do.
        self.deployments_converge = True
        self._rv = itertools.count(100)
        self._failures: list[_Failure] = []
        self._job_scripts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._disconnects: list[tuple[int, bool]] = []  # (events before closing, abrupt)
        self._expire_next_watch = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = str(self._server.server_address[0]), int(self._server.server_address[1])
        return f"http://{host}:{port}"

    def start(self) -> FakeKubernetesApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeKubernetesApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test controls ------------------------------------------------------------------------------
    def fail(self, method: str, resource: str, code: int, times: int = 1, message: str = "injected failure") -> None:
        """The next ``times`` requests of ``method`` on ``resource`` (jobs, configmaps, pods, podlog,
        deployments) answer ``code`` with a Status body."""
        with self._cond:
            self._failures.append(_Failure(method, resource, code, times, message))

    def disconnect_watch(self, after_events: int, abrupt: bool = False) -> None:
        """The next watch stream closes after ``after_events`` events; abrupt = a broken chunked body."""
        with self._cond:
            self._disconnects.append((after_events, abrupt))

    def expire_next_watch(self) -> None:
        """The next watch answers an ERROR event with a 410 Gone Status, as after etcd compaction."""
        with self._cond:
            self._expire_next_watch += 1

    def script_job(self, namespace: str, name: str, statuses: list[dict[str, Any]]) -> None:
        """Job status updates applied one per watch event while a watch follows the Job."""
        with self._cond:
            self._job_scripts[(namespace, name)] = list(statuses)

    def put(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an object as the cluster would (uid, resourceVersion, creationTimestamp); records an event."""
        with self._cond:
            return self._store(resource, obj, "ADDED")

    def add_pod(self, namespace: str, name: str, job: str, phase: str, index: int | None = None,
                logs: dict[str, str] | None = None, created: str = "2026-01-01T00:00:00Z") -> None:
        annotations = {} if index is None else {"batch.kubernetes.io/job-completion-index": str(index)}
        self.put("pods", {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created,
                                       "labels": {"batch.kubernetes.io/job-name": job, "job-name": job},
                                       "annotations": annotations},
                          "status": {"phase": phase}})
        for container, text in (logs or {}).items():
            self.logs[(namespace, name, container)] = text

    def set_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        with self._cond:
            self._set_job_status(namespace, name, status)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._cond:
            return self.objects.get((resource, namespace, name))

    # -- internals (called with the lock held) ------------------------------------------------------
    def _store(self, resource: str, obj: dict[str, Any], event: str) -> dict[str, Any]:
        obj = json.loads(json.dumps(obj))
        api_version, kind = _KINDS[resource]
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        rv = next(self._rv)
        meta["resourceVersion"] = str(rv)
        self.objects[(resource, meta["namespace"], meta["name"])] = obj
        self.events.append((rv, resource, event, obj))
        self._cond.notify_all()
        return obj

    def _set_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        job = json.loads(json.dumps(self.objects[("jobs", namespace, name)]))
        job["status"] = status
        self._store("jobs", job, "MODIFIED")

    def _take_failure(self, method: str, resource: str) -> _Failure | None:
        for failure in self._failures:
            if failure.method == method and failure.resource == resource and failure.times > 0:
                failure.times -= 1
                return failure
        return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

            def do_GET(self) -> None:
                fake._dispatch(self, "GET")

            def do_POST(self) -> None:
                fake._dispatch(self, "POST")

            def do_PATCH(self) -> None:
                fake._dispatch(self, "PATCH")

            def do_PUT(self) -> None:
                fake._dispatch(self, "PUT")

        return Handler

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(data)
        h.close_connection = True

    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urlparse(h.path)
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        with self._cond:
            self.requests.append((method, h.path))
        routed = [(r, m) for r, pattern in _ROUTES if (m := pattern.match(parsed.path))]
        if not routed:
            self._send(h, 404, _status(404, f"the server could not find the requested resource {parsed.path}"))
            return
        resource, match = routed[0]
        ns, name = match.group("ns"), match.group("name")
        with self._cond:
            failure = self._take_failure(method, resource)
        if failure is not None:
            self._send(h, failure.code, _status(failure.code, failure.message))
            return
        if ns not in self.namespaces:
            self._send(h, 404, _status(404, f'namespaces "{ns}" not found'))
            return
        if resource == "jobs" and method == "GET" and name is None and query.get("watch") == "true":
            self._watch_jobs(h, ns, query)
            return
        body = json.loads(raw) if raw else {}
        with self._cond:
            code, out = self._handle(method, resource, ns, name, query, body, h.headers.get("Content-Type", ""))
        if resource == "podlog" and code == 200:
            self._send(h, 200, out, "text/plain")
        else:
            self._send(h, code, out)

    def _scale(self, deployment: dict[str, Any]) -> dict[str, Any]:
        meta = deployment["metadata"]
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                             "resourceVersion": meta["resourceVersion"]},
                "spec": {"replicas": (deployment.get("spec") or {}).get("replicas", 0)},
                "status": {"replicas": (deployment.get("status") or {}).get("replicas", 0)}}

    def _patch_replicas(self, name: str, obj: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        updated = json.loads(json.dumps(obj))
        updated.setdefault("spec", {}).update(spec)
        if self.deployments_converge:
            replicas = updated["spec"].get("replicas", 0)
            updated["status"] = {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}
        return self._store("deployments", updated, "MODIFIED")

    def _handle(self, method: str, resource: str, ns: str, name: str | None, query: dict[str, str],
                body: dict[str, Any], content_type: str) -> tuple[int, Any]:
        if resource == "scale":
            deployment = self.objects.get(("deployments", ns, name or ""))
            if deployment is None:
                return 404, _status(404, f'deployments.apps "{name}" not found')
            if method == "GET":
                return 200, self._scale(deployment)
            if method in ("PATCH", "PUT"):
                sent_rv = (body.get("metadata") or {}).get("resourceVersion")
                if method == "PUT" and sent_rv and sent_rv != deployment["metadata"]["resourceVersion"]:
                    return 409, _status(409, "the object has been modified; please apply your changes to the "
                                        "latest version and try again", "Conflict")
                self.patches.append((name or "", body, content_type))
                self.scale_requests.append((method, name or ""))
                return 200, self._scale(self._patch_replicas(name or "", deployment, body.get("spec") or {}))
            return 405, _status(405, f"{method} not supported on deployments/scale by the fake")
        if resource == "podlog":
            container = query.get("container", "")
            if ("pods", ns, name or "") not in self.objects:
                return 404, _status(404, f'pods "{name}" not found')
            return 200, self.logs.get((ns, name or "", container), "")
        if method == "POST" and name is None:
            obj_name = (body.get("metadata") or {}).get("name", "")
            if (resource, ns, obj_name) in self.objects:
                return 409, _status(409, f'{resource} "{obj_name}" already exists')
            body.setdefault("metadata", {})["namespace"] = ns
            return 201, self._store(resource, body, "ADDED")
        if method == "GET" and name is None:
            items = [o for (r, n, _), o in self.objects.items() if r == resource and n == ns
                     and _matches(o, query.get("fieldSelector"), query.get("labelSelector"))]
            api_version, kind = _KINDS[resource]
            return 200, {"apiVersion": api_version, "kind": f"{kind}List",
                         "metadata": {"resourceVersion": str(self._current_rv())}, "items": items}
        obj = self.objects.get((resource, ns, name or ""))
        if obj is None:
            return 404, _status(404, f'{resource} "{name}" not found')
        if method == "GET":
            return 200, obj
        if method == "PATCH" and resource == "deployments":
            self.patches.append((name or "", body, content_type))
            return 200, self._patch_replicas(name or "", obj, body.get("spec") or {})
        if method == "PUT" and resource == "leases":
            # Optimistic concurrency: an update names the version it read; a stale one is refused.
            sent_rv = (body.get("metadata") or {}).get("resourceVersion")
            if sent_rv != obj["metadata"]["resourceVersion"]:
                return 409, _status(409, f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the '
                                    "object has been modified; please apply your changes to the latest version and "
                                    "try again", "Conflict")
            body.setdefault("metadata", {}).update(namespace=ns, name=name, uid=obj["metadata"]["uid"],
                                                   creationTimestamp=obj["metadata"]["creationTimestamp"])
            return 200, self._store(resource, body, "MODIFIED")
        return 405, _status(405, f"{method} not supported on {resource} by the fake")

    def _current_rv(self) -> int:
        return self.events[-1][0] if self.events else 0

    def _watch_jobs(self, h: BaseHTTPRequestHandler, ns: str, query: dict[str, str]) -> None:
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 30)
        field = query.get("fieldSelector")
        with self._cond:
            self.watch_connections += 1
            expire = self._expire_next_watch > 0
            self._expire_next_watch -= 1 if expire else 0
            cut = self._disconnects.pop(0) if self._disconnects else None
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.close_connection = True

        def chunk(event: dict[str, Any]) -> None:
            data = (json.dumps(event) + "\n").encode()
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        if expire:
            chunk({"type": "ERROR", "object": _status(410, "too old resource version")})
            h.wfile.write(b"0\r\n\r\n")
            return
        sent = 0
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                pending = [(rv, t, o) for rv, r, t, o in self.events
                           if r == "jobs" and rv > since and (o.get("metadata") or {}).get("namespace") == ns
                           and _matches(o, field, None)]
                if not pending:
                    name = (field or "").partition("=")[2]
                    script = self._job_scripts.get((ns, name))
                    if script:
                        # The Job moves on only while someone watches it: deterministic for the test.
                        self._set_job_status(ns, name, script.pop(0))
                        continue
                    if self._stopped or time.monotonic() >= deadline:
                        break
                    self._cond.wait(timeout=0.05)
                    continue
            for rv, event_type, obj in pending:
                if cut is not None and sent >= cut[0]:
                    if not cut[1]:
                        h.wfile.write(b"0\r\n\r\n")  # clean end of stream
                    return  # abrupt: the chunked body is never terminated
                chunk({"type": event_type, "object": obj})
                since = rv
                sent += 1
        h.wfile.write(b"0\r\n\r\n")
