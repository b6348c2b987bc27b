"""The load client behind the harness: who sends a window's requests.

One seam, one abstract method (:meth:`LoadClient.window`): the harness asks for a window and gets a
:class:`~gpt_triton.measure.driver.WindowSample` with every successful request's latency and Triton's
server-side breakdown, whoever sent the requests. Two implementations:

* :class:`BuiltinClient` - this package's generator (:func:`gpt_triton.measure.driver.run_window`):
  closed loop, open loop at a rate with latency from the *scheduled* send, replay; lean synchronous
  loop at concurrency 1.
* :class:`gpt_triton.measure.perf_analyzer.PerfAnalyzerClient` - NVIDIA's perf_analyzer binary, so a
  user can cross-check any figure with the tool they already trust (``measure.client: perf_analyzer``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.driver import WindowSample, run_window


class LoadClient(ABC):
    """Sends one measurement window's requests to a Triton model and reports what each took."""

    name: str = "load client"

    @abstractmethod
    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        """Drive ``model_name`` with ``load`` for at least ``duration_s`` and ``min_requests`` requests,
        payloads cycling through ``requests`` from ``payload_start``; ``seed`` draws random arrivals.
        ``settle_s``: at concurrency 1, requests sent for this long first are not counted (nor in the
        server-side breakdown): the previous model's carry-over is not this model's latency."""


class BuiltinClient(LoadClient):
    """The built-in gRPC generator; ``processes`` > 1 spreads an open-loop window over processes."""

    name = "builtin"

    def __init__(self, processes: int = 1, protocol: str = "grpc", http_url: str | None = None) -> None:
        self.processes = processes
        self.protocol = protocol  # statistics are read over gRPC whatever the load's protocol
        self.http_url = http_url

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        return run_window(grpc_url, model_name, requests, load, duration_s, min_requests, outputs=outputs,
                          metrics_url=metrics_url, processes=self.processes, seed=seed, payload_start=payload_start,
                          protocol=self.protocol, http_url=self.http_url, settle_s=settle_s)

