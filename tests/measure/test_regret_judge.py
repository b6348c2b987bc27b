"""benchmarks/search_regret.py's sequential judge: it stops once every racing winner's regret is decided
against 2%, and Bonferroni over its looks keeps a regret at the target from passing as under it more
often than the 5% it promises (simulated drift-model windows, no server)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from gpt_triton.measure.racing import RaceWindow


@pytest.fixture(scope="module")
def regret(import_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return import_benchmark("search_regret")


class FakeCompareMeasurer:
    """Stands in for Measurer.compare: windows of the drift model (candidate effect + round effect +
    noise), one per candidate per round, in a fresh order each round; rounds numbered from 0 per call."""

    def __init__(self, effects: dict[str, float], sd: float, seed: int) -> None:
        self.effects, self.sd = effects, sd
        self.rng = np.random.default_rng(seed)
        self.asked: list[int] = []

    def compare(self, candidates: list[SimpleNamespace], windows: int) -> list[RaceWindow]:
        self.asked.append(windows)
        out = []
        for r in range(windows):
            shift = self.rng.normal(0.0, self.sd)
            for c in self.rng.permutation([c.id for c in candidates]):
                out.append(RaceWindow(candidate=str(c), round=r, value=self.effects[c] + shift + self.rng.normal(0.0, self.sd)))
        return out


def _cands(*ids: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(id=i) for i in ids]


def test_a_clear_loss_is_decided_at_the_first_look(regret: ModuleType) -> None:
    measurer = FakeCompareMeasurer({"best": 0.0, "slow": np.log(1.15)}, sd=0.05, seed=1)
    fit, level, total = regret.judge(measurer, _cands("best", "slow"), 16, ["slow"], "best")
    assert measurer.asked == [16] and total == 16
    assert level == pytest.approx(1 - 0.05 / regret.JUDGE_LOOKS)
    r, lo, hi = regret.regret_interval(fit, "slow", "best", level)
    assert lo > regret.REGRET_TARGET and lo < r < hi


def test_a_near_tie_doubles_until_decided_or_the_last_look(regret: ModuleType) -> None:
    measurer = FakeCompareMeasurer({"best": 0.0, "twin": 0.0}, sd=0.10, seed=2)
    fit, level, total = regret.judge(measurer, _cands("best", "twin"), 8, ["twin"], "best")
    assert measurer.asked[:2] == [8, 8] and all(b == sum(measurer.asked[:k]) for k, b in enumerate(measurer.asked) if k)
    assert total == sum(measurer.asked) and len(measurer.asked) <= regret.JUDGE_LOOKS
    _, lo, hi = regret.regret_interval(fit, "twin", "best", level)
    decided = hi <= regret.REGRET_TARGET or lo > regret.REGRET_TARGET
    assert decided or len(measurer.asked) == regret.JUDGE_LOOKS


def test_a_regret_at_the_target_rarely_passes_as_under_it(regret: ModuleType) -> None:
    # True regret exactly 2%: a judge that stopped at the first look whose bound fell under 2% without
    # correcting for its looks would pass it far more often than 5%.
    passed = 0
    runs = 80
    for seed in range(runs):
        measurer = FakeCompareMeasurer({"best": 0.0, "chosen": np.log(1 + regret.REGRET_TARGET)}, sd=0.03, seed=seed)
        fit, level, _ = regret.judge(measurer, _cands("best", "chosen"), 8, ["chosen"], "best")
        passed += regret.regret_interval(fit, "chosen", "best", level)[2] <= regret.REGRET_TARGET
    assert passed / runs <= 0.10  # 5% promised; slack for 80 simulated runs


def test_the_same_candidate_has_no_regret(regret: ModuleType) -> None:
    measurer = FakeCompareMeasurer({"best": 0.0, "other": 0.1}, sd=0.05, seed=3)
    fit, level, _ = regret.judge(measurer, _cands("best", "other"), 8, ["best"], "best")
    assert regret.regret_interval(fit, "best", "best", level) == (0.0, 0.0, 0.0)
