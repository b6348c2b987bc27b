"""When a window's requests are sent: one :class:`ArrivalProcess` per kind of load.

* :class:`ClosedLoop` - no schedule: ``concurrency`` workers send, await, send again.
* :class:`Poisson`, :class:`Constant` - open loop at a rate; the arrival times are drawn *before* the
  window starts, so a generator or server that falls behind shows up as latency (no coordinated
  omission).
* :class:`Replay` - a trace's own timestamps, cycled over the window; a file without timestamps sends
  its payloads by the load's rate (or closed loop).

:func:`arrival_process` picks one from a :class:`LoadProfile`. Every implementation passes
``gpt_triton.testing.conformance.arrivals.ArrivalProcessConformance``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.replay import cycle_trace, load_replay

Payload = dict[str, np.ndarray]


class ArrivalProcess(ABC):
    """The send times of one window. Only :meth:`offsets` is required; the hooks below default to
    "send the caller's payloads in turn, judge the window against the schedule's own rate"."""

    @abstractmethod
    def offsets(self, duration_s: float, min_requests: int, rng: np.random.Generator) -> np.ndarray | None:
        """Sorted, non-negative send times (s after the window start) covering ``duration_s`` and at
        least ``min_requests`` arrivals, drawn from ``rng`` only. None means closed loop: no schedule."""

    def requested_rate(self) -> float | None:
        """The rate the load asked for (``rate_target`` of the window, and a window is judged over at
        least ``duration_s``); None: the schedule's own rate, count / span."""
        return None

    def payloads(self, requests: Sequence[Payload]) -> list[Payload]:
        """What the window sends: the caller's requests, unless the process carries its own."""
        return list(requests)

    def payload_indices(self, count: int, payload_start: int, n_payloads: int) -> np.ndarray:
        """Which payload each of ``count`` scheduled arrivals carries: cycle from ``payload_start``."""
        return (payload_start + np.arange(count)) % n_payloads


@dataclass(frozen=True)
class ClosedLoop(ArrivalProcess):
    """No schedule: the window's concurrency decides the load (and how fast the server answers, the rate)."""

    def offsets(self, duration_s: float, min_requests: int, rng: np.random.Generator) -> np.ndarray | None:
        return None


def _count(rate: float, duration_s: float, min_requests: int, label: str) -> int:
    if rate <= 0:
        raise GptTritonError(f"load {label}: rate must be > 0 requests/s for an open-loop load")
    return max(int(round(rate * duration_s)), min_requests, 1)


@dataclass(frozen=True)
class Poisson(ArrivalProcess):
    """Poisson arrivals at ``rate`` requests/s.

    Drawn as the Poisson process *conditioned on its count* n = rate x duration (sorted uniform times;
    the same law as exponential gaps given n), so the requested rate is exactly the scheduled rate and
    "achieved < 98% of target" measures the generator, not sampling noise.
    """

    rate: float

    def offsets(self, duration_s: float, min_requests: int, rng: np.random.Generator) -> np.ndarray:
        n = _count(self.rate, duration_s, min_requests, f"rate={self.rate:g}/s (poisson)")
        return np.sort(rng.uniform(0.0, n / self.rate, size=n))

    def requested_rate(self) -> float | None:
        return self.rate


@dataclass(frozen=True)
class Constant(ArrivalProcess):
    """Evenly spaced arrivals at ``rate`` requests/s (no randomness: the seed does not matter)."""

    rate: float

    def offsets(self, duration_s: float, min_requests: int, rng: np.random.Generator) -> np.ndarray:
        n = _count(self.rate, duration_s, min_requests, f"rate={self.rate:g}/s (constant)")
        return np.arange(n) / self.rate

    def requested_rate(self) -> float | None:
        return self.rate


@dataclass(frozen=True, eq=False)  # eq=False: arrays do not compare to one bool
class Replay(ArrivalProcess):
    """A replay file's requests: at the trace's own times (cycled to fill the window; arrival i carries
    entry i mod len), or - a file without times - by ``untimed``."""

    trace: np.ndarray | None  # sorted offsets from 0, one per request; None: the file has no times
    requests: list[Payload]
    untimed: ArrivalProcess = field(default_factory=ClosedLoop)

    @classmethod
    def from_file(cls, path: str | Path, dtypes: dict[str, str] | None = None,
                  untimed: ArrivalProcess | None = None) -> Replay:
        trace, requests = load_replay(path, dtypes)
        return cls(trace, requests, untimed if untimed is not None else ClosedLoop())

    def offsets(self, duration_s: float, min_requests: int, rng: np.random.Generator) -> np.ndarray | None:
        if self.trace is None:
            return self.untimed.offsets(duration_s, min_requests, rng)
        return cycle_trace(self.trace, duration_s, min_requests)

    def payloads(self, requests: Sequence[Payload]) -> list[Payload]:
        return list(self.requests)

    def payload_indices(self, count: int, payload_start: int, n_payloads: int) -> np.ndarray:
        if self.trace is None:
            return self.untimed.payload_indices(count, payload_start, n_payloads)
        return np.arange(count) % len(self.trace)  # entry i of the trace carries payload i


# A plain table, not a registry: LoadProfile.arrivals is a Literal of exactly these names.
RATE_PROCESSES: dict[str, type[Poisson] | type[Constant]] = {"poisson": Poisson, "constant": Constant}


def rate_process(load: LoadProfile) -> Poisson | Constant:
    """The open-loop process of ``load.arrivals`` at ``load.rate``."""
    return RATE_PROCESSES[load.arrivals](load.rate)


def arrival_process(load: LoadProfile, input_dtypes: Callable[[], dict[str, str]] | None = None) -> ArrivalProcess:
    """The process a load profile describes. ``input_dtypes`` is asked only for a replay file (perf_analyzer
    JSON may leave dtypes out; the model's metadata fills them in), so other loads never touch the server."""
    if load.kind == "rate":
        return rate_process(load)
    if load.kind == "replay":
        if not load.replay_file:
            raise GptTritonError("load kind=replay needs replay_file: a JSONL trace or perf_analyzer JSON")
        untimed: ArrivalProcess = rate_process(load) if load.rate > 0 else ClosedLoop()
        return Replay.from_file(load.replay_file, input_dtypes() if input_dtypes else None, untimed)
    return ClosedLoop()


def schedule(load: LoadProfile, duration_s: float, min_requests: int = 0, seed: int = 0) -> np.ndarray:
    """Arrival offsets (s) of an open-loop window at ``load.rate``, drawn before the window starts
    (``seed`` -> ``np.random.default_rng(seed)``)."""
    if load.rate <= 0:
        raise GptTritonError(f"load {load.label()}: rate must be > 0 requests/s for an open-loop load")
    return rate_process(load).offsets(duration_s, min_requests, np.random.default_rng(seed))
