"""One promotion per model at a time.

On one machine, or on a volume whose filesystem honours locks (local disks, NFSv4): an advisory ``flock``
on ``<model_dir>/.gpt-triton.lock``. flock is released by the kernel when the holder dies, so a crashed
promotion never leaves a stale lock. The lock file is never deleted: unlinking it while another process
waits would let two holders lock two different inodes.

On a cluster (``GPT_TRITON_PROMOTION_LOCK=lease``): also a ``coordination.k8s.io`` Lease per model
directory, taken with the official kubernetes client and optimistic concurrency (a create that meets an
existing Lease is 409; an update names the resourceVersion it read, and a stale one is 409), renewed while
held, released at the end; a holder that died is taken over once its lease has expired.

A second promotion waits for the first (logged, bounded by ``wait_s``), then raises
:class:`TransientError` (exit 3: the Job retries it) naming the holder.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError, TransientError

LOCK_FILE = ".gpt-triton.lock"
LOCK_ENV = "GPT_TRITON_PROMOTION_LOCK"  # "lease": also take a Kubernetes Lease
WAIT_ENV = "GPT_TRITON_LOCK_WAIT_S"
DEFAULT_WAIT_S = 900.0  # a promotion copies and fsyncs an engine: minutes at most
LEASE_DURATION_S = 60
_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_log = logging.getLogger(__name__)


def default_wait_s() -> float:
    raw = os.environ.get(WAIT_ENV)
    if not raw:
        return DEFAULT_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        raise GptTritonError(f"${WAIT_ENV}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise GptTritonError(f"${WAIT_ENV}={raw!r} must not be negative")
    return value


class _Waiter:
    """Polls a lock until ``deadline``: logs when the wait starts and every ``log_every_s``; backs off to 0.5 s."""

    def __init__(self, what: str, wait_s: float, log_every_s: float = 30.0) -> None:
        self.what, self.wait_s, self.log_every_s = what, wait_s, log_every_s
        self.start = time.monotonic()
        self.deadline = self.start + wait_s
        self.next_log = self.start
        self.interval = 0.05

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def pause(self, holder: str) -> None:
        now = time.monotonic()
        if now >= self.next_log:
            _log.warning("waiting for %s held by %s (%.0f s of at most %.0f s)", self.what, holder,
                         now - self.start, self.wait_s)
            self.next_log = now + self.log_every_s
        time.sleep(min(self.interval, max(0.0, self.deadline - now)))  # the poll interval of the wait itself
        self.interval = min(self.interval * 2, 0.5)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "unknown"


@contextmanager
def _file_lock(path: Path, name: str, wait_s: float) -> Iterator[Path]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise GptTritonError(f"cannot create lock file {path}: {exc.strerror or exc}; check the repository is writable") from exc
    try:
        waiter = _Waiter(f"the promotion lock of {name} ({path})", wait_s)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if waiter.expired():
                    raise TransientError(
                        f"another promotion into {name} is in progress (pid {_holder(fd)}); waited {wait_s:.0f} s: "
                        f"retry when it has finished (the lock is {path}, ${WAIT_ENV} sets the wait)"
                    ) from None
                waiter.pause(f"pid {_holder(fd)}")
        # Record the holder for the messages above; readers tolerate a partial write.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# -- the Kubernetes Lease -----------------------------------------------------------------------------------

def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _micro_time(moment: datetime.datetime) -> str:
    """The API's MicroTime format (RFC 3339 with microseconds, UTC)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def lease_name(model_dir: Path) -> str:
    """One Lease per model directory (its repository is keyed by namespace and GPU product): a DNS name."""
    model = re.sub(r"[^a-z0-9-]+", "-", Path(model_dir).name.lower()).strip("-")[:30].strip("-") or "model"
    digest = hashlib.sha256(str(Path(model_dir).resolve()).encode()).hexdigest()[:10]
    return f"gpt-triton-promote-{model}-{digest}"


class LeaseLock:
    """A ``coordination.k8s.io/v1`` Lease as a mutual-exclusion lock (the pattern of client-go's leader
    election): free when it has no holder or its holder stopped renewing for ``leaseDurationSeconds``."""

    def __init__(self, api_client: Any, namespace: str, name: str, holder: str | None = None,
                 duration_s: int = LEASE_DURATION_S) -> None:
        from kubernetes import client as k8s

        self.api = k8s.CoordinationV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.holder = holder or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.duration_s = duration_s
        self._lease: dict[str, Any] | None = None  # as last written by us
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._guard = threading.Lock()

    # -- API calls (dicts in and out, like gpt_triton.k8s.client) ----------------------------------------
    def _request(self, fn: Any, *args: Any) -> dict[str, Any]:
        resp = fn(*args, _preload_content=False, _request_timeout=(5.0, 30.0))
        return dict(json.loads(resp.data))

    def _read(self) -> dict[str, Any] | None:
        from kubernetes.client.rest import ApiException

        try:
            return self._request(self.api.read_namespaced_lease, self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _spec(self, acquired: datetime.datetime, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.duration_s,
                "acquireTime": _micro_time(acquired), "renewTime": _micro_time(_now()),
                "leaseTransitions": transitions}

    def _free(self, lease: dict[str, Any]) -> bool:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        if not holder or holder == self.holder:
            return True
        renewed = _parse_time(spec.get("renewTime")) or _parse_time(spec.get("acquireTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.duration_s)
        return renewed is None or _now() > renewed + datetime.timedelta(seconds=duration)

    def _try_acquire(self) -> str | None:
        """None when acquired, else who holds it."""
        from kubernetes.client.rest import ApiException

        lease = self._read()
        try:
            if lease is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace,
                                     "labels": {"app.kubernetes.io/part-of": "gpt-triton"}},
                        "spec": self._spec(_now(), 0)}
                self._lease = self._request(self.api.create_namespaced_lease, self.namespace, body)
                return None
            if not self._free(lease):
                return str((lease.get("spec") or {}).get("holderIdentity"))
            spec = lease.get("spec") or {}
            transitions = int(spec.get("leaseTransitions") or 0) + (spec.get("holderIdentity") != self.holder)
            lease["spec"] = self._spec(_now(), transitions)  # metadata keeps the resourceVersion we read
            self._lease = self._request(self.api.replace_namespaced_lease, self.name, self.namespace, lease)
            return None
        except ApiException as exc:
            if exc.status == 409:  # someone created or took it between our read and write: look again
                return "another holder (conflict)"
            raise

    def _renew_loop(self) -> None:
        from kubernetes.client.rest import ApiException

        while not self._stop.wait(self.duration_s / 3):
            with self._guard:
                lease = self._lease
                if lease is None:
                    return
                lease = json.loads(json.dumps(lease))
                lease["spec"]["renewTime"] = _micro_time(_now())
                try:
                    self._lease = self._request(self.api.replace_namespaced_lease, self.name, self.namespace, lease)
                except (ApiException, OSError) as exc:  # the next renewal may pass; expiry is what others see
                    _log.warning("could not renew the promotion lease %s/%s: %s", self.namespace, self.name, exc)

    # -- the lock ----------------------------------------------------------------------------------------
    def acquire(self, wait_s: float) -> None:
        from kubernetes.client.rest import ApiException

        waiter = _Waiter(f"the promotion lease {self.namespace}/{self.name}", wait_s)
        try:
            while (holder := self._try_acquire()) is not None:
                if waiter.expired():
                    raise TransientError(
                        f"the promotion lease {self.namespace}/{self.name} is held by {holder}; waited {wait_s:.0f} s: "
                        f"retry when that promotion has finished (${WAIT_ENV} sets the wait)")
                waiter.pause(holder)
        except ApiException as exc:
            verb = "forbidden" if exc.status == 403 else f"API error {exc.status}"
            raise GptTritonError(
                f"cannot take the promotion lease {self.namespace}/{self.name}: {verb} ({exc.reason}); grant "
                "create/get/update on leases.coordination.k8s.io (the chart's tuner.promotionLock=lease does)"
            ) from exc
        except OSError as exc:
            raise TransientError(f"cannot reach the Kubernetes API for the promotion lease: {exc}") from exc
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="lease-renew", daemon=True)
        self._renewer.start()

    def release(self) -> None:
        """Give the Lease up (holder cleared) if it is still ours; a failure only delays the next holder
        until the lease expires."""
        from kubernetes.client.rest import ApiException

        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=10)
        with self._guard:
            lease, self._lease = self._lease, None
        if lease is None:
            return
        lease["spec"]["holderIdentity"] = None
        lease["spec"]["renewTime"] = _micro_time(_now())
        try:
            self._request(self.api.replace_namespaced_lease, self.name, self.namespace, lease)
        except (ApiException, OSError) as exc:
            _log.warning("could not release the promotion lease %s/%s (%s): it frees itself after %d s",
                         self.namespace, self.name, exc, self.duration_s)


def _lease_namespace() -> str:
    """The pod's namespace (downward API), else the kubeconfig context's, else the account's, else default."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        from kubernetes import config as k8s_config

        _contexts, active = k8s_config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG"))
        namespace = (active or {}).get("context", {}).get("namespace")
        if namespace:
            return str(namespace)
    except Exception:  # no kubeconfig: in a pod
        pass
    try:
        return _SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def lease_from_environment(model_dir: Path) -> LeaseLock | None:
    """The Lease to take when ``GPT_TRITON_PROMOTION_LOCK=lease`` (KUBECONFIG, else the pod's account)."""
    mode = os.environ.get(LOCK_ENV, "file")
    if mode == "file":
        return None
    if mode != "lease":
        raise GptTritonError(f"${LOCK_ENV}={mode!r}: use file or lease")
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    cfg = k8s.Configuration()
    try:
        # The file named now (the client reads $KUBECONFIG once, at import).
        k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=cfg)
    except (ConfigException, FileNotFoundError, TypeError):
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except ConfigException as exc:
            raise GptTritonError(f"${LOCK_ENV}=lease but there is no Kubernetes configuration ({exc}): mount the "
                                 "ServiceAccount token (automountServiceAccountToken) or set KUBECONFIG") from exc
    cfg.retries = 1
    return LeaseLock(k8s.ApiClient(cfg), _lease_namespace(), lease_name(model_dir))


@contextmanager
def promotion_lock(model_dir: Path, model_name: str | None = None, wait_s: float | None = None,
                   lease: LeaseLock | None = None) -> Iterator[Path]:
    """Hold the model's promotion lock for the ``with`` body; yields the lock file's path.

    Takes ``lease`` (default: :func:`lease_from_environment`) first, then the file lock. Waits up to
    ``wait_s`` for each (default ``$GPT_TRITON_LOCK_WAIT_S`` or 15 minutes), logging while it waits, then
    raises :class:`TransientError` naming the holder.
    """
    model_dir = Path(model_dir)
    name = model_name or model_dir.name
    wait = default_wait_s() if wait_s is None else wait_s
    lease = lease if lease is not None else lease_from_environment(model_dir)
    with ExitStack() as stack:
        if lease is not None:
            lease.acquire(wait)
            stack.callback(lease.release)
        yield stack.enter_context(_file_lock(model_dir / LOCK_FILE, name, wait))
