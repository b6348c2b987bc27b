"""The stop rule of the finalist stage and the re-measure: a gain is measured to a known width."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.measurements import Interval
from gpt_triton.measure.gain_precision import (
    GainPrecision,
    gain_precision,
    next_check,
    precision_note,
    relative_half_width,
    shortfall_note,
    windows_to_reach,
)


def windows(rng: np.random.Generator, scale_ms: float, count: int, size: int, drift: float = 0.0) -> list[np.ndarray]:
    return [scale_ms * (1 + drift * rng.standard_normal()) * (1 + rng.exponential(0.2, size)) for _ in range(count)]


def test_relative_half_width_is_the_wider_side() -> None:
    assert relative_half_width(Interval(value=2.0, low=1.8, high=2.4)) == pytest.approx(0.2)
    assert relative_half_width(Interval(value=2.0, low=1.0, high=2.1)) == pytest.approx(0.5)
    assert relative_half_width(Interval(value=0.0, low=0.0, high=0.0)) == float("inf")


def test_the_interval_narrows_with_windows_and_the_target_decides() -> None:
    rng = np.random.default_rng(3)
    base, lead = windows(rng, 2.0, 24, 500, 0.05), windows(rng, 1.6, 24, 500, 0.05)
    few = gain_precision(base[:3], lead[:3], "p99", 0.03)
    many = gain_precision(base, lead, "p99", 0.03)
    assert few is not None and many is not None
    assert many.half_width < few.half_width  # more windows, a narrower interval
    assert many.windows == 24 and few.windows == 3
    assert many.ratio.low < 2.0 / 1.6 < many.ratio.high  # the true ratio of the two scales
    assert gain_precision(base, lead, "p99", 1.0) is not None and gain_precision(base, lead, "p99", 1.0).reached  # type: ignore[union-attr]
    assert not gain_precision(base[:3], lead[:3], "p99", 1e-4).reached  # type: ignore[union-attr]


def test_no_interval_before_three_windows_or_for_throughput() -> None:
    rng = np.random.default_rng(0)
    base, lead = windows(rng, 2.0, 3, 100), windows(rng, 1.0, 3, 100)
    assert gain_precision(base[:2], lead, "p99", 0.03) is None
    assert gain_precision(base, lead + [np.zeros(0)], "p50", 0.03) is not None  # empty windows are skipped
    assert gain_precision(base, lead, "throughput", 0.03) is None
    note = precision_note("re-measure", ("b", "w"), None, 0.03)
    assert "not estimated" in note


def test_the_note_says_whether_the_target_was_reached() -> None:
    rng = np.random.default_rng(1)
    base, lead = windows(rng, 2.0, 6, 300), windows(rng, 1.0, 6, 300)
    wide = gain_precision(base, lead, "p50", 0.5)
    narrow = gain_precision(base, lead, "p50", 1e-6)
    assert wide is not None and narrow is not None
    assert "target +/-50.0% reached" in precision_note("finalists", ("b", "w"), wide, 0.5)
    assert "NOT reached" in precision_note("finalists", ("b", "w"), narrow, 1e-6)
    assert "after 6 windows each (1800 + 1800 requests)" in precision_note("finalists", ("b", "w"), narrow, 1e-6)
    short = gain_precision(base, lead[:4], "p50", 0.5)
    assert short is not None and short.windows == 4 and short.requests == (1800, 1200)



def found_at(half_width: float) -> GainPrecision:
    return GainPrecision(ratio=Interval(value=1.5, low=1.5 - half_width, high=1.5 + half_width),
                         half_width=half_width, windows=0, reached=False, requests=(0, 0))


def test_checks_are_spaced_geometrically_or_by_the_projected_width() -> None:
    assert next_check(2, None, 0.03) == 3  # no interval yet: the next round
    assert next_check(40, found_at(0.20), 0.03) == 50  # far from the target: a quarter more windows
    assert next_check(40, found_at(0.033), 0.03) == 49  # near it: where 1/sqrt(windows) projects it
    assert next_check(40, found_at(0.0301), 0.03) == 41  # almost there: the next round
    assert next_check(3, found_at(0.5), 0.03) == 4  # always at least one more round
    assert next_check(10, found_at(float("inf")), 0.03) == 13
    schedule, windows = [], 3
    while windows <= 72:
        schedule.append(windows)
        windows = next_check(windows, found_at(0.2), 0.03)
    assert schedule == [3, 4, 5, 7, 9, 12, 15, 19, 24, 30, 38, 48, 60]  # 13 checks for 72 windows, not 70


def at(windows: int, half_width: float) -> GainPrecision:
    return GainPrecision(ratio=Interval(value=1.5, low=1.5 / (1 + half_width), high=1.5 * (1 + half_width)),
                         half_width=half_width, windows=windows, reached=False, requests=(0, 0))


def test_a_run_stopped_short_says_what_the_target_would_have_cost() -> None:
    # +/-12% after 24 windows each: a quarter of the width needs 16 times the windows.
    assert windows_to_reach(at(24, 0.12), 0.03) == 384
    assert windows_to_reach(at(24, 0.02), 0.03) == 24  # already there: never fewer than it has
    assert windows_to_reach(at(24, float("inf")), 0.03) is None
    assert shortfall_note(at(24, 0.12), 0.03, 2.0) == (
        "; at this spread +/-3.0% needs about 384 windows each, some 360 rounds (12 min) more")
    assert shortfall_note(at(24, 0.06), 0.03, 1.5) == (
        "; at this spread +/-3.0% needs about 96 windows each, some 72 rounds (108 s) more")
    assert shortfall_note(at(24, 0.12), 0.03, None) == "; at this spread +/-3.0% needs about 384 windows each"
    assert shortfall_note(at(24, float("inf")), 0.03, 2.0) == ""
    stopped = precision_note("re-measure", ("b", "w"), at(24, 0.12), 0.03, "time budget", 2.0)
    assert stopped.endswith("NOT reached (time budget): read the interval, not the point; at this spread "
                            "+/-3.0% needs about 384 windows each, some 360 rounds (12 min) more")
    reached = GainPrecision(ratio=Interval(value=1.5, low=1.49, high=1.51), half_width=0.01, windows=24,
                            reached=True, requests=(0, 0))
    assert "needs about" not in precision_note("re-measure", ("b", "w"), reached, 0.03, round_s=2.0)
