"""The run's time budget as the stages see it (issue 16: a slow model's tune must end near --time-budget,
not a re-measure's worth of minutes past it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_tune_cli import tiny_spec

from gpt_triton.budget import TimeBudget, judging_reserve_s
from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.spec import TuneSpec
from gpt_triton.run import Progress, Run, TuneOptions
from gpt_triton.testing.models import build_tiny_mlp


def _run(tmp_path: Path, budget: float | None) -> Run:
    model = build_tiny_mlp(tmp_path / "tiny.onnx")
    spec = TuneSpec.model_validate({"time_budget_s": budget} if budget is not None else {})
    return Run(TuneOptions(model=model, spec=spec, out=tmp_path / "run"), inspect_model(model), {}, Progress())


def test_a_stage_gets_its_share_of_what_is_left_after_the_later_stages(tmp_path: Path) -> None:
    run = _run(tmp_path, 100.0)
    run.budget.started = time.monotonic() - 60.0  # 40 s left
    before = time.monotonic()
    half, rest, kept = run.budget.deadline(0.5), run.budget.deadline(), run.budget.deadline(0.5, keep_s=10.0)
    assert half is not None and rest is not None and kept is not None
    assert before + 19.0 <= half <= time.monotonic() + 20.0
    assert before + 39.0 <= rest <= time.monotonic() + 40.0
    assert before + 14.0 <= kept <= time.monotonic() + 15.0  # half of (40 - 10)
    assert not run.budget.over(reserve_s=39.0) and run.budget.over(reserve_s=41.0)


def test_past_the_budget_the_deadline_is_now_and_without_one_there_is_none(tmp_path: Path) -> None:
    run = _run(tmp_path, 10.0)
    run.budget.started = time.monotonic() - 60.0
    deadline = run.budget.deadline(0.5)
    assert deadline is not None and deadline <= time.monotonic()
    unbounded = _run(tmp_path / "b", None).budget
    assert unbounded.deadline() is None and not unbounded.over(reserve_s=1e9)


def test_the_search_leaves_at_least_a_quarter_of_the_budget_for_judging() -> None:
    assert judging_reserve_s(TuneSpec.model_validate({"time_budget_s": 480})) == 120.0
    assert judging_reserve_s(TuneSpec.model_validate({"time_budget_s": 120})) == 60.0  # at least a minute
    assert judging_reserve_s(TuneSpec()) == 60.0
    off = TuneSpec.model_validate({"time_budget_s": 480, "measure": {"gain_precision": 0}})
    assert judging_reserve_s(off) == 60.0
    # Before any window is timed the plan is the configured windows: the quarter stands where they cost less.
    assert TimeBudget(TuneSpec.model_validate({"time_budget_s": 2400})).search_reserve_s(10) == 600.0
    # At 20 minutes the default stages' least cost (the estimate's server costs what a re-measure server
    # does) is more than the quarter: the plan is kept.
    default = TimeBudget(TuneSpec.model_validate({"time_budget_s": 1200}))
    planned = default.finalists_s(10) + default.remeasure_s()
    assert planned > 300.0 and default.search_reserve_s(10) == pytest.approx(planned)


def test_the_later_stages_are_planned_from_the_costs_observed() -> None:
    """A ResNet-like run: 13 s windows (p99 needs 500 requests at ~40/s), 10 s to start a server, 2 s a
    load, a burn-in of 20 s a model. The finalists (six contenders and the baseline, three windows each), the re-measure
    (three candidates, eight windows each) and the held-out acceptance need more than a quarter of 20 minutes."""
    spec = TuneSpec.model_validate({"time_budget_s": 1200, "measure": {"warmup_s": 1.0, "min_windows": 3,
                                                                        "remeasure_windows": 8, "max_finalists": 6,
                                                                        "burn_in_s": 20.0}})
    budget = TimeBudget(spec)
    budget.observe_windows([12.0, 13.0, 30.0])  # the median: one slow window does not set the plan
    budget.observe_server_start(10.0)
    budget.observe_loads(20.0, 10)
    assert budget.window_s() == 13.0
    pair = 10 + 3 * (2 + 1 + 8 * 13 + 20)  # the estimate's server: a re-measure server's cost (gain_precision is on)
    assert budget.finalists_s(10) == pytest.approx(10 + 7 * (2 + 1 + 3 * 13) + pair)
    assert budget.finalists_s(2) == pytest.approx(10 + 3 * (2 + 1 + 3 * 13) + pair)  # fewer measured, fewer finalists
    assert budget.heldout_s() == pytest.approx(10 + 2 * 2)
    assert budget.remeasure_s() == pytest.approx(10 + 3 * (2 + 1 + 8 * 13 + 20) + 14)  # burnt in too
    assert budget.search_reserve_s(10) == pytest.approx(304 + 391 + 405)
    # A running stage's own windows count before they are observed.
    assert budget.window_s([20.0, 20.0, 20.0]) == 20.0
    # Without a finalist stage only the re-measure is kept.
    off = TimeBudget(spec.model_copy(update={"measure": spec.measure.model_copy(update={"finalists": 0})}),
                     window_seconds=[13.0], server_start_seconds=[10.0], load_seconds=[2.0])
    assert off.finalists_s(10) == 0.0 and off.search_reserve_s(10) == pytest.approx(405)
    assert budget.plan_note(10).endswith("need at least 1100 s (planned from a 13 s objective window, 10 s to start "
                                         "and stop a server, 2 s to load and unload a candidate)")
    # A throughput objective has no pair estimate (the stop rule is for latency ratios): no server planned for it.
    throughput = TimeBudget(spec.model_copy(update={"objective": spec.objective.model_copy(update={"metric": "throughput"})}),
                            window_seconds=[13.0], server_start_seconds=[10.0], load_seconds=[2.0])
    assert throughput.finalists_s(10) == pytest.approx(10 + 7 * (2 + 1 + 3 * 13))
    # Re-measured on three servers: each one's least cost, three times, before the held-out acceptance.
    three = TimeBudget(spec.model_copy(update={"measure": spec.measure.model_copy(update={"remeasure_servers": 3})}),
                       window_seconds=[13.0], server_start_seconds=[10.0], load_seconds=[2.0])
    assert three.remeasure_server_s() == pytest.approx(10 + 3 * (2 + 1 + 8 * 13 + 20))
    assert three.remeasure_s() == pytest.approx(3 * (10 + 3 * (2 + 1 + 8 * 13 + 20)) + 14)
    # With a cross-check the other client's windows on the re-measure's server are planned too (no server, load or burn-in).
    checked = TimeBudget(spec.model_copy(update={"measure": spec.measure.model_copy(update={"cross_check": "perf_analyzer"})}),
                         window_seconds=[13.0], server_start_seconds=[10.0], load_seconds=[2.0])
    assert checked.cross_check_s() == pytest.approx(3 * (1 + 8 * 13)) and budget.cross_check_s() == 0.0
    assert checked.remeasure_s() == pytest.approx(budget.remeasure_s() + 3 * (1 + 8 * 13))
    # With its own windows (measure.cross_check_window_s) the other client measures the pair alone, 8 rounds of them.
    long = TimeBudget(spec.model_copy(update={"measure": spec.measure.model_copy(
        update={"cross_check": "perf_analyzer", "cross_check_window_s": 5.0})}),
        window_seconds=[13.0], server_start_seconds=[10.0], load_seconds=[2.0])
    assert long.cross_check_s() == pytest.approx(2 * (1 + 8 * (5.0 + spec.measure.settle_s)))
    # Without a burn-in the steps cost only their windows.
    cold = TimeBudget(spec.model_copy(update={"measure": spec.measure.model_copy(update={"burn_in_s": 0.0})}),
                      window_seconds=[13.0], server_start_seconds=[10.0], load_seconds=[2.0])
    assert cold.remeasure_server_s() == pytest.approx(10 + 3 * (2 + 1 + 8 * 13))
    budget.observe_server_stop(5.0)
    budget.observe_unloads(3.0, 3)
    assert budget.heldout_s() == pytest.approx(15 + 2 * 3)


@pytest.mark.slow
def test_a_budget_shorter_than_the_least_run_still_gives_a_whole_minimal_run(tmp_path: Path) -> None:
    """The first batch (the baseline's) always runs, every stage does its minimum windows, the run
    finishes and promotes, and the log says what the plan was."""
    spec = tiny_spec()
    spec["time_budget_s"] = 1
    # Never stable, and no racing to end the run as a tie: 6 windows each, were it not for the budget.
    spec["measure"].update(stability=1e-9, min_windows=3, max_windows=6, racing=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    model = build_tiny_mlp(tmp_path / "tiny.onnx")
    result = subprocess.run([sys.executable, "-m", "gpt_triton", "tune", str(model), "--spec", str(tmp_path / "spec.yaml"),
                             "--out", str(tmp_path / "run"), "--repository", str(tmp_path / "repo")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "done" and report["promoted_version"] == 1
    measured = [c for c in report["candidates"] if c["status"] == "measured"]
    assert len(measured) == 2 and all(len(c["latency"][0]["windows"]) == 3 for c in measured)
    decisions = report["decisions"]
    assert "time budget: concurrency=1 ended after 3 rounds (min_windows 3)" in decisions
    plan = next(line for line in decisions if line.startswith("time budget: ") and "after the search" in line)
    need = re.search(r"need at least (\d+) s \(planned from a ([0-9.]+) s objective window, ([0-9.]+) s to start", plan)
    assert need is not None and int(need.group(1)) > 0 and float(need.group(2)) >= 0.2, plan
    assert float(need.group(3)) > 0, plan  # the search's server was timed starting
