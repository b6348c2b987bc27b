"""The re-measure step's choices that need no server (gpt_triton/remeasure_step.py): the cross-check's stage
(the re-measure's design with the other client, or with ``measure.cross_check_window_s`` the pair alone in
windows of that length with no extension), and a run in turns that held other candidates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_harness import cand

from gpt_triton import remeasure_step
from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import MeasureSpec, TuneSpec
from gpt_triton.measure.runs import RemeasuredInTurns
from gpt_triton.remeasure_step import cross_check_spec, cross_checked_candidates, remeasure
from gpt_triton.run import Progress, Run, TuneOptions
from gpt_triton.testing.models import build_tiny_mlp


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


def test_a_run_in_turns_that_held_other_candidates_is_not_judged_but_measured_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """remeasure(): the finalist stage's run in turns held a pair that is not the one now judged (not expected:
    it ran for the pair it selected). Its results are dropped, the log says so, and the re-measure runs on its
    own for these candidates (here a member would not load: no gain)."""
    model = build_tiny_mlp(tmp_path / "tiny.onnx")
    run = Run(TuneOptions(model=model, spec=TuneSpec(), out=tmp_path / "run"), inspect_model(model), {}, Progress())
    winner, baseline = cand("winner", "m_w"), cand("base", "m_b")
    run.remeasured_in_turns = RemeasuredInTurns(contenders=["other", "base"], per_server=[], notes=[])
    asked: list[list[str]] = []

    def on_its_own(_run: Run, contenders: Sequence[Candidate], pair: tuple[str, str]) -> None:
        asked.append([c.id for c in contenders])
        assert pair == ("base", "winner")

    monkeypatch.setattr(remeasure_step, "_remeasure_one_after_another", on_its_own)
    assert remeasure(run, winner, baseline, None) is None
    assert asked == [["winner", "base"]] and run.remeasured_in_turns is None
    assert "re-measure: the one run in turns with the finalist pair held other, base, not these candidates: " \
           "measured again on its own" in run.report.decisions
