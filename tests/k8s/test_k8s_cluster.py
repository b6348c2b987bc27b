"""Against a real cluster (only when KUBECONFIG is set): the API server accepts what we render.

Server-side dry run (dryRun=All) runs admission and validation, including native sidecars and
podFailurePolicy, without creating anything. Namespace: $GPT_TRITON_TEST_NAMESPACE or "default".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from gpt_triton.core.errors import TransientError
from gpt_triton.k8s.client import load_api_client
from gpt_triton.k8s.render import TuneJobParams, render_rbac, render_run
from gpt_triton.promote.lock import LeaseLock, lease_name

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG"),
]


@pytest.mark.parametrize("models", [("resnet50",), ("a", "b")], ids=["single", "indexed"])
def test_server_side_dry_run_accepts_rendered_objects(models: tuple[str, ...]) -> None:
    namespace = os.environ.get("GPT_TRITON_TEST_NAMESPACE", "default")
    api = load_api_client()
    configmap: Any
    job: Any
    configmap, job = render_run(TuneJobParams(models=models, namespace=namespace, name="gpt-triton-dry-run"),
                                "search: {mode: fast}\n")
    k8s.CoreV1Api(api).create_namespaced_config_map(namespace, configmap, dry_run="All")
    created = k8s.BatchV1Api(api).create_namespaced_job(namespace, job, dry_run="All", _preload_content=False)
    assert created.status == 201


def test_server_side_dry_run_accepts_rbac() -> None:
    namespace = os.environ.get("GPT_TRITON_TEST_NAMESPACE", "default")
    api = load_api_client()
    core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
    create: dict[str, Any] = {"ServiceAccount": core.create_namespaced_service_account,
                              "Role": rbac.create_namespaced_role, "RoleBinding": rbac.create_namespaced_role_binding}
    for obj in render_rbac(namespace, lease_for_tuner=True):
        assert create[obj["kind"]](namespace, obj, dry_run="All", _preload_content=False).status == 201


def test_promotion_lease_on_a_real_api_server(tmp_path: Path) -> None:
    """Two holders of the same Lease on the cluster: the second waits and is refused, then takes it."""
    namespace = os.environ.get("GPT_TRITON_TEST_NAMESPACE", "default")
    api = load_api_client()
    name = lease_name(tmp_path / "gpt-triton-cluster-test")
    first, second = LeaseLock(api, namespace, name, holder="test-a"), LeaseLock(api, namespace, name, holder="test-b")
    first.acquire(wait_s=30)
    try:
        with pytest.raises(TransientError, match="held by test-a"):
            second.acquire(wait_s=1)
    finally:
        first.release()
    second.acquire(wait_s=30)
    second.release()
    k8s.CoordinationV1Api(api).delete_namespaced_lease(name, namespace)
