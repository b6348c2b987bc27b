"""Kubernetes: tuning Jobs (render/submit/watch/collect) and a replica-ratio canary traffic shifter."""

from gpt_triton.k8s.client import KubeClient, job_state, load_api_client
from gpt_triton.k8s.render import SecretRef, TuneJobParams, render_job, render_rbac, render_run
from gpt_triton.k8s.shifter import DeploymentReplicaShifter, split_replicas

__all__ = [
    "DeploymentReplicaShifter",
    "KubeClient",
    "SecretRef",
    "TuneJobParams",
    "job_state",
    "load_api_client",
    "render_job",
    "render_rbac",
    "render_run",
    "split_replicas",
]
