"""The finalist stage's choice on its run and the search's together: pooled drift-model effects."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.measurements import ObjectiveContrasts, pooled_contrasts
from gpt_triton.core.spec import ObjectiveSpec
from gpt_triton.select import select, select_finalists
from tests.test_select import always, cand


def record(ids: list[str], mu: list[float], var: list[float], df: int = 30, **aliases: str) -> ObjectiveContrasts:
    return ObjectiveContrasts(ids=ids, mu=mu, cov=np.diag(var).tolist(), df=df, aliases=aliases)


def test_two_runs_pool_by_inverse_variance_whatever_each_runs_offset() -> None:
    search = record(["a", "b"], [0.0, 0.10], [0.01, 0.01], df=40)  # b - a = 0.10, variance 0.02
    final = record(["a", "b"], [5.0, 5.30], [0.02, 0.02], df=12)  # b - a = 0.30, variance 0.04; offset 5
    pooled = pooled_contrasts([search, final], ["a", "b"])
    assert pooled is not None
    diff, se = pooled.contrast("b", "a")
    assert diff == pytest.approx((0.10 / 0.02 + 0.30 / 0.04) / (1 / 0.02 + 1 / 0.04))
    assert se ** 2 == pytest.approx(1 / (1 / 0.02 + 1 / 0.04))
    assert pooled.df == 12  # each run estimated its own noise: the smaller df
    # Only differences carry over: shifting a whole run changes nothing.
    shifted = final.model_copy(update={"mu": [m - 7.0 for m in final.mu]})
    again = pooled_contrasts([search, shifted], ["a", "b"])
    assert again is not None and again.contrast("b", "a") == pytest.approx((diff, se))


def test_a_candidate_one_run_missed_is_compared_through_the_others() -> None:
    # The finalist run measured a, b, c; the search measured a and b only (c came from elsewhere).
    search = record(["a", "b"], [0.0, 0.20], [1e-4, 1e-4])
    final = record(["a", "b", "c"], [1.0, 1.20, 1.05], [0.01, 0.01, 0.01])
    pooled = pooled_contrasts([search, final], ["a", "b", "c"])
    assert pooled is not None
    # The search pins b - a at 0.20, which the finalist run agrees with, so c - a stays 0.05; with b - a
    # known, b's finalist window also informs the run's offset, so c - a is sharper than in that run alone.
    diff, se = pooled.contrast("c", "a")
    assert diff == pytest.approx(0.05, abs=1e-9)
    assert se < final.contrast("c", "a")[1]
    assert pooled.contrast("b", "a")[1] ** 2 == pytest.approx(1 / (1 / 2e-4 + 1 / 0.02))  # both runs' b - a
    # Nothing to pool: no run compared two of the ids.
    assert pooled_contrasts([record(["a", "x"], [0.0, 0.1], [0.01, 0.01])], ["a", "b"]) is None
    # A difference no run determines (b is measured only beside x, never beside a).
    assert pooled_contrasts([record(["a", "c"], [0.0, 0.1], [0.01, 0.01]),
                             record(["b", "x"], [0.0, 0.1], [0.01, 0.01])], ["a", "b", "c"]) is None


def test_duplicates_stay_one_effect() -> None:
    # d is the same artifact as a: each run measured it once (an alias), so it is one effect here too.
    search = record(["a", "b"], [0.0, 0.1], [0.01, 0.01], d="a")
    final = record(["a", "b"], [2.0, 2.1], [0.01, 0.01], d="a")
    pooled = pooled_contrasts([search, final], ["a", "b", "d"])
    assert pooled is not None and pooled.ids == ["a", "b"] and pooled.aliases == {"d": "a"}
    assert pooled.contrast("d", "a") == (0.0, 0.0) and pooled.effect("d") == pooled.effect("a")


def test_the_pooled_order_chooses_among_ties() -> None:
    # The finalist run alone puts x ahead of y by 2% (within its noise: a tie, broken on speed: x).
    # The search measured y 6% ahead of x on many more windows: pooled, y is ahead, and still tied.
    x, y, base = cand("x", (5.0, 4.0, 6.0)), cand("y", (5.1, 4.1, 6.1)), cand("base", (9.0, 8.0, 10.0), baseline=True)
    final = record(["x", "y", "base"], [np.log(5.0), np.log(5.1), np.log(9.0)], [4e-3, 4e-3, 4e-3], df=20)
    search = record(["x", "y", "base", "slow"], [0.06, 0.0, 0.55, 0.9], [5e-4, 5e-4, 5e-4, 5e-4], df=200)
    alone = select([x, y, base], ObjectiveSpec(), always, [final])
    assert alone.winner_id == "x" and alone.ties == ["y"]
    both = select_finalists([x, y, base], ObjectiveSpec(), always, [search], final)
    assert both.winner_id == "y" and both.ties == ["x"] and both.runner_up_id == "x"
    assert any("pooled over the runs" in line for line in both.log)
    assert any(line.startswith("best by the pooled effects y: this run: p99 5.1 ms") for line in both.log)
    # The figures selection reports stay the finalist run's own points.
    assert both.values == alone.values and both.estimate_ratio == pytest.approx(9.0 / 5.1)
    # Without a finalist record, or when the pooled effects do not cover everyone, the run's points order.
    alone_points = select_finalists([x, y, base], ObjectiveSpec(), always, [search], None)
    assert alone_points.winner_id == "x"
    assert alone_points.log[0] == ("the finalist run left no drift model (too few windows for one): ordered by "
                                   "this run's point values alone")
    partial = record(["x", "y"], [np.log(5.0), np.log(5.1)], [4e-3, 4e-3], df=20)
    assert select_finalists([x, y, base], ObjectiveSpec(), always, [], partial).winner_id == "x"


def test_pooling_the_search_chooses_the_best_more_often() -> None:
    """The docstring's claim, on draws shaped like the ResNet CNN's racing: four contenders within 5%
    (1.000, 1.003, 1.037, 1.047), twenty slower, window noise 10.5%; the search gives the top group
    ~10 windows each, the finalist run 6 each. How often is the choice more than 2% slower than the best?"""
    rng = np.random.default_rng(7)
    truth = np.log([1.0, 1.003, 1.037, 1.047, *np.linspace(1.25, 2.0, 20)])
    ids = [f"c{i:02d}" for i in range(truth.size)]
    sd, reps = 0.105, 300
    bad_alone = bad_pooled = 0
    for _ in range(reps):
        race = truth + rng.normal(0, sd / np.sqrt(10), truth.size)
        group = [int(i) for i in np.argsort(race)[:5]]
        fin = truth[group] + rng.normal(0, sd / np.sqrt(6), len(group))
        cands = [cand(ids[i], (float(np.exp(v)), float(np.exp(v)) * 0.8, float(np.exp(v)) * 1.2))
                 for i, v in zip(group, fin, strict=True)]
        final = record([ids[i] for i in group], fin.tolist(), [sd ** 2 / 6] * len(group), df=25)
        search = record(ids, race.tolist(), [sd ** 2 / 10] * truth.size, df=200)
        for chooser in ("alone", "pooled"):
            sel = (select(cands, ObjectiveSpec(), always, [final]) if chooser == "alone"
                   else select_finalists(cands, ObjectiveSpec(), always, [search], final))
            regret = truth[ids.index(str(sel.winner_id))] - truth.min()
            if regret > np.log(1.02):
                bad_alone += chooser == "alone"
                bad_pooled += chooser == "pooled"
    assert bad_pooled < 0.7 * bad_alone, (bad_alone, bad_pooled)
    assert bad_pooled / reps < 0.15
