"""Load generator on tritonclient's asyncio gRPC client: closed loop, open loop, replay (the public face).

* Closed loop (``kind="concurrency"``): ``concurrency`` workers each send, await, send again.
* Open loop (``kind="rate"``): the arrival times are drawn *before* the window starts (Poisson or
  constant, seeded) and each request's latency is measured from its **scheduled** send time, so a
  generator or server that falls behind shows up as latency instead of silently lowering the rate
  (no coordinated omission). The lag between scheduled and actual send is recorded; the window is
  flagged ``rate_held=False`` when the generator, not the server, was the limit.
* Replay (``kind="replay"``): a JSONL trace ``{"t": s, "inputs": {name: {shape, dtype, data}}}`` with
  its timestamps honoured, or perf_analyzer's input-data JSON ``{"data": [...]}`` (payloads only,
  sent at ``rate`` if given, else closed loop at ``concurrency``).

Where each piece lives (import from here unless you extend one):

* :mod:`~gpt_triton.measure.arrivals` - ``ArrivalProcess`` and its implementations, ``schedule``;
* :mod:`~gpt_triton.measure.replay` - replay-file parsing;
* :mod:`~gpt_triton.measure.driver` - ``run_window``: one window, summarised;
* :mod:`~gpt_triton.measure.sender` - the asyncio send loop of one generator;
* :mod:`~gpt_triton.measure.workers` - spawned generator processes (``processes=2`` or more for rates
  one process cannot hold) and ``pinned`` (the cores the generator gets);
* :mod:`~gpt_triton.measure.server_stats` - Triton's statistics and /metrics around a window.
"""

from __future__ import annotations

from gpt_triton.measure.arrivals import (
    ArrivalProcess,
    ClosedLoop,
    Constant,
    Poisson,
    Replay,
    arrival_process,
    schedule,
)
from gpt_triton.measure.driver import RATE_HELD_FRACTION, SEND_LAG_P99_LIMIT_MS, WindowSample, run_window
from gpt_triton.measure.replay import load_replay
from gpt_triton.measure.server_stats import scrape_metrics
from gpt_triton.measure.workers import pinned

__all__ = [
    "RATE_HELD_FRACTION", "SEND_LAG_P99_LIMIT_MS", "ArrivalProcess", "ClosedLoop", "Constant", "Poisson", "Replay",
    "WindowSample", "arrival_process", "load_replay", "pinned", "run_window", "schedule", "scrape_metrics",
]
