"""benchmarks/racing_simulation.py runs the tuner's racing and finalist stage on simulated windows that follow a
kept run's drift model: the windows carry the fitted effects and noise, a clear winner is found at a fraction
of the exhaustive time, more noise costs more time, the resting variant is undone after its block, and bad
input is one line with exit 2 (no server)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import gpt_triton.measure.harness as harness
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.race_step import race_step
from gpt_triton.measure.racing import DriftFit, RaceWindow, drift_fit, window_log_stat

ROOT = Path(__file__).resolve().parents[2]
EFFECTS = {"c00": 0.7, "c01": 0.0, "c02": 0.05, "c03": 0.4, "c04": 0.6, "c05": 0.9}  # log scale; c01 best
SPEC = MeasureSpec(warmup_s=0.3, window_s=0.5, window_min_requests=20, bootstrap_resamples=200, settle_s=0.0)


@pytest.fixture(scope="module")
def sim(import_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return import_benchmark("racing_simulation")


def kept_fit(sigma: float, rounds: int = 12, seed: int = 3) -> DriftFit:
    rng = np.random.default_rng(seed)
    windows = [RaceWindow(cid, r, effect + rng.normal(0.0, sigma)) for r in range(rounds)
               for cid, effect in EFFECTS.items()]
    fit = drift_fit(windows)
    assert fit is not None
    return fit


def test_the_simulated_windows_carry_the_fitted_effects_and_noise(sim: ModuleType) -> None:
    fit = kept_fit(0.08)
    client = sim.SimulatedClient(fit, 0.3, np.random.default_rng(0))
    windows = []
    for r in range(30):
        for cid in EFFECTS:
            sample = client.window("", f"m_{cid}", [{}], LoadProfile(kind="concurrency", concurrency=1), 0.5, 20)
            value, var = window_log_stat(sample.latencies_ms, "p50", seed=r)
            windows.append(RaceWindow(cid, r, value, var))
    refit = drift_fit(windows)
    assert refit is not None
    for cid in EFFECTS:  # the effects come back to within a few of their standard errors
        diff = (refit.mu[cid] - refit.mu["c01"]) - (fit.mu[cid] - fit.mu["c01"])
        assert abs(diff) <= 4 * np.sqrt(refit.contrast_var(cid, "c01"))
    # The window noise is the fit's plus the median's own sampling (0.3 spread over 200 requests, ~2.7%).
    assert 0.8 * np.sqrt(fit.sigma2) < np.sqrt(refit.sigma2) < 1.4 * np.sqrt(fit.sigma2 + 0.03 ** 2)
    assert client.seconds == pytest.approx(30 * len(EFFECTS) * 0.6)  # every window counted, at its cost


def test_a_clear_winner_is_found_at_a_fraction_of_the_time_and_noise_costs_time(sim: ModuleType) -> None:
    fit = kept_fit(0.06)
    objective = ObjectiveSpec(metric="p50")
    exhaustive_s = len(EFFECTS) * (0.4 + 12 * 0.6)
    quiet = [sim.race_once(fit, SPEC, objective, 0.3, seed) for seed in range(6)]
    busy = [sim.race_once(fit, SPEC, objective, 0.3, seed, noise_scale=3.0) for seed in range(6)]
    # c02 is 5% behind c01: at 6% noise a pick of either is a right answer, never the 40%+ ones.
    assert all(chosen in ("c01", "c02") for _, _, chosen in quiet)
    assert all(racing_s <= total_s < 0.6 * exhaustive_s for racing_s, total_s, _ in quiet)
    assert np.median([t for _, t, _ in busy]) > 1.2 * np.median([t for _, t, _ in quiet])


def test_resting_is_in_force_inside_its_block_only(sim: ModuleType) -> None:
    assert harness.race_step is race_step
    with sim.resting():
        assert harness.race_step is not race_step
    assert harness.race_step is race_step
    with pytest.raises(RuntimeError), sim.resting():
        raise RuntimeError("a failed run")
    assert harness.race_step is race_step


@pytest.mark.parametrize(("content", "extra", "names"), [
    (None, [], "not a window file"),
    ({}, [], "not a window file"),
    ({"windows": {"concurrency=1": []}}, [], "too few windows"),
    ("fit", ["--set", "max_windws=3"], "max_windws"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: object, extra: list[str], names: str) -> None:
    path = tmp_path / "windows.json"
    if content == "fit":
        rng = np.random.default_rng(0)
        content = {"windows": {"concurrency=1": [
            {"candidate": cid, "round": r, "value": effect + rng.normal(0.0, 0.05), "within_var": None}
            for r in range(4) for cid, effect in EFFECTS.items()]}}
    if content is not None:
        path.write_text(json.dumps(content))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "racing_simulation.py"), str(path), "--runs", "1",
                           *extra], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and names in done.stderr
