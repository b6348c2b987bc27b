"""Against a real cluster (only when KUBECONFIG is set): the API server accepts what we render.

Server-side dry run (dryRun=All) runs admission and validation, including native sidecars and
podFailurePolicy, without creating anything. Namespace: $GPT_TRITON_TEST_NAMESPACE or "default".
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from kubernetes import client as k8s

from gpt_triton.k8s.client import load_api_client
from gpt_triton.k8s.render import TuneJobParams, render_run

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
