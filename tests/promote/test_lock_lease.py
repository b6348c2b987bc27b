"""The promotion lock as a coordination.k8s.io Lease, against the fake API server (no API server runs here).

The fake is faithful where the lock depends on it: a create that meets an existing Lease is 409
AlreadyExists, an update naming a stale resourceVersion is 409 Conflict."""

from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from k8s.fake_apiserver import FakeKubernetesApiServer

from gpt_triton.core.errors import GptTritonError, TransientError
from gpt_triton.k8s.client import load_api_client
from gpt_triton.promote.lock import LeaseLock, lease_name, promotion_lock

NS = "gpt-triton"


def _lock(fake: FakeKubernetesApiServer, holder: str, name: str = "promote-m", duration_s: int = 60) -> LeaseLock:
    return LeaseLock(load_api_client(fake.url), NS, name, holder=holder, duration_s=duration_s)


def _holder(fake: FakeKubernetesApiServer, name: str = "promote-m") -> str | None:
    lease = fake.get("leases", NS, name)
    assert lease is not None
    return (lease.get("spec") or {}).get("holderIdentity")


def test_one_holder_at_a_time(fake_api: FakeKubernetesApiServer) -> None:
    first, second = _lock(fake_api, "pod-a"), _lock(fake_api, "pod-b")
    first.acquire(wait_s=1.0)
    assert _holder(fake_api) == "pod-a"
    with pytest.raises(TransientError, match="held by pod-a"):
        second.acquire(wait_s=0.2)
    first.release()
    assert _holder(fake_api) is None
    second.acquire(wait_s=1.0)
    assert _holder(fake_api) == "pod-b"
    lease = fake_api.get("leases", NS, "promote-m")
    assert lease is not None and lease["spec"]["leaseTransitions"] == 1
    second.release()


def test_expired_holder_is_taken_over(fake_api: FakeKubernetesApiServer) -> None:
    """A holder that died stops renewing; once its lease has expired the next promotion takes it."""
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=120)
    fake_api.put("leases", {"metadata": {"name": "promote-m", "namespace": NS},
                            "spec": {"holderIdentity": "dead-pod", "leaseDurationSeconds": 60,
                                     "renewTime": old.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}})
    taker = _lock(fake_api, "pod-b")
    taker.acquire(wait_s=0.5)
    assert _holder(fake_api) == "pod-b"
    taker.release()


def test_create_race_is_retried(fake_api: FakeKubernetesApiServer) -> None:
    """Another pod created the Lease between our read (404) and our create: 409, look again, then take it."""
    fake_api.fail("POST", "leases", 409, message='leases.coordination.k8s.io "promote-m" already exists')
    lock = _lock(fake_api, "pod-a")
    lock.acquire(wait_s=2.0)
    assert _holder(fake_api) == "pod-a"
    assert sum(1 for method, path in fake_api.requests if method == "POST" and "/leases" in path) == 2
    lock.release()


def test_fake_refuses_stale_updates(fake_api: FakeKubernetesApiServer) -> None:
    """The optimistic concurrency the lock relies on: a create of an existing name and an update from a
    stale read are both 409."""
    lock = _lock(fake_api, "pod-a")
    lock.acquire(wait_s=1.0)
    stale = fake_api.get("leases", NS, "promote-m")
    assert stale is not None
    fake_api.put("leases", {**stale, "spec": {**stale["spec"], "holderIdentity": "intruder"}})  # a newer version
    url = f"{fake_api.url}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    for method, target, body in (("POST", url, stale), ("PUT", f"{url}/promote-m", stale)):
        request = urllib.request.Request(target, data=json.dumps(body).encode(), method=method,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 409
    # Our release is refused too (it is no longer ours to clear): a warning, and the intruder keeps it.
    lock.release()
    assert _holder(fake_api) == "intruder"


def test_forbidden_is_one_clear_line(fake_api: FakeKubernetesApiServer) -> None:
    fake_api.fail("GET", "leases", 403, message="cannot get leases")
    with pytest.raises(GptTritonError, match="forbidden .* grant create/get/update on leases"):
        _lock(fake_api, "pod-a").acquire(wait_s=1.0)


def test_promotion_lock_takes_the_lease_from_the_environment(fake_api: FakeKubernetesApiServer, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": fake_api.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": NS}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("GPT_TRITON_PROMOTION_LOCK", "lease")
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    model_dir = tmp_path / "repository" / NS / "NVIDIA-L4" / "resnet50"
    model_dir.mkdir(parents=True)
    name = lease_name(model_dir)
    assert name.startswith("gpt-triton-promote-resnet50-") and len(name) <= 63
    with promotion_lock(model_dir, "resnet50", wait_s=1.0):
        assert (_holder(fake_api, name) or "").strip()
        with pytest.raises(TransientError, match="promotion lease"), promotion_lock(model_dir, "resnet50", wait_s=0.2):
            pass
    assert _holder(fake_api, name) is None
    monkeypatch.setenv("GPT_TRITON_PROMOTION_LOCK", "etcd")
    with pytest.raises(GptTritonError, match="use file or lease"), promotion_lock(model_dir, "resnet50"):
        pass
