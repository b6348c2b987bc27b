"""The cross-check's figures (gpt_triton/measure/cross_check.py, gpt_triton/core/cross_check.py): the other
client's gain formed as the tuner's, the agreement of the two with both widths, the client p50s, the
words; and the spec's refusals."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from gpt_triton.core.cross_check import AGREEMENT_TOLERANCE, agreement_interval
from gpt_triton.core.measurements import Interval, LatencyStats, LoadProfile, WindowResult
from gpt_triton.core.spec import MeasureSpec, TuneSpec
from gpt_triton.measure.cross_check import client_cross_check
from gpt_triton.measure.driver import WindowSample
from gpt_triton.measure.paired import paired_ratio_interval
from gpt_triton.measure.runs import RemeasureResult


def windowed(windows: list[np.ndarray]) -> RemeasureResult:
    results = [WindowResult(duration_s=1, requests=w.size, errors=0, throughput=w.size, p50_ms=0, p90_ms=0,
                            p99_ms=0, mean_ms=0) for w in windows]
    return RemeasureResult(stats=LatencyStats(load=LoadProfile(), windows=results),
                           samples=[WindowSample(r, w) for r, w in zip(results, windows, strict=True)])


def side(rng: np.random.Generator, ms: float, rounds: int, extra_ms: float = 0.0) -> RemeasureResult:
    return windowed([ms * (1 + rng.exponential(0.05, 500)) + extra_ms for _ in range(rounds)])


def test_the_agreement_is_the_ratio_of_the_two_gains_with_both_widths() -> None:
    tuner, other = Interval(value=1.689, low=1.559, high=1.830), Interval(value=1.741, low=1.614, high=1.878)
    agreement, z = agreement_interval(tuner, other)
    assert agreement.value == pytest.approx(1.689 / 1.741)
    assert agreement.low < agreement.value < agreement.high
    # Wider than either alone on the log scale: both samples' noise is in it.
    width = np.log(agreement.high / agreement.low)
    assert width > np.log(tuner.high / tuner.low) and width > np.log(other.high / other.low)
    assert z < 0 and agreement_interval(other, tuner)[1] == pytest.approx(-z)
    # No width at all: the point alone, no z.
    point = Interval(value=1.2, low=1.2, high=1.2)
    assert agreement_interval(point, point) == (Interval(value=1.0, low=1.0, high=1.0), 0.0)


def test_a_client_that_adds_a_fixed_cost_per_request_shows_in_p50_more_than_in_the_gain() -> None:
    rng = np.random.default_rng(7)
    base, win = side(rng, 20.0, 12), side(rng, 10.0, 12)
    # The other client sent the same traffic, each request 0.5 ms slower end to end; in the same minutes.
    other_base = windowed([w + 0.5 for w in base.window_latencies_ms])
    other_win = windowed([w + 0.5 for w in win.window_latencies_ms])
    check = client_cross_check((base, win), (other_base, other_win), "p99", "paired", ("builtin", "perf_analyzer"),
                               "Perf Analyzer Version 2.41.0")
    assert check.tuner_ratio == paired_ratio_interval(base.window_latencies_ms, win.window_latencies_ms, "p99")
    assert check.ratio.value == pytest.approx(paired_ratio_interval(
        other_base.window_latencies_ms, other_win.window_latencies_ms, "p99").value)
    # A fixed cost shrinks the other's gain a little (it is added to both sides): the tuner's is the larger,
    # within 5%; the p50s show the cost per request (5% of the winner's 10 ms), the smaller side more.
    assert 1.0 < check.agreement.value < 1.0 + AGREEMENT_TOLERANCE and check.within
    assert check.p50_ratio["baseline"] < 1.0 and check.p50_ratio["winner"] < check.p50_ratio["baseline"]
    assert check.windows == 12 and check.requests == 2 * 12 * 500
    # The p50 gains (each client's own, paired by round) are set beside each other too.
    p50_gains = [paired_ratio_interval(b.window_latencies_ms, w.window_latencies_ms, "p50").value
                 for b, w in ((base, win), (other_base, other_win))]
    assert check.p50_agreement is not None
    assert check.p50_agreement.value == pytest.approx(p50_gains[0] / p50_gains[1])
    words = check.describe("p99")
    assert "perf_analyzer on the re-measure's server, in turns with it" in words
    assert f"within {100 * AGREEMENT_TOLERANCE:.0f}%" in words and "builtin p50 / perf_analyzer p50" in words
    assert f"p50 gains, builtin / perf_analyzer: {check.p50_agreement.value:.3f} [" in words
    # A p50 objective: its agreement is the p50's, not repeated.
    assert client_cross_check((base, win), (other_base, other_win), "p50", "paired", ("builtin", "perf_analyzer")
                              ).p50_agreement is None


def test_two_gains_apart_beyond_both_widths_are_said_to_differ() -> None:
    rng = np.random.default_rng(11)
    base, win = side(rng, 20.0, 24), side(rng, 10.0, 24)
    slower_win = side(rng, 12.5, 24)  # the other client saw the winner 25% slower: gain 1.6, not 2.0
    check = client_cross_check((base, win), (side(rng, 20.0, 24), slower_win), "p99", "paired", ("builtin", "perf_analyzer"))
    assert not check.within and check.z > 3
    assert "apart, beyond 5%, and beyond what both intervals allow" in check.describe("p99")
    # The same gap on two rounds a side: the intervals allow it, and the words say more windows would tell.
    few = client_cross_check((windowed(base.window_latencies_ms[:2]), windowed(win.window_latencies_ms[:2])),
                             (windowed([w * 1.0 for w in base.window_latencies_ms[2:4]]),
                              windowed([w * 1.25 * (1 + 0.3 * k) for k, w in enumerate(win.window_latencies_ms[2:4])])),
                             "p99", "paired", ("builtin", "perf_analyzer"))
    assert not few.within and "within what both intervals allow: more windows would tell" in few.describe("p99")


def test_a_pooled_gain_is_cross_checked_pooled() -> None:
    rng = np.random.default_rng(3)
    base, win = side(rng, 20.0, 6), side(rng, 10.0, 6)
    check = client_cross_check((base, win), (side(rng, 20.0, 6), side(rng, 10.0, 6)), "p99", "pooled",
                               ("builtin", "perf_analyzer"), resamples=300)
    pooled = float(np.percentile(base.latencies_ms, 99) / np.percentile(win.latencies_ms, 99))
    assert check.tuner_ratio.value == pytest.approx(pooled, rel=1e-6)


def test_the_spec_refuses_a_cross_check_by_the_client_itself_or_of_a_throughput_gain() -> None:
    with pytest.raises(ValidationError, match="cross_check .perf_analyzer. is the load client itself"):
        MeasureSpec(client="perf_analyzer", cross_check="perf_analyzer")
    assert MeasureSpec(client="perf_analyzer", cross_check="builtin").cross_check == "builtin"
    with pytest.raises(ValidationError, match="needs a latency objective"):
        TuneSpec.model_validate({"measure": {"cross_check": "perf_analyzer"}, "objective": {"metric": "throughput"}})
    assert MeasureSpec().cross_check == "none"
