"""A counted window other processes crowded is measured again, not counted (gpt_triton/measure/crowding.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.core.records import Candidate, DeployInfo
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.crowding import (
    MAX_IN_A_ROW,
    MIN_REPEATS,
    SET_ASIDE,
    RepeatCrowded,
    crowded_margin,
    set_aside_note,
)
from gpt_triton.measure.driver import WindowSample
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.machine_load import WatchedClient
from gpt_triton.measure.window_log import WindowLog, read_windows
from gpt_triton.testing.co_tenant import co_tenant

LOAD = LoadProfile(kind="concurrency", concurrency=1)


class Scripted(LoadClient):
    """Windows whose other processes' load follows a script (then ``after``), and whose p99 is the call's number,
    so that a test can tell which call a counted window was."""

    name = "scripted"

    def __init__(self, cores: Sequence[float | None], after: float | None = 0.0) -> None:
        self.cores = list(cores)
        self.after = after
        self.calls: list[tuple[str, int, int]] = []  # (model, min_requests, seed)

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        n = len(self.calls)
        self.calls.append((model_name, min_requests, seed))
        cores = self.cores[n] if n < len(self.cores) else self.after
        p99 = float(n + 1)
        result = WindowResult(duration_s=duration_s, requests=max(min_requests, 10), errors=0, throughput=10.0,
                              p50_ms=p99, p90_ms=p99, p99_ms=p99, mean_ms=p99, foreign_cores=cores, steal_cores=0.0)
        return WindowSample(result=result, latencies_ms=np.full(max(min_requests, 10), p99))


def counted(client: LoadClient, min_requests: int = 100) -> WindowSample:
    return client.window("unused:0", "m", [{}], LOAD, 1.0, min_requests, seed=10)


def test_a_crowded_window_is_measured_again_and_rides_on_the_one_counted() -> None:
    inner = Scripted([0.0, 0.02, 0.8, 0.01])
    client = RepeatCrowded(inner, share=1.0, margin_cores=0.1)
    first, second = counted(client), counted(client)
    assert first.result.p99_ms == 1.0 and second.result.p99_ms == 2.0 and not first.set_aside
    third = counted(client)
    # The third call (0.8 cores against a usual near 0.01) is set aside, the fourth counted in its place.
    assert third.result.p99_ms == 4.0 and third.result.set_aside is None
    assert [(r.p99_ms, r.set_aside, r.foreign_cores) for r in third.set_aside] == [(3.0, SET_ASIDE, 0.8)]
    assert [seed for _, _, seed in inner.calls[2:]] == [10, 11]  # the repeat draws fresh arrivals
    assert (client.counted, client.repeated) == (3, 1)


def test_the_usual_is_the_machine_s_steady_load_not_a_crowd() -> None:
    # Another tenant that holds 3 cores throughout: before any window that was not set aside the usual is 0,
    # so the first counted window is measured again at most MAX_IN_A_ROW times; after it, 3 cores is the usual.
    inner = Scripted([], after=3.0)
    client = RepeatCrowded(inner, share=1.0, margin_cores=0.1)
    first = counted(client)
    assert len(first.set_aside) == MAX_IN_A_ROW and first.result.set_aside is None
    assert all(not counted(client).set_aside for _ in range(12))
    assert client.usual() == 3.0
    # A warm-up (not counted) is never measured again; when it was not crowded it tells the usual.
    warmed = RepeatCrowded(Scripted([0.0, 0.0, 0.3]), share=1.0, margin_cores=0.1)
    assert not counted(warmed, min_requests=0).set_aside and warmed.usual() == 0.0
    # One a crowd fell on does not: the counted window after it, in the crowd's tail, is measured again (Q12).
    tail = RepeatCrowded(Scripted([0.6, 0.15, 0.0]), share=1.0, margin_cores=0.05)
    assert not counted(tail, min_requests=0).set_aside and tail.usual() == 0.0
    assert [r.foreign_cores for r in counted(tail).set_aside] == [0.15]
    # A rise of more than the margin above the usual is a crowd again: measured again until the cap, then counted.
    inner.after = 3.5
    assert len(counted(client).set_aside) == MAX_IN_A_ROW


def test_a_machine_that_stays_busy_costs_a_bounded_share_of_windows() -> None:
    # Every other window crowded, for ever: repeats stop at a quarter of the counted windows (or MIN_REPEATS).
    inner = Scripted([0.9 if k % 2 else 0.0 for k in range(400)])
    client = RepeatCrowded(inner, share=0.25, margin_cores=0.1)
    samples = [counted(client) for _ in range(100)]
    repeated = sum(len(s.set_aside) for s in samples)
    assert repeated == client.repeated and repeated <= 0.25 * 100 + 1
    assert repeated >= 20  # it did repeat while the budget lasted
    assert len(inner.calls) == 100 + repeated
    # In a stage's first windows, when a quarter of the counted ones is worth little, MIN_REPEATS may be spent.
    early = RepeatCrowded(Scripted([0.9, 0.0] * (MIN_REPEATS + 1)), share=0.25, margin_cores=0.1)
    assert [len(counted(early).set_aside) for _ in range(MIN_REPEATS + 1)] == [1] * MIN_REPEATS + [0]


def test_no_load_reading_no_repeat_and_share_zero_is_off() -> None:
    assert not counted(RepeatCrowded(Scripted([None, None]), share=1.0, margin_cores=0.1)).set_aside
    assert not counted(RepeatCrowded(Scripted([0.9, 0.9]), share=0.0, margin_cores=0.1)).set_aside
    assert crowded_margin(2) == 0.05 and crowded_margin(64) == 1.6


class Spinning(LoadClient):
    """A window of real CPU work in this process; the first one with another tenant spinning beside it."""

    name = "spinning"

    def __init__(self) -> None:
        self.calls = 0

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        self.calls += 1
        if self.calls == 1:
            with co_tenant(1):
                _spin(duration_s)
        else:
            _spin(duration_s)
        result = WindowResult(duration_s=duration_s, requests=1, errors=0, throughput=1 / duration_s, p50_ms=1.0,
                              p90_ms=1.0, p99_ms=float(self.calls), mean_ms=1.0)
        return WindowSample(result=result, latencies_ms=np.ones(1))


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_real_outsider_crowds_a_window_that_is_then_measured_again() -> None:
    # /proc/stat as the tuner reads it: a process outside this run's tree spinning a core during the first window
    # only. The margin is half a core, well above what a quiet CI machine's other processes use.
    client = RepeatCrowded(WatchedClient(Spinning()), share=1.0, margin_cores=0.5)
    sample = client.window("unused:0", "m", [{}], LOAD, 0.6, 1)
    crowd = sample.set_aside[0].foreign_cores if sample.set_aside else None
    assert crowd is not None and crowd > 0.5, crowd
    # The window counted is the call after the last one set aside: one on a quiet machine; more where something
    # else (a tune beside the tests) keeps the machine above half a core after the outsider has gone.
    assert sample.result.p99_ms == len(sample.set_aside) + 1 and sample.result.set_aside is None


def cand(cid: str) -> Candidate:
    route = Route(family="onnxruntime", knobs={})
    art = Artifact(family="onnxruntime", runtime="onnxruntime", route=route, directory="/nonexistent",
                   files=["model.onnx"], sha256=f"sha-{cid}")
    return Candidate(id=cid, family="onnxruntime", route=route, serving=Route(family="serving"), status="deployed",
                     artifact=art, deploy=DeployInfo(model_name=f"m_{cid}", backend="python", adapter=True))


def test_the_harness_logs_set_aside_windows_before_their_replacement_and_counts_neither_twice(tmp_path: Path) -> None:
    # Burn-in off, no warm-ups: calls 1-6 are the re-measure's 3 rounds of base and win; call 4 is crowded.
    inner = Scripted([0.0, 0.0, 0.0, 0.9])
    spec = MeasureSpec(window_s=0.1, warmup_s=0.0, burn_in_s=0.0, remeasure_windows=3, gain_precision=0.0,
                       window_min_requests=5, tail_requests=1)
    log = WindowLog(tmp_path / "windows.csv", "run-1")
    m = Measurer("unused:0", [{}], spec, ObjectiveSpec(metric="p50"), client=RepeatCrowded(inner, 1.0, 0.1),
                 on_window=log.sink("re-measure"))
    notes: list[str] = []
    results = m.remeasure([cand("base"), cand("win")], None, notes)
    assert m.windows_run == 7  # six counted and one set aside, all of them time spent
    assert [len(r.stats.windows) for r in results.values()] == [3, 3]
    # The crowded window (p99 4: the fourth call, win's round 2) is in no result, and was replaced by call 5.
    assert 4.0 not in [w.p99_ms for r in results.values() for w in r.stats.windows]
    every = read_windows(tmp_path / "windows.csv", set_aside=True)
    assert [(r["candidate"], r["round"], r["set_aside"], r["p99_ms"]) for r in every[3:5]] == [
        ("win", "2", SET_ASIDE, "4.0000"), ("win", "2", "", "5.0000")]
    assert len(read_windows(tmp_path / "windows.csv")) == 6 and len(log.counted(["re-measure"])) == 6
    assert [n for n in notes if "measured again" in n] == [
        "re-measure: 1 window measured again, not counted: other processes used 0.90 cores during it "
        "against 0.00 in the 6 counted (windows.csv marks them set_aside=crowded)"]


def test_the_note_names_the_stage_and_the_loads() -> None:
    def res(cores: float) -> WindowResult:
        return WindowResult(duration_s=1, requests=1, errors=0, throughput=1, p50_ms=1, p90_ms=1, p99_ms=1,
                            mean_ms=1, foreign_cores=cores)

    assert set_aside_note("finalists", [], [res(0.0)]) is None
    note = set_aside_note("finalists", [res(0.3), res(0.8)], [res(0.01), res(0.03), res(0.02)])
    assert note is not None and note.startswith("finalists: 2 windows measured again")
    assert "0.30-0.80 cores during them against 0.02 in the 3 counted" in note
