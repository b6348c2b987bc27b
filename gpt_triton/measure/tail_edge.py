"""Is a quantile objective at the edge of a slow cluster? Then its gain is not reproducible to its interval.

Seen on the ResNet CNN (docs/measurement.md, "The ResNet CNN: a p99 at the edge of a slow cluster"): about
1% of requests ran ~1.8x slower in short episodes of the machine (0.3-0.5 s, their share moving with the
clock from 0 to 37% of windows per 10 minutes). The pooled p99 of 12000 requests is the 120th slowest, so
it jumps between the body of the distribution and the cluster as the share crosses 1%: the selection
estimate and the re-measure of the same pair differed by +2.7%, +8.1% and +25.1% in three tunes, each
inside intervals of +/-20-75%. Nothing in one run's windows can say what share the next run will see, and
no estimate over windows did better: the windows' median, trimmed and lower quantiles of the windows'
p99s each missed 5% on one model or the other (benchmarks/results/estimate_resnet_2026-12-06.txt).

What one run *can* say is whether its quantile sits where the density is thin: the quantiles either side
(p98 and p99.5 for a p99; the tail-width ``1 - q`` below and half of it above) are far apart there, and
the slow requests are counted. :func:`tail_edge` reads both sides of a re-measured pair; the tuner says in
the decision log and the verdict when either side's p99.5/p98 reaches :data:`EDGE_SPREAD`, with the gain
at the two neighbours, so the user reads the gain as what it is: this run's, at this share of slow requests.
On the quiet perf_analyzer benchmark server the ResNet pair's spreads were 1.07 (baseline) and 1.13
(winner); where a window caught an episode its p99 rose from 22-25 to 35-36 ms while its p98 stayed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpt_triton.core.measurements import SLOW_FACTOR, TailEdge, TailShape
from gpt_triton.measure.quantiles import quantile_of

EDGE_SPREAD = 1.25


def neighbours(q: float) -> tuple[float, float]:
    """The quantiles either side of ``q``: one tail-width (1 - q) below, half of it above (p99: p98, p99.5)."""
    return 1.0 - 2.0 * (1.0 - q), 1.0 - (1.0 - q) / 2.0


def _name(q: float) -> str:
    return f"p{100.0 * q:.4g}"


def tail_shape(windows: Sequence[np.ndarray], q: float) -> TailShape | None:
    """One side's :class:`TailShape` over its windows' requests; None without requests."""
    parts = [np.asarray(w, dtype=np.float64) for w in windows if np.asarray(w).size]
    if not parts:
        return None
    pooled = np.concatenate(parts)
    low, high = neighbours(q)
    below, at, above = (float(v) for v in np.quantile(pooled, [low, q, high]))
    slow = [int(np.count_nonzero(w > SLOW_FACTOR * np.median(w))) for w in parts]
    lifted = sum(count > (1.0 - q) * w.size for count, w in zip(slow, parts, strict=True))
    # The requests the quantile rests on, in request order within each window: does one follow another (a
    # spell) or a request in the body (an isolated stall)? Read at the quantile, not at SLOW_FACTOR: milder
    # slowness comes in runs even where the stalls that make a p99 come one at a time (conv_attention's).
    tails = [w > at for w in parts]
    after_tail = sum(int(np.count_nonzero(m[1:] & m[:-1])) for m in tails)
    tail_after_first = sum(int(np.count_nonzero(m[1:])) for m in tails)
    return TailShape(below=below, at=at, above=above, slow_share=sum(slow) / pooled.size, slow_windows=lifted,
                     windows=len(parts), in_runs=after_tail / tail_after_first if tail_after_first else None)


def tail_edge(baseline_windows: Sequence[np.ndarray], winner_windows: Sequence[np.ndarray], metric: str,
              edge_spread: float = EDGE_SPREAD) -> TailEdge | None:
    """The pair's tails around ``metric`` (p90 and p99; None for p50, the mean and throughput, whose
    estimate rests on the body, or without requests on a side)."""
    q = quantile_of(metric)
    if q is None or q < 0.9:
        return None
    base, win = tail_shape(baseline_windows, q), tail_shape(winner_windows, q)
    if base is None or win is None or win.below <= 0 or win.above <= 0:
        return None
    low, high = neighbours(q)
    return TailEdge(metric=metric, neighbours=(_name(low), _name(high)), baseline=base, winner=win,
                    below_ratio=base.below / win.below, above_ratio=base.above / win.above, edge_spread=edge_spread)
