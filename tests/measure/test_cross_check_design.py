"""The cross-check's stage (gpt_triton/remeasure_step.py): the re-measure's design with the other client, or
with ``measure.cross_check_window_s`` the pair alone in windows of that length with no extension."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from test_harness import cand

from gpt_triton.core.spec import MeasureSpec
from gpt_triton.remeasure_step import cross_check_spec, cross_checked_candidates


def test_the_cross_check_keeps_the_re_measure_design_unless_given_windows_of_its_own() -> None:
    held = [cand("winner", "m_w"), cand("runner", "m_r"), cand("base", "m_b")]
    plain = MeasureSpec(cross_check="perf_analyzer", window_s=0.75, gain_precision=0.03)
    checking = cross_check_spec(plain)
    assert checking is not None and checking.client == "perf_analyzer" and checking.cross_check == "none"
    assert checking.window_s == 0.75 and checking.gain_precision == 0.03 and checking.burn_in_s == 0.0
    assert [c.id for c in cross_checked_candidates(plain, held, ("base", "winner"))] == ["winner", "runner", "base"]

    long = plain.model_copy(update={"cross_check_window_s": 5.0})
    checking = cross_check_spec(long)
    assert checking is not None and checking.window_s == 5.0 and checking.gain_precision == 0.0
    assert checking.remeasure_windows == plain.remeasure_windows
    assert [c.id for c in cross_checked_candidates(long, held, ("base", "winner"))] == ["winner", "base"]
    assert cross_check_spec(MeasureSpec(cross_check_window_s=5.0)) is None  # no cross-check asked: nothing to size


def test_a_cross_check_window_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="cross_check_window_s"):
        MeasureSpec(cross_check="perf_analyzer", cross_check_window_s=0)
