"""benchmarks/regret_power.py's window counts are racing's own rule: a candidate r times the leader, at the
count the script prints, is dropped by :func:`race_round` about as often as not; at twice the count nearly
always, at a third of it hardly ever (simulated drift-model windows, no server)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from gpt_triton.measure.racing import RaceWindow, race_alpha, race_round

SIGMA = 0.2
CANDIDATES, CAP = 24, 10


@pytest.fixture(scope="module")
def power(import_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return import_benchmark("regret_power")


def simulated(effects: dict[str, float], rounds: int, rng: np.random.Generator) -> list[RaceWindow]:
    """Interleaved rounds of the drift model: candidate effect + round effect + independent noise."""
    out = []
    for r in range(rounds):
        drift = rng.normal(0.0, 0.1)
        for cid in rng.permutation(list(effects)):
            out.append(RaceWindow(candidate=str(cid), round=r, value=effects[str(cid)] + drift
                                  + rng.normal(0.0, SIGMA)))
    return out


def drop_rate(ratio: float, windows: int, seed: int, trials: int = 100) -> float:
    rng = np.random.default_rng(seed)
    alpha = race_alpha(0.95, CANDIDATES, CAP)
    # 22 far slower candidates beside the pair give the drift model the degrees of freedom a 24-way race has
    effects = {"leader": 0.0, "slow": math.log(ratio), **{f"far{k}": math.log(3.0) for k in range(CANDIDATES - 2)}}
    dropped = 0
    for _ in range(trials):
        state = race_round(simulated(effects, windows, rng), list(effects), alpha)
        assert state is not None
        dropped += bool("slow" in state.verdicts and state.verdicts["slow"].drop)
    return dropped / trials


def test_the_printed_count_is_where_racing_starts_to_drop(power: ModuleType) -> None:
    from scipy import stats

    z = float(stats.norm.ppf(1.0 - race_alpha(0.95, CANDIDATES, CAP)))
    need = power.drop_windows(1.5, SIGMA, z)
    assert 5.5 < need < 6.5  # 2 (3.52 * 0.2 / ln 1.5)^2 = 6.0 windows each
    n = math.ceil(need)
    assert drop_rate(1.5, 2 * n, seed=1) > 0.8
    assert drop_rate(1.5, max(3, n // 3), seed=2) < 0.2
    assert 0.2 < drop_rate(1.5, n, seed=3) < 0.8


def test_a_tie_never_drops_and_the_judge_count_follows_the_noise(power: ModuleType) -> None:
    assert power.drop_windows(1.0, SIGMA, 3.5) == math.inf
    # the judge's count scales with the variance: twice the noise, four times the windows
    assert math.isclose(power.drop_windows(1.02, 2 * SIGMA, 2.24), 4 * power.drop_windows(1.02, SIGMA, 2.24))


def test_it_reads_a_kept_window_file(power: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(4)
    effects = {f"c{k:02d}": math.log(1.0 + 0.1 * k) for k in range(12)}
    windows = simulated(effects, 12, rng)
    path = tmp_path / "exhaustive.json"
    path.write_text(json.dumps({"windows": {"concurrency=1": [w.__dict__ for w in windows]}, "log": []}))
    power.one(path, exhaustive_windows=12, max_windows=CAP, confidence=0.95)
    out = capsys.readouterr().out
    noise = float(out.split("window noise ")[1].split("%")[0])
    assert 15.0 < noise < 25.0  # the simulated 20%
    assert "12 windows each" not in out and "144 windows of 12 candidates (12-12 each)" in out
    share = float(out.split("racing until dropped or capped: ")[1].split(" of an exhaustive")[0].split(", ")[-1])
    assert 0.3 < share <= 1.0  # candidates 10-110% slower at 20% noise: most need several windows


def test_a_path_that_is_no_run_or_window_file_is_one_line_exit_2(
        power: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (tmp_path / "missing.json", tmp_path / "empty.json", tmp_path):
        if bad.name == "empty.json":
            bad.write_text("{}")
        with pytest.raises(SystemExit) as exit_info:
            power.one(bad, exhaustive_windows=13, max_windows=None, confidence=0.95)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(bad) in err and "regret_power:" in err
