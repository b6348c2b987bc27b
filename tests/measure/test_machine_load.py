"""What else the machine ran during a window: other processes' cores and steal (machine_load.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np
import pytest

from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.driver import WindowSample
from gpt_triton.measure.machine_load import (
    CpuSnapshot,
    WatchedClient,
    cores_between,
    load_contrast,
    machine_load,
    own_cpu_ms_per_request,
    pace_contrast,
)
from gpt_triton.measure.perf_analyzer import load_client
from gpt_triton.testing.co_tenant import co_tenant

SPIN = "import time, sys\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def snap(at: float, busy: float, steal: float, own: float) -> CpuSnapshot:
    return CpuSnapshot(at=at, busy_s=busy, steal_s=steal, own_s=own)


def test_other_processes_are_the_busy_time_this_run_did_not_use() -> None:
    # 2 s apart: the machine busy for 3 CPU seconds, 2.5 of them this run's: a quarter core was someone else's.
    assert cores_between(snap(10, 100, 5, 40), snap(12, 103, 5.2, 42.5)) == pytest.approx((0.25, 0.1))
    # A child reaped in between can put this run's own time a tick above the machine's: never below 0.
    assert cores_between(snap(10, 100, 0, 40), snap(11, 101, 0, 41.01)) == (0.0, 0.0)
    assert cores_between(snap(10, 100, 0, 40), snap(10, 100, 0, 40)) is None
    # This run's own 2.5 CPU seconds over 500 requests: 5 CPU ms each; no request, no figure.
    assert own_cpu_ms_per_request(snap(10, 100, 5, 40), snap(12, 103, 5.2, 42.5), 500) == pytest.approx(5.0)
    assert own_cpu_ms_per_request(snap(10, 100, 5, 40), snap(12, 103, 5.2, 42.5), 0) is None


class Spinner(LoadClient):
    """A window that is CPU work of this run: in this process, or in a child it runs and reaps."""

    name = "spinner"

    def __init__(self, in_child: bool) -> None:
        self.in_child = in_child

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        if self.in_child:
            subprocess.run([sys.executable, "-c", SPIN, str(duration_s)], check=True)
        else:
            _spin(duration_s)
        result = WindowResult(duration_s=duration_s, requests=1, errors=0, throughput=1 / duration_s, p50_ms=1.0,
                              p90_ms=1.0, p99_ms=1.0, mean_ms=1.0)
        return WindowSample(result=result, latencies_ms=np.ones(1))


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def window(client: LoadClient) -> WindowResult:
    return client.window("unused:0", "m", [{}], LoadProfile(kind="concurrency", concurrency=1), 0.6).result


def test_this_runs_own_work_is_not_counted_in_a_child_or_in_process() -> None:
    for in_child in (False, True):
        result = window(WatchedClient(Spinner(in_child)))
        # A full core of this run's own work (the child reaped inside the window) is not another tenant's.
        assert result.foreign_cores is not None and result.foreign_cores < 0.5, (in_child, result.foreign_cores)
        assert result.steal_cores is not None and result.steal_cores >= 0
        # ... it is this run's CPU per request: the one request cost its spinning (0.6 s less what others took).
        assert result.own_cpu_ms is not None and 100 < result.own_cpu_ms < 1500, (in_child, result.own_cpu_ms)


def test_a_process_outside_the_run_is_counted() -> None:
    with co_tenant(1):
        crowded = window(WatchedClient(Spinner(in_child=False)))
    assert crowded.foreign_cores is not None
    # The outsider has a core of its own on a 2-core machine (and a share of one on a busier one).
    assert crowded.foreign_cores > 0.5, crowded.foreign_cores


def test_the_clients_a_spec_names_are_watched() -> None:
    client = load_client("builtin")
    assert isinstance(client, WatchedClient) and client.name == "builtin"


def result_with(cores: float | None, steal: float = 0.0, duration: float = 1.0) -> WindowResult:
    return WindowResult(duration_s=duration, requests=1, errors=0, throughput=1.0, p50_ms=1.0, p90_ms=1.0,
                        p99_ms=1.0, mean_ms=1.0, foreign_cores=cores, steal_cores=steal)


def test_a_stage_summary_weighs_windows_by_their_time_and_counts_the_crowded_ones() -> None:
    load = machine_load([result_with(0.1), result_with(0.9, 0.2, duration=3.0), result_with(None)])
    assert load is not None and load.windows == 2 and load.crowded == 1
    assert load.mean_cores == pytest.approx((0.1 + 3 * 0.9) / 4) and load.max_cores == pytest.approx(0.9)
    assert load.steal_cores == pytest.approx(0.15)
    assert load.describe() == ("other processes used 0.70 cores on average over its 2 windows (at most 0.90; "
                               "more than 0.5 in 1), steal 0.15 cores")
    assert machine_load([result_with(None)]) is None
    quiet = machine_load([result_with(0.0)])
    assert load_contrast(quiet, load, ("finalist pair", "re-measure")) == (
        "; other processes used 0.00 cores during the finalist pair's windows (0 of 1 crowded) and 0.70 during "
        "the re-measure's (1 of 2)")
    assert load_contrast(None, load, ("a", "b")) == ""


def paced(*p50s: float, cpu: float | None = None) -> list[WindowResult]:
    return [WindowResult(duration_s=1.0, requests=1, errors=0, throughput=1.0, p50_ms=p, p90_ms=p, p99_ms=p,
                         mean_ms=p, own_cpu_ms=None if cpu is None else cpu * p) for p in p50s]


def test_the_pace_clause_sets_each_sides_median_request_in_the_two_stages_side_by_side() -> None:
    # As in G1 (2026-12-06): both candidates' median request ran some 24% slower on the re-measure's server.
    before = {"baseline": paced(0.88, 0.89, 0.90, 9.0), "winner": paced(1.22, 1.23, 1.21)}
    after = {"baseline": paced(1.08, 1.07, 1.09), "winner": paced(1.52, 1.50, 0.0, 1.53)}
    assert pace_contrast(before, after, ("finalist pair", "re-measure")) == (
        "; the median request's pace from the finalist pair to the re-measure: baseline +21% (0.895 -> 1.080 ms), "
        "winner +25% (1.220 -> 1.520 ms)")
    assert pace_contrast({"baseline": paced(1.0)}, {"baseline": []}, ("a", "b")) == ""
    # With the CPU this run spent per request in each window: the same requests costing more CPU (M1, 2026-12-06).
    before = {"baseline": paced(1.0, 1.0, cpu=2.0), "winner": paced(1.5, cpu=2.0)}
    after = {"baseline": paced(1.2, 1.2, cpu=2.0), "winner": paced(1.5, cpu=2.2)}
    assert pace_contrast(before, after, ("finalist pair", "re-measure")) == (
        "; the median request's pace from the finalist pair to the re-measure: baseline +20% (1.000 -> 1.200 ms), "
        "winner +0% (1.500 -> 1.500 ms); the CPU this run used per request: baseline +20% (2.000 -> 2.400 ms), "
        "winner +10% (3.000 -> 3.300 ms)")
