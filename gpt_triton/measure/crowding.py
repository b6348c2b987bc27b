"""A window other processes crowded is measured again instead of counted (``measure.repeat_crowded``).

Counting a crowded window and reporting it (:mod:`gpt_triton.measure.machine_load`) says why a figure
moved; it does not stop it moving. On the ResNet CNN (2026-12-06, tune Q9 in
benchmarks/results/estimate_resnet_2026-12-06.txt) tests run beside the tuner took 0.22-0.80 cores in
four of the finalist pair's first windows: the baseline's p50 went from 19.5 ms to 37-60 ms and its p99
to 68-84 ms, the winner's p99 from 12-14 ms to 25-30 ms, and two such windows of 24 held the pooled p99:
the estimate read +127% against its re-measure. A window in which other processes used clearly more than
the machine's usual is not what either run would see again, so it is set aside (kept in windows.csv,
marked) and measured again at once: the same candidate, the same place in the alternation.

* **Crowded**: other processes used more than the usual load plus ``CROWDED_SHARE`` of the machine's
  CPUs (0.05 cores on 2 CPUs): a p99 is the slowest 1% of a window's requests, so a crowd over a few
  percent of a window can hold it (benchmarks/crowded_repeat.py). The usual is the median over this
  measurer's counted windows and its uncounted ones (warm-ups, burn-in) that were not crowded themselves;
  0 before any. A node whose other pods hold a steady few cores makes them the usual after one counted
  window (measured again up to ``MAX_IN_A_ROW`` times first), not a crowd. In 13 quiet tunes (Q1-Q3,
  Q6-Q8, Q10, D1-D5, R1: 7,703 windows, 5,373 of them counted) other processes used at most 0.2 cores,
  and more than 0.05 in 7 windows (4 counted).
* **Bounded**: at most ``MAX_IN_A_ROW`` repeats for one window (then the window is counted: a crowd that
  lasts is the machine's state), and at most ``share`` of the counted windows so far, or ``MIN_REPEATS``
  if more (a crowd often comes in a stage's first windows, as in Q9): a machine that stays busy costs a
  quarter more windows, not an endless run.
* Only counted windows (``min_requests`` > 0) are repeated; warm-ups and burn-ins are not counted anyway.
* The usual is read from ``/proc/stat`` less this run's own process tree, so the rule is only right where
  the server is in that tree (the embedded Triton): with ``--triton-url`` the server's own CPU is among the
  "other processes" and a candidate that spins would look crowded, so :func:`gpt_triton.serving.measurer`
  does not use it there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.driver import WindowSample

CROWDED_SHARE = 0.025  # of the machine's CPUs above the usual load: a crowded window
MAX_IN_A_ROW = 5  # repeats of one window before it is counted as it came (Q9's crowd: 4 windows, ~40 s)
MIN_REPEATS = 8  # repeats every measurer may make, whatever its share of the counted windows so far
SET_ASIDE = "crowded"  # WindowResult.set_aside, and windows.csv's set_aside column


def crowded_margin(cpus: int | None = None) -> float:
    """Cores of other processes above the usual that make a window crowded on a machine of ``cpus``."""
    return CROWDED_SHARE * (cpus or os.cpu_count() or 1)


class RepeatCrowded(LoadClient):
    """Any (watched) load client; a counted window that other processes crowded is measured again, and the
    windows set aside ride on the one counted (:attr:`WindowSample.set_aside`)."""

    def __init__(self, inner: LoadClient, share: float, margin_cores: float | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.share = share
        self.margin_cores = crowded_margin() if margin_cores is None else margin_cores
        self._loads: list[float] = []  # other processes' cores in the counted windows and the uncrowded others
        self.counted = 0
        self.repeated = 0

    def usual(self) -> float:
        return float(np.median(self._loads)) if self._loads else 0.0

    def _crowded(self, result: WindowResult) -> bool:
        return result.foreign_cores is not None and result.foreign_cores > self.usual() + self.margin_cores

    def _may_repeat(self, in_a_row: int) -> bool:
        return self.share > 0 and in_a_row < MAX_IN_A_ROW and self.repeated < max(MIN_REPEATS, self.share * self.counted)

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        aside: list[WindowResult] = []
        while True:
            sample = self.inner.window(grpc_url, model_name, requests, load, duration_s, min_requests,
                                       outputs=outputs, metrics_url=metrics_url, seed=seed + len(aside),
                                       payload_start=payload_start, settle_s=settle_s)
            crowded = self._crowded(sample.result)
            if min_requests > 0 and crowded and self._may_repeat(len(aside)):
                self.repeated += 1
                aside.append(sample.result.model_copy(update={"set_aside": SET_ASIDE}))
                continue
            # A warm-up a crowd fell on is not the usual (Q12: one at a stage's start let its first counted
            # window, 0.14 cores, through); a counted window is, crowded or not, once it is counted.
            if sample.result.foreign_cores is not None and (min_requests > 0 or not crowded):
                self._loads.append(sample.result.foreign_cores)
            if min_requests > 0:
                self.counted += 1
            sample.set_aside = aside + sample.set_aside
            return sample


def set_aside_note(doing: str, aside: Sequence[WindowResult], counted: Sequence[WindowResult]) -> str | None:
    """The decision line for a stage's windows set aside; None when there were none."""
    if not aside:
        return None
    cores = [r.foreign_cores or 0.0 for r in aside]
    usual = float(np.median([r.foreign_cores for r in counted if r.foreign_cores is not None] or [0.0]))
    one = len(aside) == 1
    span = f"{cores[0]:.2f}" if one else f"{min(cores):.2f}-{max(cores):.2f}"
    return (f"{doing}: {len(aside)} window{'' if one else 's'} measured again, not counted: other processes used "
            f"{span} cores during {'it' if one else 'them'} against {usual:.2f} in the {len(counted)} counted "
            f"(windows.csv marks them set_aside={SET_ASIDE})")
