"""Every arrival process passes the shared conformance suite; the selection from a LoadProfile and the
replay-specific hooks are checked here too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.arrivals import (
    ArrivalProcess,
    ClosedLoop,
    Constant,
    Poisson,
    Replay,
    arrival_process,
)
from gpt_triton.testing.conformance.arrivals import ArrivalProcessConformance

TRACE = np.arange(10) * 0.02  # 10 requests per 0.2 s period (one mean gap added between repeats): 50/s
PAYLOADS = [{"x": np.full((1, 16), i, np.float32)} for i in range(10)]


class TestClosedLoopConformance(ArrivalProcessConformance):
    rate = None

    def make(self) -> ArrivalProcess:
        return ClosedLoop()


class TestPoissonConformance(ArrivalProcessConformance):
    rate = 200.0

    def make(self) -> ArrivalProcess:
        return Poisson(self.rate)


class TestSlowPoissonConformance(ArrivalProcessConformance):
    rate = 3.0  # fewer arrivals than seeds of the count bound: rounding dominates
    duration_s = 5.0

    def make(self) -> ArrivalProcess:
        return Poisson(self.rate)


class TestConstantConformance(ArrivalProcessConformance):
    rate = 120.0

    def make(self) -> ArrivalProcess:
        return Constant(self.rate)


class TestReplayTraceConformance(ArrivalProcessConformance):
    rate = 50.0

    def make(self) -> ArrivalProcess:
        return Replay(TRACE, PAYLOADS)


class TestReplayUntimedAtRateConformance(ArrivalProcessConformance):
    rate: ClassVar[float | None] = 80.0

    def make(self) -> ArrivalProcess:
        return Replay(None, PAYLOADS, Poisson(80.0))


class TestReplayUntimedClosedLoopConformance(ArrivalProcessConformance):
    rate = None

    def make(self) -> ArrivalProcess:
        return Replay(None, PAYLOADS)


def test_the_suite_catches_a_process_that_breaks_its_contract() -> None:
    """Not vacuous: a process that bunches its arrivals, or ignores the seed's generator, fails."""

    class Bunched(ArrivalProcess):
        def offsets(self, duration_s: float, min_requests: int, rng: np.random.Generator) -> np.ndarray:
            return np.zeros(max(int(100 * duration_s), min_requests))  # all at t=0: the rate is not held

    class Unseeded(ArrivalProcess):
        def offsets(self, duration_s: float, min_requests: int, rng: np.random.Generator) -> np.ndarray:
            return np.sort(np.random.uniform(0, duration_s, max(int(100 * duration_s), min_requests)))

    class BunchedSuite(ArrivalProcessConformance):
        rate = 100.0

        def make(self) -> ArrivalProcess:
            return Bunched()

    class UnseededSuite(ArrivalProcessConformance):
        rate = 100.0

        def make(self) -> ArrivalProcess:
            return Unseeded()

    with pytest.raises(AssertionError):
        BunchedSuite().test_count_and_rate_within_the_stated_bound()
    with pytest.raises(AssertionError):
        BunchedSuite().test_min_requests_are_honoured()
    with pytest.raises(AssertionError):
        UnseededSuite().test_same_seed_same_schedule_from_the_generator_only()


def test_a_load_profile_picks_its_process(tmp_path: Path) -> None:
    assert isinstance(arrival_process(LoadProfile(concurrency=4)), ClosedLoop)
    assert arrival_process(LoadProfile(kind="rate", rate=5)) == Poisson(5)
    assert arrival_process(LoadProfile(kind="rate", rate=5, arrivals="constant")) == Constant(5)
    with pytest.raises(GptTritonError, match=r"load rate=0/s \(poisson\): rate must be > 0"):
        arrival_process(LoadProfile(kind="rate", rate=0)).offsets(1.0, 0, np.random.default_rng(0))
    with pytest.raises(GptTritonError, match="needs replay_file"):
        arrival_process(LoadProfile(kind="replay"))

    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps({"t": 5 + 0.1 * i, "inputs": {"x": [float(i)]}}) for i in range(3)))
    asked: list[str] = []

    def dtypes() -> dict[str, str]:
        asked.append("dtypes")
        return {"x": "FP32"}

    replay = arrival_process(LoadProfile(kind="replay", replay_file=str(trace)), dtypes)
    assert isinstance(replay, Replay) and replay.trace is not None and np.allclose(replay.trace, [0, 0.1, 0.2])
    assert asked == ["dtypes"]  # asked for a replay file only
    arrival_process(LoadProfile(kind="rate", rate=5), dtypes)
    assert asked == ["dtypes"]
    perf = tmp_path / "input.json"
    perf.write_text(json.dumps({"data": [{"x": [1.0]}, {"x": [2.0]}]}))
    untimed = arrival_process(LoadProfile(kind="replay", replay_file=str(perf), rate=30, arrivals="constant"), dtypes)
    assert isinstance(untimed, Replay) and untimed.untimed == Constant(30)
    assert isinstance(arrival_process(LoadProfile(kind="replay", replay_file=str(perf))), Replay)


def test_replay_carries_its_own_payloads_in_trace_order() -> None:
    replay = Replay(TRACE, PAYLOADS)
    caller = [{"x": np.zeros((1, 16), np.float32)}]
    assert replay.payloads(caller) == PAYLOADS  # the file's payloads, not the caller's
    offsets = replay.offsets(0.5, 0, np.random.default_rng(0))
    assert offsets is not None and offsets.size == 25  # 2.5 periods of 10
    indices = replay.payload_indices(offsets.size, payload_start=3, n_payloads=len(PAYLOADS))
    assert list(indices[:12]) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]  # entry i carries payload i; start ignored
    assert replay.requested_rate() is None  # judged against the trace's own rate
    # The default hooks: the caller's payloads, cycled from payload_start.
    assert Poisson(10).payloads(caller) == caller
    assert list(Poisson(10).payload_indices(5, payload_start=3, n_payloads=4)) == [3, 0, 1, 2, 3]
    assert Poisson(10).requested_rate() == 10 and ClosedLoop().requested_rate() is None
