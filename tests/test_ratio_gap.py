"""Two runs' estimates of one gain, judged against both their widths (core.measurements.ratio_gap) and
said in the report."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.measurements import Interval, ratio_gap
from gpt_triton.core.records import Gain


def test_a_gap_within_both_widths_agrees_and_one_beyond_them_does_not() -> None:
    # w5 of 2026-12-05: 1.418 [1.284, 1.558] on the finalist run against 1.432 [1.308, 1.561].
    close = ratio_gap(Interval(value=1.418, low=1.284, high=1.558), Interval(value=1.432, low=1.308, high=1.561))
    assert close is not None and close.agree and close.relative == pytest.approx(1.418 / 1.432 - 1)
    se = np.hypot(np.log(1.558 / 1.284), np.log(1.561 / 1.308)) / (2 * 1.959964)
    assert close.z == pytest.approx(np.log(1.418 / 1.432) / se, rel=1e-4)
    # Two narrow intervals 15% apart: the gap is more than the sampling allows.
    far = ratio_gap(Interval(value=1.36, low=1.33, high=1.39), Interval(value=1.60, low=1.56, high=1.64))
    assert far is not None and not far.agree and far.z < -5
    assert "more than their intervals allow: the gain moved between the runs" in far.describe()
    assert close.describe().startswith("the two runs differ by -1.0% (z ") and "within what" in close.describe()


def test_a_narrower_level_reads_as_a_wider_standard_error() -> None:
    at95 = ratio_gap(Interval(value=1.2, low=1.1, high=1.3), Interval(value=1.4, low=1.3, high=1.5))
    at80 = ratio_gap(Interval(value=1.2, low=1.1, high=1.3, level=0.8), Interval(value=1.4, low=1.3, high=1.5, level=0.8))
    assert at95 is not None and at80 is not None and abs(at80.z) < abs(at95.z)


def test_nothing_to_compare() -> None:
    assert ratio_gap(Interval(value=1.2, low=0.0, high=1.3), Interval(value=1.4, low=1.3, high=1.5)) is None
    assert ratio_gap(Interval(value=1.2, low=1.2, high=1.2), Interval(value=1.4, low=1.4, high=1.4)) is None
    gain = Gain(metric="p99", ratio=Interval(value=1.4, low=1.3, high=1.5), winner_ms=1.0, baseline_ms=1.4,
                selection_estimate_ratio=1.3)
    assert gain.between_runs() is None  # no interval for the estimate (no finalist refinement)
    with_interval = gain.model_copy(update={"selection_estimate": Interval(value=1.3, low=1.2, high=1.4)})
    assert with_interval.between_runs() is not None


def test_a_gap_between_runs_that_took_turns_is_put_on_their_servers_not_on_the_minutes() -> None:
    # R3 of 2026-12-06 (the ResNet CNN, in turns): 1.635 [1.547, 1.727] against 1.830 [1.750, 1.913].
    gain = Gain(metric="p99", ratio=Interval(value=1.830, low=1.750, high=1.913), winner_ms=13.3, baseline_ms=24.3,
                selection_estimate_ratio=1.635, selection_estimate=Interval(value=1.635, low=1.547, high=1.727))
    one_after_another = gain.between_runs()
    assert one_after_another is not None and not one_after_another.agree
    assert "the gain moved between the runs (the machine's state" in one_after_another.describe()
    in_turns = gain.model_copy(update={"estimate_in_turns": True}).between_runs()
    assert in_turns is not None and in_turns.z == pytest.approx(one_after_another.z)
    assert "-10.7% (z -3.1" in in_turns.describe()
    assert "though they took turns through the same minutes: not the machine's time but their two servers' runs" in in_turns.describe()
    assert "the machine's state" not in in_turns.describe()
    # Within both widths, the same words either way.
    close = gain.model_copy(update={"estimate_in_turns": True, "selection_estimate": Interval(value=1.8, low=1.7, high=1.9)})
    assert close.between_runs() is not None and close.between_runs().describe().endswith("within what their intervals allow")
