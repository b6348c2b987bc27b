"""The gain paired by round: what a slow spell in a few windows does to it, its interval's coverage, pairing."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.measure.gain_precision import gain_precision
from gpt_triton.measure.paired import (
    log_ratio_interval,
    paired_ratio_interval,
    round_log_ratios,
    window_values,
)
from gpt_triton.measure.stats import window_ratio_interval


def window(rng: np.random.Generator, scale_ms: float, size: int = 500, stall_ms: float = 0.0,
           stalled: float = 0.0) -> np.ndarray:
    """One window's latencies; with ``stall_ms``, a share ``stalled`` of its requests caught a slow spell."""
    lat = scale_ms * (1 + rng.exponential(0.08, size))
    hit = rng.random(size) < stalled
    return lat + stall_ms * hit


def test_a_slow_spell_in_a_few_windows_moves_the_pooled_ratio_not_the_paired_one() -> None:
    # ResNet's shape: baseline 20 ms, winner 11 ms; in 3 of 24 rounds a spell of a second adds 7 ms to a tenth
    # of the winner window's requests (the faster candidate's p99 moves most in proportion).
    rng = np.random.default_rng(5)
    quiet_base = [window(rng, 20.0) for _ in range(24)]
    quiet_win = [window(rng, 11.0) for _ in range(24)]
    spelled_win = [window(rng, 11.0, stall_ms=7.0, stalled=0.1) if i in (4, 13, 20) else w
                   for i, w in enumerate(quiet_win)]
    quiet = paired_ratio_interval(quiet_base, quiet_win)
    paired = paired_ratio_interval(quiet_base, spelled_win)
    pooled_quiet = window_ratio_interval(quiet_base, quiet_win, "p99", 0.95, 300)
    pooled = window_ratio_interval(quiet_base, spelled_win, "p99", 0.95, 300)
    assert pooled.value / pooled_quiet.value - 1 < -0.12  # three windows of 24 hold the pooled p99
    assert abs(paired.value / quiet.value - 1) < 0.06  # one round in eight moved, by a geometric mean's share
    assert paired.high / paired.low > quiet.high / quiet.low  # and the interval says the rounds disagree
    assert paired.low < quiet.value < paired.high


def test_the_t_interval_covers_the_true_ratio_at_about_its_level() -> None:
    # Per-window levels drift (each window a few percent faster or slower, shared by neither side).
    rng = np.random.default_rng(11)
    true_ratio = 1.6
    covered = 0
    trials = 200
    for _ in range(trials):
        base = [window(rng, 16.0 * np.exp(0.04 * rng.standard_normal()), size=200) for _ in range(12)]
        win = [window(rng, 10.0 * np.exp(0.04 * rng.standard_normal()), size=200) for _ in range(12)]
        iv = paired_ratio_interval(base, win, "p50")
        covered += iv.low <= true_ratio <= iv.high
    assert 0.88 <= covered / trials <= 0.995


def test_rounds_pair_by_position_and_drop_what_is_not_a_window() -> None:
    ratios = round_log_ratios([2.0, 4.0, np.nan, 3.0, 9.0], [1.0, 2.0, 1.0, 0.0])
    assert ratios == pytest.approx(np.log([2.0, 2.0]))  # round 3 has no baseline value, round 4 a zero, round 5 no winner
    values = window_values([np.array([1.0, 3.0]), np.zeros(0)], "mean")
    assert values[0] == 2.0 and np.isnan(values[1])
    one = log_ratio_interval([np.log(1.5)])
    assert one.value == one.low == one.high == pytest.approx(1.5)
    with pytest.raises(ValueError, match="at least one round"):
        log_ratio_interval([])


def test_the_stop_rule_uses_the_spec_statistic() -> None:
    rng = np.random.default_rng(2)
    base = [window(rng, 20.0) for _ in range(12)]
    win = [window(rng, 11.0, stall_ms=7.0, stalled=0.1) if i == 3 else window(rng, 11.0) for i in range(12)]
    paired = gain_precision(base, win, "p99", 0.03)
    pooled = gain_precision(base, win, "p99", 0.03, statistic="pooled")
    assert paired is not None and pooled is not None
    assert paired.ratio.value == pytest.approx(paired_ratio_interval(base, win).value)
    assert pooled.ratio.value == pytest.approx(np.percentile(np.concatenate(base), 99)
                                               / np.percentile(np.concatenate(win), 99))
    assert paired.ratio.value > pooled.ratio.value  # the one spelled window holds the pooled winner p99
    assert paired.windows == pooled.windows == 12
