"""Every window of a run, one CSV row each, in the order the windows ran (``RUN_DIR/windows.csv``): the
counted ones, and a fresh server's burn-in as round 0 (:func:`read_windows` leaves those out unless asked).

report.json keeps each candidate's windows from the search and the re-measure's pair, but not the
finalist stage's (it judges copies), and none of them says which window ran after which. This file
keeps all of it, so a figure of a run (the finalist estimate, one phase of the re-measure, a burst that
moved a p99) can be re-derived or cross-checked afterwards without running again. Rows are appended as
the windows end, so a run that stops half-way keeps what it measured; ``run_id`` tells runs apart
when ``--out`` or ``--resume`` reuses a directory.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from gpt_triton.core.measurements import WindowResult

WINDOWS_FILE = "windows.csv"
FIELDS = ("run_id", "stage", "candidate", "load", "round", "ended_utc", "duration_s", "requests", "errors",
          "p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput")

# The round of a burn-in's windows (measure.burn_in_s): sent before a fresh server's first counted window,
# counted in nothing, kept so that the transient they absorb can be read from a tune afterwards.
BURN_IN_ROUND = "0"

# (candidate id, load label, round, the window's figures): what a Measurer reports after each window as it
# ends, counted ones as rounds 1, 2, ... and a burn-in's as round 0
WindowSink = Callable[[str, str, int, WindowResult], None]


class WindowLog:
    """Appends the windows of every stage of one run to ``path``; :meth:`sink` gives a stage its writer."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id

    def sink(self, stage: str) -> WindowSink:
        def write(candidate: str, load: str, round_no: int, result: WindowResult) -> None:
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
                ])

        return write


def read_windows(path: Path, burn_in: bool = False) -> list[dict[str, str]]:
    """The rows of a windows.csv, in the order the windows ran: the counted windows, and with ``burn_in``
    the burn-in's too (round 0)."""
    with path.open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if burn_in or row["round"] != BURN_IN_ROUND]
