"""Client-side traffic shifting: a weighted router between two versions of one Triton model.

Each request goes to the candidate version with probability ``weight``, else to the stable one, by
``model_version`` on the request. The router counts in-flight requests per version so a caller can
*drain* a version (wait until nothing is in flight to it) before Triton's version policy unloads it:
the choice of version and the in-flight increment happen under one lock, so once ``set_weight(0)``
has returned no new request can pick the candidate, and once the drain returns none is still running.

:class:`TrafficShifter` (``gpt_triton.core.shifting``) is the base the canary controller drives;
:class:`LocalRouterShifter` is the local implementation, Kubernetes plugs in a replica-ratio shifter
(``gpt_triton.k8s.shifter``).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.shifting import TrafficShifter

__all__ = ["LocalRouterShifter", "TrafficLoop", "TrafficShifter", "WeightedRouter", "make_inputs"]


def _check_weight(weight: float) -> float:
    if not 0.0 <= weight <= 1.0:
        raise GptTritonError(f"canary weight {weight} is outside [0, 1]: use a fraction such as 0.25")
    return float(weight)


class WeightedRouter:
    """Chooses a version per request and tracks what is in flight to each version."""

    def __init__(self, stable_version: str, candidate_version: str, *, weight: float = 0.0, seed: int | None = None) -> None:
        if stable_version == candidate_version:
            raise GptTritonError(f"stable and candidate are both version {stable_version}: pass a different --candidate-version")
        self.stable_version = str(stable_version)
        self.candidate_version = str(candidate_version)
        self._weight = _check_weight(weight)
        self._random = random.Random(seed)
        self._cond = threading.Condition()
        self._in_flight: dict[str, int] = {}
        self.sent: dict[str, int] = {}  # requests routed per version, for reports and tests

    @property
    def weight(self) -> float:
        return self._weight

    def set_weight(self, weight: float) -> None:
        with self._cond:
            self._weight = _check_weight(weight)

    def in_flight(self, version: str) -> int:
        with self._cond:
            return self._in_flight.get(str(version), 0)

    def choose(self) -> str:
        """Pick a version and count it in flight; pair with :meth:`done` (or use :meth:`route`)."""
        with self._cond:
            # weight 0 and 1 are exact: random() < 0 never holds and random() < 1 always does.
            version = self.candidate_version if self._random.random() < self._weight else self.stable_version
            self._in_flight[version] = self._in_flight.get(version, 0) + 1
            self.sent[version] = self.sent.get(version, 0) + 1
            return version

    def done(self, version: str) -> None:
        with self._cond:
            self._in_flight[version] -= 1
            if self._in_flight[version] == 0:
                self._cond.notify_all()

    @contextmanager
    def route(self) -> Iterator[str]:
        """``with router.route() as version: client.infer(..., model_version=version)``."""
        version = self.choose()
        try:
            yield version
        finally:
            self.done(version)

    def drain(self, version: str, timeout_s: float = 30.0) -> None:
        """Wait until no request is in flight to ``version`` (callers stop routing to it first)."""
        version = str(version)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._in_flight.get(version, 0) > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GptTritonError(
                        f"{self._in_flight[version]} requests to version {version} still in flight after {timeout_s:.0f} s"
                    )
                self._cond.wait(left)

    def retarget(self, stable_version: str) -> None:
        """After a promotion or rollback: everything goes to ``stable_version`` from now on."""
        with self._cond:
            self.stable_version = str(stable_version)
            self._weight = 0.0


class LocalRouterShifter(TrafficShifter):
    """:class:`TrafficShifter` over a :class:`WeightedRouter`: set the weight, then drain the version
    that no longer receives traffic so it can be unloaded safely."""

    def __init__(self, router: WeightedRouter, drain_timeout_s: float = 30.0) -> None:
        self.router = router
        self.drain_timeout_s = drain_timeout_s

    @property
    def effective_weight(self) -> float:
        return self.router.weight  # per request, so exactly the weight set

    def set_weight(self, weight: float) -> None:
        self.router.set_weight(weight)
        if weight == 0.0:
            self.router.drain(self.router.candidate_version, self.drain_timeout_s)
        elif weight == 1.0:
            self.router.drain(self.router.stable_version, self.drain_timeout_s)


def make_inputs(request: dict[str, np.ndarray]) -> list[grpcclient.InferInput]:
    """gRPC inputs from name -> array."""
    inputs = []
    for name, array in request.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


class TrafficLoop:
    """A steady request stream through a router: ``rate`` requests/s over ``concurrency`` threads.

    Each thread has its own gRPC client and paces itself on a fixed schedule (open loop), so a slower
    version does not slow the stream down. Successes and failures are counted per version; the first
    few error messages are kept for the report.
    """

    def __init__(
        self, url: str, model: str, router: WeightedRouter, requests: list[dict[str, np.ndarray]], *,
        rate: float = 20.0, concurrency: int = 2, timeout_s: float = 30.0,
    ) -> None:
        if not requests:
            raise GptTritonError("no requests to send: the traffic source is empty")
        if rate <= 0 or concurrency < 1:
            raise GptTritonError("--rate must be positive and --concurrency at least 1")
        self.url, self.model, self.router, self.requests = url, model, router, requests
        self.rate, self.concurrency, self.timeout_s = rate, concurrency, timeout_s
        self.ok: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def total_ok(self) -> int:
        with self._lock:
            return sum(self.ok.values())

    @property
    def total_failed(self) -> int:
        with self._lock:
            return sum(self.failed.values())

    def start(self) -> TrafficLoop:
        self._stop.clear()
        start = time.monotonic()
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._run, args=(index, start), name=f"canary-traffic-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 5.0)
        self._threads.clear()

    def __enter__(self) -> TrafficLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, index: int, start: float) -> None:
        period = self.concurrency / self.rate
        client = grpcclient.InferenceServerClient(self.url)
        try:
            sent = 0
            while not self._stop.is_set():
                due = start + (index / self.concurrency + sent) * period
                if self._stop.wait(max(0.0, due - time.monotonic())):  # pacing, interruptible by stop()
                    break
                request = self.requests[(sent * self.concurrency + index) % len(self.requests)]
                sent += 1
                inputs = make_inputs(request)
                with self.router.route() as version:
                    try:
                        client.infer(self.model, inputs, model_version=version, client_timeout=self.timeout_s)
                    except Exception as exc:  # every failure is counted: the zero-loss guarantee is checked on it
                        with self._lock:
                            self.failed[version] = self.failed.get(version, 0) + 1
                            if len(self.errors) < 10:
                                self.errors.append(f"v{version}: {exc}")
                        continue
                with self._lock:
                    self.ok[version] = self.ok.get(version, 0) + 1
        finally:
            client.close()
