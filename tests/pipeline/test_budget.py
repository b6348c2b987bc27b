"""The run's time budget as the stages that come after the search see it (issue 16: the gain-precision
extension must not run a slow model's tune 20 minutes past --time-budget)."""

from __future__ import annotations

import time
from pathlib import Path

from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.spec import TuneSpec
from gpt_triton.run import Progress, Run, TuneOptions, judging_reserve_s
from gpt_triton.testing.models import build_tiny_mlp


def _run(tmp_path: Path, budget: float | None) -> Run:
    model = build_tiny_mlp(tmp_path / "tiny.onnx")
    spec = TuneSpec.model_validate({"time_budget_s": budget} if budget is not None else {})
    return Run(TuneOptions(model=model, spec=spec, out=tmp_path / "run"), inspect_model(model), {}, Progress())


def test_a_stage_gets_its_share_of_what_is_left(tmp_path: Path) -> None:
    run = _run(tmp_path, 100.0)
    run.started = time.monotonic() - 60.0  # 40 s left
    before = time.monotonic()
    half, rest = run.budget_deadline(0.5), run.budget_deadline()
    assert half is not None and rest is not None
    assert before + 19.0 <= half <= time.monotonic() + 20.0
    assert before + 39.0 <= rest <= time.monotonic() + 40.0


def test_past_the_budget_the_deadline_is_now_and_without_one_there_is_none(tmp_path: Path) -> None:
    run = _run(tmp_path, 10.0)
    run.started = time.monotonic() - 60.0
    deadline = run.budget_deadline(0.5)
    assert deadline is not None and deadline <= time.monotonic()
    assert _run(tmp_path / "b", None).budget_deadline() is None


def test_the_search_leaves_a_quarter_of_the_budget_for_judging() -> None:
    assert judging_reserve_s(TuneSpec.model_validate({"time_budget_s": 480})) == 120.0
    assert judging_reserve_s(TuneSpec.model_validate({"time_budget_s": 120})) == 60.0  # at least a minute
    assert judging_reserve_s(TuneSpec()) == 60.0
    off = TuneSpec.model_validate({"time_budget_s": 480, "measure": {"gain_precision": 0}})
    assert judging_reserve_s(off) == 60.0
