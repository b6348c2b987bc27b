"""How many requests a quantile needs, and what a quantile from too few requests can honestly say.

A sample quantile rests on the requests *beyond* it: a window of 120 requests has a "p99" that is its
second-largest sample, so one scheduler hiccup moves it by the hiccup. Issue 16 saw selection declare
48 of 59 candidates a tie, spanning 1.75x in p99, from 2 s windows at 60 requests/s. So:

* :func:`requests_needed` - a quantile's estimate needs ``tail`` requests beyond it (default 5: p99
  needs 500 requests, p90 50, p50 10). The harness sizes every window of the objective's load to hold
  that many (:func:`window_requests`), so a window's length follows from the quantile and the observed
  rate (:func:`sizing_note` says how long that made the windows).
* :func:`order_statistic_interval` - the distribution-free interval of a quantile from the order
  statistics (the number of samples below the true q-quantile is Binomial(n, q), scipy.stats.binom).
  It assumes independent requests, so it is a *floor* on the interval: :func:`widen_for_sample_size`
  widens a bootstrap interval to contain it, and when the sample is too small for an upper order
  statistic to exist at all the quantile is unbounded above (``tail_bounded`` false) - selection
  refuses such an objective instead of reporting it as tight.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from gpt_triton.core.measurements import Interval

QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
DEFAULT_TAIL_REQUESTS = 5


def quantile_of(metric: str) -> float | None:
    """The quantile a metric name reads (p99 -> 0.99); None for the mean and throughput."""
    return QUANTILES.get(metric)


def requests_needed(metric: str, tail: int = DEFAULT_TAIL_REQUESTS) -> int:
    """Requests an estimate of ``metric`` needs: ``tail`` of them beyond the quantile (p99 with tail 5:
    500). The mean and throughput need no tail: 1."""
    q = quantile_of(metric)
    if q is None:
        return 1
    return int(math.ceil(tail / (1.0 - q) - 1e-9))


def window_requests(metric: str, configured_min: int, tail: int = DEFAULT_TAIL_REQUESTS) -> int:
    """The minimum requests per window at the objective's load: the spec's, or what the quantile needs."""
    return max(int(configured_min), requests_needed(metric, tail))


def sizing_note(metric: str, configured_min: int, window_s: float, observed_rate: float | None,
                tail: int = DEFAULT_TAIL_REQUESTS) -> str:
    """One line for the decision log: how many requests each window holds and how long that makes it."""
    need = window_requests(metric, configured_min, tail)
    text = (f"{metric} objective: every window at the objective's load holds at least {need} requests "
            f"({tail} beyond the {metric})" if quantile_of(metric) is not None else
            f"{metric} objective: every window holds at least {need} requests")
    if observed_rate and observed_rate > 0:
        length = max(window_s, need / observed_rate)
        text += f"; at the observed {observed_rate:.4g} requests/s a window lasts about {length:.3g} s"
    return text


def order_statistic_ranks(n: int, q: float, level: float = 0.95) -> tuple[int, int | None]:
    """1-based ranks (l, u) of the order statistics bracketing the q-quantile with probability >= ``level``:
    P(X(l) <= quantile <= X(u)) >= level, symmetric in the two tails. ``u`` is None when even the largest
    sample cannot bound the quantile from above at this level (too few samples)."""
    if n <= 0:
        return 1, None
    alpha = (1.0 - level) / 2.0
    # Count of samples below the quantile: B ~ Binomial(n, q). X(l) <= quantile iff B >= l.
    lower = int(stats.binom.ppf(alpha, n, q))  # P(B <= lower - 1) <= alpha  ->  l = lower
    lower = max(lower, 0)
    upper = int(stats.binom.ppf(1.0 - alpha, n, q)) + 1  # X(u) >= quantile iff B < u
    return max(lower, 1), (upper if upper <= n else None)


def order_statistic_interval(samples: np.ndarray, q: float, level: float = 0.95) -> tuple[float, float | None]:
    """The distribution-free ``level`` interval of the q-quantile; upper bound None when unbounded."""
    data = np.sort(np.asarray(samples, dtype=np.float64))
    low_rank, high_rank = order_statistic_ranks(data.size, q, level)
    if data.size == 0:
        raise ValueError("order_statistic_interval needs at least one sample")
    return float(data[low_rank - 1]), (None if high_rank is None else float(data[high_rank - 1]))


def widen_for_sample_size(interval: Interval, samples: np.ndarray, metric: str) -> tuple[Interval, bool]:
    """``interval`` widened to contain the order-statistic interval of ``metric`` over ``samples``, and
    whether the quantile is bounded above at all. Where no upper order statistic exists the upper bound
    becomes the largest sample and the second value is False: the estimate is not to be trusted."""
    q = quantile_of(metric)
    data = np.asarray(samples, dtype=np.float64)
    if q is None or data.size == 0:
        return interval, True
    low, high = order_statistic_interval(data, q, interval.level)
    bounded = high is not None
    top = float(data.max()) if high is None else high
    return Interval(value=interval.value, low=min(interval.low, low), high=max(interval.high, top),
                    level=interval.level), bounded
