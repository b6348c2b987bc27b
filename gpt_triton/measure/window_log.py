"""Every window of a run, one CSV row each, in the order the windows ran (``RUN_DIR/windows.csv``): the
counted ones, and a fresh server's burn-in as round 0 (:func:`read_windows` leaves those out unless asked).

report.json keeps each candidate's windows from the search and the re-measure's pair, but not the
finalist stage's (it judges copies), and none of them says which window ran after which. This file
keeps all of it, so a figure of a run (the finalist estimate, one phase of the re-measure, a burst that
moved a p99) can be re-derived or cross-checked afterwards without running again. Rows are appended as
the windows end, so a run that stops half-way keeps what it measured; ``run_id`` tells runs apart
when ``--out`` or ``--resume`` reuses a directory. ``foreign_cores`` and ``steal_cores`` say what else the
machine ran during the window, ``own_cpu_ms`` the CPU this run's processes spent per request in it
(:mod:`gpt_triton.measure.machine_load`; empty where unknown). Each counted window's requests' own latencies
go to ``RUN_DIR/latencies.f32`` (little-endian float32 ms, appended in the order run; the row's
``latency_offset`` and ``latency_count`` locate them, :func:`window_latencies` reads them), so that any
statistic over requests (a p99 pooled over several windows, as perf_analyzer prints one) can be formed
afterwards. A window
other processes crowded and that was measured again in its place (:mod:`gpt_triton.measure.crowding`) is
kept with ``set_aside`` = ``crowded``, just before the window that replaced it, under the same round;
:func:`read_windows` leaves it out unless asked. A file an older version wrote with other columns is moved
aside (``windows.<header digest>.csv``), not appended to.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from gpt_triton.core.measurements import Interval, WindowResult
from gpt_triton.measure.paired import log_ratio_interval, round_log_ratios

WINDOWS_FILE = "windows.csv"
FIELDS = ("run_id", "stage", "candidate", "load", "round", "ended_utc", "duration_s", "requests", "errors",
          "p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput", "foreign_cores", "steal_cores", "set_aside",
          "own_cpu_ms", "latency_offset", "latency_count")
LATENCIES_FILE = "latencies.f32"

# The round of a burn-in's windows (measure.burn_in_s): sent before a fresh server's first counted window,
# counted in nothing, kept so that the transient they absorb can be read from a tune afterwards.
BURN_IN_ROUND = "0"

# (candidate id, load label, round, the window's figures, its requests' latencies in ms or None): what a
# Measurer reports after each window as it ends, counted ones as rounds 1, 2, ... and a burn-in's as round 0
WindowSink = Callable[[str, str, int, WindowResult, np.ndarray | None], None]


class WindowLog:
    """Appends the windows of every stage of one run to ``path``; :meth:`sink` gives a stage its writer."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._checked = False  # whether an existing file's columns were compared with FIELDS
        # (stage, candidate, window) of every counted window, in the order run: what :meth:`counted` reads
        self._counted: list[tuple[str, str, WindowResult]] = []

    def counted(self, stages: Sequence[str], candidate: str | None = None) -> list[WindowResult]:
        """The counted windows of ``stages`` (the burn-in and those measured again are in none), of
        ``candidate`` only when given, in the order run: what the machine-load and pace notes read."""
        return [w for stage, cid, w in self._counted if stage in stages and (candidate is None or cid == candidate)]

    def sink(self, stage: str) -> WindowSink:
        def write(candidate: str, load: str, round_no: int, result: WindowResult,
                  latencies_ms: np.ndarray | None = None) -> None:
            if round_no != int(BURN_IN_ROUND) and result.set_aside is None:
                self._counted.append((stage, candidate, result))
            self._set_aside_other_columns()
            located = ["", ""]
            if latencies_ms is not None:
                store = self.path.with_name(LATENCIES_FILE)
                with store.open("ab") as raw:  # offsets count float32s from the file's start
                    located = [str(raw.tell() // 4), str(len(latencies_ms))]
                    raw.write(np.asarray(latencies_ms, dtype="<f4").tobytes())
            new = not self.path.exists() or self.path.stat().st_size == 0
            with self.path.open("a", newline="") as handle:  # one short append per window (~1 s apart)
                writer = csv.writer(handle)
                if new:
                    writer.writerow(FIELDS)
                writer.writerow([
                    self.run_id, stage, candidate, load, round_no,
                    datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), f"{result.duration_s:.4f}",
                    result.requests, result.errors, f"{result.p50_ms:.4f}", f"{result.p90_ms:.4f}",
                    f"{result.p99_ms:.4f}", f"{result.mean_ms:.4f}", f"{result.throughput:.2f}",
                    _three_decimals(result.foreign_cores), _three_decimals(result.steal_cores), result.set_aside or "",
                    _three_decimals(result.own_cpu_ms), *located,
                ])

        return write

    def _set_aside_other_columns(self) -> None:
        if self._checked:
            return
        self._checked = True
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open(newline="") as handle:
            header = next(csv.reader(handle), [])
        if tuple(header) != FIELDS:
            digest = hashlib.sha256(",".join(header).encode()).hexdigest()[:8]
            self.path.rename(self.path.with_name(f"{self.path.stem}.{digest}{self.path.suffix}"))


def _three_decimals(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def read_windows(path: Path, burn_in: bool = False, set_aside: bool = False) -> list[dict[str, str]]:
    """The rows of a windows.csv, in the order the windows ran: the counted windows, with ``burn_in`` the
    burn-in's too (round 0), with ``set_aside`` those measured again (an older file has no such rows)."""
    with path.open(newline="") as handle:
        return [row for row in csv.DictReader(handle)
                if (burn_in or row["round"] != BURN_IN_ROUND) and (set_aside or not row.get("set_aside"))]


def window_latencies(windows_csv: Path, row: dict[str, str]) -> np.ndarray:
    """The latencies (ms) of the requests of one row of :func:`read_windows`; empty where none were kept (a
    window measured again, a burn-in, a file written before they were)."""
    offset, count = row.get("latency_offset") or "", row.get("latency_count") or ""
    if not offset or not count:
        return np.zeros(0, dtype=np.float32)
    return np.fromfile(windows_csv.with_name(LATENCIES_FILE), dtype="<f4", count=int(count), offset=4 * int(offset))


def stage_pair_ratio(rows: Sequence[dict[str, str]], stage: str, pair: tuple[str, str], column: str,
                     min_rounds: int = 1) -> Interval | None:
    """``pair`` = (baseline, winner)'s ratio of ``column`` (``p99_ms``, ``p50_ms``) in ``stage``, paired by round
    as the tuner forms its gain (:mod:`.paired`) from :func:`read_windows`' rows: the two sides' windows of one
    round set against each other, a round missing either side left out; None under ``min_rounds`` rounds."""
    by_round: dict[int, dict[str, float]] = {}
    for r in rows:
        if r["stage"] == stage and r["candidate"] in pair:
            by_round.setdefault(int(r["round"]), {})[r["candidate"]] = float(r[column])
    rounds = [values for _, values in sorted(by_round.items()) if len(values) == 2]
    if len(rounds) < max(1, min_rounds):
        return None
    return log_ratio_interval(round_log_ratios([v[pair[0]] for v in rounds], [v[pair[1]] for v in rounds]))
