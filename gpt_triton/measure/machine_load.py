"""What else the machine ran during each window: CPU used by processes outside this run, and steal.

A latency ratio measured on a shared machine is a ratio under that machine's load. On conv_attention
(2026-12-05, benchmarks/specs/estimate_tunes_long.yaml) the pair's baseline, whose ONNX Runtime threads
spin while they wait, went from a p99 of 3.0 ms to 5.3 ms for about 80 s while the winner, which does
not spin, moved from 2.1 to 2.3 ms: another process had taken a core, and the gain read in those windows
was half again what it was before and after. No amount of windows on the same server removes that; a
selection estimate and its re-measure taken minutes apart can differ by it. So every window records
how many cores other processes used while it ran, and the steal the hypervisor took from this VM, and
the decision log says so beside the figures that rest on them.

Other processes: the machine's busy CPU time (``/proc/stat`` through psutil: user, nice, system) less
what this run's own process tree used (this process, its load-generator workers, perf_analyzer, and the
embedded Triton with its backend stubs, which are all its descendants). With ``--triton-url`` the
server is not a descendant, so a server on the same machine counts among the others: the note says so.
In a container, ``/proc/stat`` is the node's: the others are the node's other pods.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import psutil

from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.driver import WindowSample

BUSY_FIELDS = ("user", "nice", "system")  # what processes use (irq and softirq are nobody's; steal is not ours)
CROWDED_CORES = 0.5  # a window in which other processes used more than this is counted as crowded

T = TypeVar("T")


@dataclass(frozen=True)
class CpuSnapshot:
    at: float  # time.monotonic()
    busy_s: float  # the machine's process CPU seconds since boot, all cores
    steal_s: float  # CPU seconds the hypervisor gave to other guests
    own_s: float  # this process tree's CPU seconds, the reaped children included


def _process_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def cpu_snapshot(root: psutil.Process | None = None) -> CpuSnapshot | None:
    """The counters now; None where the machine does not expose them (no /proc)."""
    try:
        root = root or psutil.Process(os.getpid())
        machine = psutil.cpu_times()
        own = _process_s(root)
        for child in root.children(recursive=True):
            try:
                own += _process_s(child)
            except psutil.Error:  # it ended between the listing and the read: its parent reaps it
                continue
    except (psutil.Error, OSError):
        return None
    return CpuSnapshot(at=time.monotonic(), busy_s=sum(getattr(machine, f, 0.0) for f in BUSY_FIELDS),
                       steal_s=getattr(machine, "steal", 0.0), own_s=own)


def cores_between(before: CpuSnapshot, after: CpuSnapshot) -> tuple[float, float] | None:
    """(other processes' cores, steal cores) on average between two snapshots; None over no time."""
    wall = after.at - before.at
    if wall <= 0:
        return None
    # A child reaped between the snapshots moves its time from the live sum to the parent's children
    # fields; the counters tick at 100 Hz. Either can take the difference a little below 0.
    others = max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s)) / wall
    return others, max(0.0, after.steal_s - before.steal_s) / wall


def own_cpu_ms_per_request(before: CpuSnapshot, after: CpuSnapshot, requests: int) -> float | None:
    """CPU milliseconds this run's process tree used per request between two snapshots; None for no request."""
    if requests <= 0:
        return None
    return max(0.0, after.own_s - before.own_s) * 1e3 / requests


def cores_during(work: Callable[[], T]) -> tuple[T, tuple[float, float] | None]:
    """``work()``'s result, and (other processes' cores, steal cores) while it ran (:func:`cores_between`);
    None where the counters cannot be read."""
    done, span = _snapshots_around(work)
    return done, (cores_between(*span) if span is not None else None)


def _snapshots_around(work: Callable[[], T]) -> tuple[T, tuple[CpuSnapshot, CpuSnapshot] | None]:
    """``work()``'s result and the counters just before and just after it; None where either cannot be read."""
    before = cpu_snapshot()
    done = work()
    after = cpu_snapshot()
    return done, ((before, after) if before is not None and after is not None else None)


class WatchedClient(LoadClient):
    """Any load client, with each window's machine load (:func:`cores_between`) and the CPU this run used per
    request (:func:`own_cpu_ms_per_request`) on its result."""

    def __init__(self, inner: LoadClient) -> None:
        self.inner = inner
        self.name = inner.name

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        sample, span = _snapshots_around(lambda: self.inner.window(
            grpc_url, model_name, requests, load, duration_s, min_requests, outputs=outputs, metrics_url=metrics_url,
            seed=seed, payload_start=payload_start, settle_s=settle_s))
        if span is not None and (cores := cores_between(*span)) is not None:
            own = own_cpu_ms_per_request(*span, sample.result.requests)
            sample.result = sample.result.model_copy(update={"foreign_cores": cores[0], "steal_cores": cores[1],
                                                             "own_cpu_ms": own})
        return sample


@dataclass(frozen=True)
class MachineLoad:
    """Other processes' load over a stage's windows (or a recheck's perf_analyzer runs: ``unit``)."""

    windows: int
    mean_cores: float
    max_cores: float
    crowded: int  # windows with more than CROWDED_CORES of other processes
    steal_cores: float
    unit: str = "windows"

    def describe(self) -> str:
        return (f"other processes used {self.mean_cores:.2f} cores on average over its {self.windows} {self.unit} "
                f"(at most {self.max_cores:.2f}; more than {CROWDED_CORES:g} in {self.crowded}), "
                f"steal {self.steal_cores:.2f} cores")


def machine_load(results: Sequence[WindowResult]) -> MachineLoad | None:
    """The summary over ``results``' windows that recorded a load; None when none did."""
    return load_over([(r.foreign_cores, r.steal_cores or 0.0, r.duration_s) for r in results
                      if r.foreign_cores is not None])


def load_over(spans: Sequence[tuple[float, float, float]], unit: str = "windows") -> MachineLoad | None:
    """The summary over spans of (other processes' cores, steal cores, seconds), weighted by their seconds;
    None for no span."""
    if not spans:
        return None
    cores = np.array([c for c, _, _ in spans])
    weights = np.array([max(d, 1e-9) for _, _, d in spans])
    return MachineLoad(windows=len(spans), mean_cores=float(np.average(cores, weights=weights)),
                       max_cores=float(cores.max()), crowded=int((cores > CROWDED_CORES).sum()),
                       steal_cores=float(np.average([s for _, s, _ in spans], weights=weights)), unit=unit)


def load_contrast(first: MachineLoad | None, second: MachineLoad | None, names: tuple[str, str]) -> str:
    """A clause for the estimate-against-re-measure line: the two stages' machine load side by side."""
    if first is None or second is None:
        return ""
    return (f"; other processes used {first.mean_cores:.2f} cores during the {names[0]}'s windows "
            f"({first.crowded} of {first.windows} crowded) and {second.mean_cores:.2f} during the {names[1]}'s "
            f"({second.crowded} of {second.windows})")


def pace_contrast(first: Mapping[str, Sequence[WindowResult]], second: Mapping[str, Sequence[WindowResult]],
                  names: tuple[str, str]) -> str:
    """A clause for the estimate-against-re-measure line: how fast each candidate's median request ran in
    the two stages (the median over its windows of the window's p50), ``first`` and ``second`` mapping a
    label (``baseline``, ``winner``) to its counted windows there.

    Why: a gap beyond both intervals can come with no other process on the machine (foreign_cores 0, no
    steal): in a conv_attention tune (2026-12-06, G1) the re-measure's server ran both candidates' median
    request 24% slower than the finalist pair's had, and their window p99s by 15% and 28%, so the gain fell
    17% (z +5.4). The p50 is the figure a tail moves least, so a shift in it shows the pace of the machine,
    which no window count on one server averages out (in G2 the pace moved 3-6% and the gain still 14%:
    the clause shows the pace, it does not explain every gap). Beside it, the CPU this run's processes spent
    per request (``own_cpu_ms``): the same requests costing more CPU is a slower machine, not longer waits
    (M1, 2026-12-06: benchmarks/process_cpu_monitor.py over each stage read 2.08 CPU ms per request in the pair and
    2.39 in the re-measure, as the median request slowed 23% and 13%)."""
    shifts = _shifts(first, second, lambda w: w.p50_ms)
    if not shifts:
        return ""
    cpu = _shifts(first, second, lambda w: w.own_cpu_ms)
    return (f"; the median request's pace from the {names[0]} to the {names[1]}: {', '.join(shifts)}"
            + (f"; the CPU this run used per request: {', '.join(cpu)}" if cpu else ""))


def _shifts(first: Mapping[str, Sequence[WindowResult]], second: Mapping[str, Sequence[WindowResult]],
            figure: Callable[[WindowResult], float | None]) -> list[str]:
    """Per label, the median of ``figure`` over its windows in each stage and the change between them."""
    out = []
    for label in first:
        before = [v for w in first[label] if (v := figure(w)) is not None and v > 0]
        after = [v for w in second.get(label, []) if (v := figure(w)) is not None and v > 0]
        if before and after:
            a, b = float(np.median(before)), float(np.median(after))
            out.append(f"{label} {100 * (b / a - 1):+.0f}% ({a:.3f} -> {b:.3f} ms)")
    return out
