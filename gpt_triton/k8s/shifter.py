"""Canary traffic by replica ratio: a :class:`~gpt_triton.core.shifting.TrafficShifter` the canary drives.

The chart's Service selects the stable and the canary Deployment alike, so the canary's share of traffic is
its share of ready replicas. That is coarse (steps of 1/total) and per connection, not per request: gRPC
clients that hold one long-lived connection stay on one pod, so use HTTP clients or a mesh/gateway with
weighted routing when exact weights matter. The base comes from core, not from ``gpt_triton.canary``:
the canary imports this package, never the other way round.

Replicas change only through the ``deployments/scale`` subresource (``KubeClient.scale_deployment``:
``patch_namespaced_deployment_scale``), so the operator's Role needs ``deployments/scale`` and never
write access to the pod template. A GitOps controller (Argo CD, Flux) that owns ``spec.replicas`` will
still undo a scale on its next sync: such teams run the same gates through Argo Rollouts or Flagger
(``gpt-triton canary --emit argo|flagger``, docs/canary.md) instead of this shifter.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.shifting import TrafficShifter
from gpt_triton.k8s.client import KubeClient


def split_replicas(weight: float, total: int) -> tuple[int, int]:
    """(stable, canary) replicas for a canary weight in [0, 1].

    Any positive weight gets at least one canary pod and any weight below 1 keeps at least one stable pod,
    so a small step is never rounded to "no canary" and a rollback target always has capacity.
    """
    if not 0.0 <= weight <= 1.0 or math.isnan(weight):
        raise GptTritonError(f"canary weight {weight} is outside [0, 1]: pass a fraction such as 0.1")
    if total < 1:
        raise GptTritonError("the stable and canary Deployments have 0 replicas in total: set --total-replicas")
    canary = round(weight * total)
    if weight > 0.0:
        canary = max(canary, 1)
    if 0.0 < weight < 1.0 and total < 2:
        raise GptTritonError("a partial canary weight needs at least 2 replicas in total: raise --total-replicas")
    if weight < 1.0:
        canary = min(canary, total - 1)
    return total - canary, canary


@dataclass
class DeploymentReplicaShifter(TrafficShifter):
    """``set_weight(w)`` sets the replicas of the stable and canary Deployments through their scale subresource.

    ``total_replicas`` defaults to the Deployments' current sum, read on the first call. Scaling up
    happens before scaling down, so serving capacity never dips below the total during a step.

    The base asks that the new split be in effect when ``set_weight`` returns (after 0.0 no request
    reaches the canary), so each scale waits until the Deployment reports the target: ready replicas
    for a scale-up, no pods beyond the target for a scale-down (terminating pods have already left the
    Service's endpoints then). ``wait_s=0`` returns right after patching.
    """

    kube: KubeClient
    stable: str
    canary: str
    total_replicas: int | None = None
    wait_s: float = 600.0
    poll_s: float = 2.0
    history: list[tuple[float, int, int]] = field(default_factory=list)  # (weight, stable, canary)

    @property
    def effective_weight(self) -> float:
        """The share actually set (replica granularity), 0.0 before the first call."""
        if not self.history:
            return 0.0
        _, stable, canary = self.history[-1]
        return canary / (stable + canary)

    def set_weight(self, weight: float) -> None:
        current = {self.stable: self.kube.deployment_replicas(self.stable),
                   self.canary: self.kube.deployment_replicas(self.canary)}
        total = self.total_replicas if self.total_replicas is not None else sum(current.values())
        self.total_replicas = total
        stable, canary = split_replicas(weight, total)
        target = {self.stable: stable, self.canary: canary}
        ups = [n for n in target if target[n] > current[n]]
        downs = [n for n in target if target[n] < current[n]]
        for name in ups + downs:
            self.kube.scale_deployment(name, target[name])
            if self.wait_s > 0:
                self._wait_for(name, target[name], up=name in ups)
        self.history.append((weight, stable, canary))

    def _wait_for(self, name: str, replicas: int, up: bool) -> None:
        deadline = time.monotonic() + self.wait_s
        while True:
            status: dict[str, Any] = self.kube.deployment(name).get("status") or {}
            if up and int(status.get("readyReplicas") or 0) >= replicas:
                return
            if not up and int(status.get("replicas") or 0) <= replicas:
                return
            if time.monotonic() >= deadline:
                have = status.get("readyReplicas" if up else "replicas") or 0
                raise GptTritonError(
                    f"deployment {name} did not reach {replicas} {'ready ' if up else ''}replicas within "
                    f"{self.wait_s:.0f}s (has {have}): check `kubectl describe deployment {name}` (GPU capacity, "
                    "image pulls, the pin-version init container)"
                )
            time.sleep(self.poll_s)
