"""One gain re-measured on several fresh servers, pooled with their spread (core.measurements.between_servers,
select.gain_over_servers; measure.remeasure_servers)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gpt_triton.core.measurements import (
    Interval,
    LatencyStats,
    LoadProfile,
    WindowResult,
    between_servers,
    log_standard_error,
)
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.loadgen import WindowSample
from gpt_triton.measure.runs import remeasure_result
from gpt_triton.select import gain, gain_over_servers

Z95 = float(stats.norm.ppf(0.975))


def _interval(log_value: float, se: float) -> Interval:
    return Interval(value=float(np.exp(log_value)), low=float(np.exp(log_value - Z95 * se)),
                    high=float(np.exp(log_value + Z95 * se)))


def test_servers_that_agree_pool_to_the_inverse_variance_mean_with_no_spread_added() -> None:
    each = [_interval(np.log(1.50), 0.08), _interval(np.log(1.55), 0.10), _interval(np.log(1.48), 0.06)]
    pooled, spread = between_servers(each)
    w = np.array([1 / 0.08**2, 1 / 0.10**2, 1 / 0.06**2])
    y = np.log([1.50, 1.55, 1.48])
    assert spread.between_sd == 0.0 and spread.p_value > 0.5
    assert pooled.value == pytest.approx(np.exp(np.sum(w * y) / np.sum(w)), rel=1e-6)
    assert log_standard_error(pooled) == pytest.approx(1 / np.sqrt(np.sum(w)), rel=1e-6)
    # narrower than any one server's: three runs know the ratio better than one
    assert log_standard_error(pooled) < min(log_standard_error(r) for r in each)
    assert spread.servers == each and "spread is within their own intervals (Q " in spread.describe()


def test_servers_that_differ_beyond_their_intervals_widen_the_pooled_one() -> None:
    each = [_interval(np.log(1.30), 0.04), _interval(np.log(1.70), 0.04)]
    pooled, spread = between_servers(each)
    assert spread.p_value < 0.001 and spread.between_sd > 0.1  # log(1.7/1.3) = 0.27 apart, se 0.04 each
    # the pooled interval spans both servers' figures: neither run alone says where the gain is
    assert pooled.low < 1.30 < 1.70 < pooled.high
    assert pooled.value == pytest.approx(np.sqrt(1.30 * 1.70), rel=1e-6)  # equal weights
    assert "more than their own intervals account for" in spread.describe() and "2 servers" in spread.describe()


def test_the_pooled_interval_covers_a_gain_that_moves_between_servers_more_often_than_one_server_does() -> None:
    """Each server's true log gain is the gain plus a server effect (sd 0.06); each run measures it with
    se 0.08. One server's interval leaves the server effect out; three pooled put it back."""
    rng = np.random.default_rng(7)
    truth, one, pooled_hits, trials = np.log(1.5), 0, 0, 2000
    for _ in range(trials):
        runs = truth + rng.normal(0, 0.06, 3) + rng.normal(0, 0.08, 3)
        each = [_interval(v, 0.08) for v in runs]
        one += each[0].low <= np.exp(truth) <= each[0].high
        pooled, _ = between_servers(each)
        pooled_hits += pooled.low <= np.exp(truth) <= pooled.high
    # one server: P(|N(0, 0.1)| < 1.96 * 0.08) = 88%
    assert one / trials == pytest.approx(2 * stats.norm.cdf(Z95 * 0.08 / 0.1) - 1, abs=0.025)
    assert pooled_hits / trials > one / trials + 0.02


def test_one_server_is_its_own_interval_and_nonsense_is_refused() -> None:
    only = _interval(np.log(1.2), 0.05)
    pooled, spread = between_servers([only])
    assert pooled.value == pytest.approx(only.value) and pooled.low == pytest.approx(only.low)
    assert spread.between_sd == 0.0 and spread.p_value == 1.0
    with pytest.raises(ValueError, match="at least one"):
        between_servers([])
    with pytest.raises(ValueError, match="positive"):
        between_servers([only, Interval(value=1.1, low=0.0, high=1.3)])


def _server(rng: np.random.Generator, base_ms: float, win_ms: float, windows: int = 6) -> tuple:
    def result(ms: float):  # type: ignore[no-untyped-def]
        samples = []
        for _ in range(windows):
            lat = rng.lognormal(np.log(ms), 0.2, 600)
            samples.append(WindowSample(WindowResult(duration_s=1, requests=lat.size, errors=0, throughput=lat.size,
                                                     p50_ms=float(np.median(lat)), p90_ms=0, p99_ms=float(np.percentile(lat, 99)),
                                                     mean_ms=float(lat.mean())), lat))
        return remeasure_result(LoadProfile(), samples, MeasureSpec(bootstrap_resamples=300), 0)
    return result(base_ms), result(win_ms)


def test_the_gain_over_servers_pools_their_windows_and_their_ratios() -> None:
    rng = np.random.default_rng(3)
    objective, measure = ObjectiveSpec(metric="p99"), MeasureSpec(bootstrap_resamples=300)
    first, second = _server(rng, 10.0, 7.0), _server(rng, 10.0, 5.0)  # the second server: a 2x gain, not 1.43x
    alone = gain_over_servers([first], objective, measure, 1.4)
    assert alone.servers is None and alone.selection_estimate_ratio == 1.4
    assert alone.ratio == gain(*first, objective, 0.95, 300).ratio
    both = gain_over_servers([first, second], objective, measure, 1.4)
    assert both.servers is not None and len(both.servers.servers) == 2
    assert both.servers.servers[0] == alone.ratio and both.servers.between_sd > 0
    assert both.servers.servers[0].value < both.ratio.value < both.servers.servers[1].value
    assert both.significant == (both.ratio.low > 1.0)
    # the stats (and the report's plot) rest on every server's windows
    assert isinstance(both.remeasured_baseline, LatencyStats) and both.remeasured_winner is not None
    assert len(both.remeasured_baseline.windows) == 12 and len(both.remeasured_winner.windows) == 12
    pooled_base = np.concatenate([s.latencies_ms for r in (first[0], second[0]) for s in r.samples])
    assert both.baseline_ms == pytest.approx(np.percentile(pooled_base, 99))
    with pytest.raises(ValueError, match="at least one"):
        gain_over_servers([], objective, measure)
