"""The :class:`TrafficShifter` base the canary controller drives.

It lives in core, the one unit both implementations may import (ARCHITECTURE.md's layer table lets
k8s import core only): ``gpt_triton.canary.router.LocalRouterShifter`` (client-side weighted routing)
and ``gpt_triton.k8s.shifter.DeploymentReplicaShifter`` (replica ratio between two Deployments).
Every implementation passes ``gpt_triton.testing.conformance.shifters.TrafficShifterConformance``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class TrafficShifter(ABC):
    """Moves a share of traffic to the candidate.

    ``set_weight`` returns once the change is in effect: in particular, after ``set_weight(0.0)`` no
    request reaches the candidate and after ``set_weight(1.0)`` none reaches the stable version, so the
    controller may unload it next. A weight outside [0, 1] raises GptTritonError and changes nothing.
    """

    @abstractmethod
    def set_weight(self, weight: float) -> None:
        """Send ``weight`` of the traffic to the candidate, the rest to stable; return once in effect."""

    @property
    @abstractmethod
    def effective_weight(self) -> float:
        """The candidate's share actually in effect (an implementation may round it, e.g. to whole
        replicas); 0.0 before the first :meth:`set_weight`."""
