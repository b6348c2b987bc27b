"""Selection: objective values, ties within the noise and their tie-breaks, eligibility, gain."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.measurements import Interval, LatencyStats, LoadProfile, ObjectiveContrasts, WindowResult
from gpt_triton.core.objective import objective_value
from gpt_triton.core.records import BuildCost, Candidate
from gpt_triton.core.routes import Route
from gpt_triton.core.spec import ObjectiveSpec
from gpt_triton.measure.loadgen import WindowSample
from gpt_triton.measure.runs import RemeasureResult
from gpt_triton.select import gain, select


def stats(p99: tuple[float, float, float], tp: tuple[float, float, float] = (100, 95, 105),
          load: LoadProfile | None = None, errors: int = 0, rate_held: bool | None = None) -> LatencyStats:
    return LatencyStats(
        load=load or LoadProfile(), p99_ms=Interval(value=p99[0], low=p99[1], high=p99[2]),
        p50_ms=Interval(value=p99[0] / 2, low=p99[1] / 2, high=p99[2] / 2),
        throughput=Interval(value=tp[0], low=tp[1], high=tp[2]), errors=errors, rate_held=rate_held,
    )


def cand(cid: str, p99: tuple[float, float, float], margin: float = 0.5, build_s: float = 1.0,
         baseline: bool = False, status: str = "measured") -> Candidate:
    acc = AccuracyResult(split="tuning", requests=10, passed=True, exceedances=0, exceedance_upper_bound=0.3,
                         min_margin=margin)
    return Candidate(id=cid, family="f", route=Route(family="f"), serving=Route(family="serving"),
                     is_baseline=baseline, status=status, latency=[stats(p99)], accuracy=acc,  # type: ignore[arg-type]
                     build=BuildCost(seconds=build_s))


def always(_c: Candidate) -> tuple[bool, str]:
    return True, ""


def test_clear_winner_has_no_ties() -> None:
    cands = [cand("base", (10, 9.5, 10.5), baseline=True), cand("fast", (5, 4.8, 5.2)), cand("mid", (7, 6.5, 7.5))]
    sel = select(cands, ObjectiveSpec(), always)
    assert sel.winner_id == "fast" and sel.runner_up_id == "mid" and sel.ties == []
    assert sel.estimate_ratio == 2.0


def test_tie_goes_to_the_larger_accuracy_margin() -> None:
    cands = [cand("a", (5.0, 4.6, 5.4), margin=0.1), cand("b", (5.2, 4.9, 5.6), margin=0.8), cand("c", (9, 8.5, 9.5))]
    sel = select(cands, ObjectiveSpec(), always)
    assert sel.winner_id == "b" and sel.ties == ["a"]
    assert any("tie within the noise" in line for line in sel.log)


def test_equal_margins_tie_goes_to_the_cheaper_build() -> None:
    cands = [cand("a", (5.0, 4.6, 5.4), build_s=30.0), cand("b", (5.1, 4.7, 5.5), build_s=2.0)]
    assert select(cands, ObjectiveSpec(), always).winner_id == "b"


def test_paired_contrasts_separate_what_overlapping_intervals_call_a_tie() -> None:
    # Marginal intervals carry the machine's drift: 5 [3, 7] and 6.5 [4.5, 8.5] overlap. Measured in one
    # interleaved run, their paired difference (drift shared by both cancels) is 26% +- 2%: no tie.
    slower_but_exact = cand("b", (6.5, 4.5, 8.5), margin=0.9)
    cands = [cand("a", (5.0, 3.0, 7.0), margin=0.1), slower_but_exact, cand("c", (5.1, 3.1, 7.1), margin=0.2)]
    assert select(cands, ObjectiveSpec(), always).winner_id == "b"  # overlap: a tie, won on the margin
    record = ObjectiveContrasts(ids=["a", "b", "x"], mu=[np.log(5.0), np.log(6.5), np.log(5.1)],
                               cov=[[4e-4, 3e-4, 3e-4], [3e-4, 4e-4, 3e-4], [3e-4, 3e-4, 4e-4]], df=30,
                               aliases={"c": "x"})  # c is a duplicate of x, measured once
    sel = select(cands, ObjectiveSpec(), always, [record])
    assert sel.winner_id == "c" and sel.ties == ["a"]  # c is 2% from a, within its +-2.9%: a tie
    assert "b" not in sel.ties
    assert any("(paired)" in line for line in sel.log)
    # A record with too few degrees of freedom is not used: overlap decides, as without it.
    thin = record.model_copy(update={"df": 2})
    assert select(cands, ObjectiveSpec(), always, [thin]).winner_id == "b"
    # A candidate no record covers falls back to the overlap of its own interval.
    other = cand("d", (5.5, 3.5, 7.5), margin=0.95)
    sel = select([*cands, other], ObjectiveSpec(), always, [record])
    assert sel.winner_id == "d" and any("d 5.5" in line and "(overlap)" in line for line in sel.log)


def test_tie_break_ignores_float_noise_in_margins_and_build_seconds() -> None:
    # Seen in `make demo`: margins 1.0 vs 0.99999 and builds 0.0 s vs 1.3 s decided a 14-way tie in
    # favour of a candidate twice as slow. Within a resolution they are equal; speed decides.
    slow = cand("slow", (4.8, 2.0, 7.0), margin=1.0, build_s=0.0)
    fast = cand("fast", (2.5, 1.9, 5.0), margin=0.99999, build_s=1.3)
    sel = select([slow, fast], ObjectiveSpec(), always)
    assert sel.winner_id == "fast" and sel.ties == ["slow"]
    # A real difference still counts: a clearly larger margin, or a build a minute cheaper.
    assert select([slow, cand("fast", (2.5, 1.9, 5.0), margin=0.5, build_s=1.3)], ObjectiveSpec(),
                  always).winner_id == "slow"
    assert select([slow, cand("fast", (2.5, 1.9, 5.0), margin=1.0, build_s=60.0)], ObjectiveSpec(),
                  always).winner_id == "slow"


def test_only_measured_and_eligible_candidates_count() -> None:
    cands = [cand("x", (1, 0.9, 1.1), status="failed"), cand("y", (2, 1.9, 2.1)), cand("z", (3, 2.9, 3.1))]
    sel = select(cands, ObjectiveSpec(), lambda c: (c.id != "y", "accuracy margin too small"))
    assert sel.winner_id == "z"
    assert any("y: not eligible (accuracy margin too small)" in line for line in sel.log)
    assert select([], ObjectiveSpec(), always).winner_id is None


def test_objective_value_throughput_respects_the_slo_and_rate_profiles() -> None:
    closed = [stats((20, 18, 22), tp=(500, 480, 520))]
    assert objective_value(closed, ObjectiveSpec(metric="throughput")) == -500
    assert objective_value(closed, ObjectiveSpec(metric="throughput", slo_p99_ms=10)) is None
    rates = [stats((3, 2.8, 3.2), (100, 99, 101), LoadProfile(kind="rate", rate=100)),
             stats((6, 5.5, 6.5), (200, 198, 202), LoadProfile(kind="rate", rate=200)),
             stats((30, 25, 40), (400, 390, 410), LoadProfile(kind="rate", rate=400)),
             stats((5, 4, 6), (790, 780, 800), LoadProfile(kind="rate", rate=800), rate_held=False)]
    # highest rate held with p99 under the SLO: 200/s (400/s breaks the SLO, 800/s was not held)
    assert objective_value(rates, ObjectiveSpec(metric="throughput", slo_p99_ms=10)) == -200
    assert objective_value([stats((3, 2, 4), errors=2)], ObjectiveSpec()) is None
    assert objective_value(closed, ObjectiveSpec(metric="p50")) == 10
    assert objective_value(closed, ObjectiveSpec(load_index=3)) is None


def _remeasured(samples: np.ndarray) -> RemeasureResult:
    w = WindowResult(duration_s=1, requests=samples.size, errors=0, throughput=samples.size, p50_ms=0, p90_ms=0,
                     p99_ms=0, mean_ms=0)
    return RemeasureResult(stats=LatencyStats(load=LoadProfile(), windows=[w]), samples=[WindowSample(w, samples)])


def test_gain_is_significant_only_when_the_interval_excludes_one() -> None:
    rng = np.random.default_rng(0)
    base = _remeasured(rng.lognormal(np.log(10), 0.25, 3000))
    faster = _remeasured(rng.lognormal(np.log(8), 0.25, 3000))
    same = _remeasured(rng.lognormal(np.log(10), 0.25, 3000))
    slower = _remeasured(rng.lognormal(np.log(12), 0.25, 3000))
    obj = ObjectiveSpec(metric="p90")
    g = gain(base, faster, obj, 0.95, 500, selection_estimate_ratio=1.4)
    assert g.significant and 1.15 < g.ratio.value < 1.35 and g.selection_estimate_ratio == 1.4
    assert g.baseline_ms > g.winner_ms
    assert g.statistic == "pooled"  # one window a side: no rounds to pair, and the report says so
    assert not gain(base, same, obj, 0.95, 500, None).significant
    worse = gain(base, slower, obj, 0.95, 500, None)
    assert not worse.significant and worse.ratio.high < 1.0


def test_a_tail_objective_no_order_statistic_bounds_is_refused() -> None:
    thin = cand("thin", (3, 2.9, 3.1))
    thin.latency[0].requests, thin.latency[0].unbounded = 120, ["p99"]
    cands = [cand("base", (10, 9.5, 10.5), baseline=True), thin]
    sel = select(cands, ObjectiveSpec(metric="p99"), always)
    assert sel.winner_id == "base" and "thin" not in sel.values
    assert any("thin: refused" in line and "120 requests" in line and "500" in line for line in sel.log)
    assert select(cands, ObjectiveSpec(metric="p50"), always).winner_id == "thin"  # the median is bounded


def test_finalists_are_the_tie_group_filled_to_top_k_and_the_baseline() -> None:
    from gpt_triton.select import Selection
    from gpt_triton.steps import contenders

    cands = [cand("base", (10, 9, 11), baseline=True), cand("a", (5, 4, 6)), cand("b", (5.2, 4, 6)),
             cand("c", (6, 5, 7)), cand("d", (8, 7, 9))]
    first = Selection(winner_id="b", ties=["a"], values={c.id: c.latency[0].p99_ms.value for c in cands})  # type: ignore[union-attr]
    assert [c.id for c in contenders(cands, first, top_k=3, cap=6)] == ["a", "b", "c", "base"]
    assert [c.id for c in contenders(cands, first, top_k=1, cap=6)] == ["a", "b", "base"]  # the whole tie group
    # A cap keeps the fastest, and always the search's winner.
    wide = Selection(winner_id="d", ties=["a", "b", "c"], values=first.values)
    assert [c.id for c in contenders(cands, wide, top_k=3, cap=2)] == ["d", "a", "base"]


def test_the_refined_pair_can_hand_the_choice_back_to_the_baseline() -> None:
    from gpt_triton.select import Selection, after_refinement

    chosen = Selection(winner_id="a", runner_up_id="b", ties=["b", "base"], estimate_ratio=1.03,
                       values={"a": 34.0, "b": 34.3, "base": 35.0}, log=["selected a, runner-up b"])
    # The pair's windows still put the selected candidate ahead: the choice stands, with their ratio.
    ahead = after_refinement(chosen, "base", Interval(value=1.08, low=0.95, high=1.21), (5500, 5500))
    assert (ahead.winner_id, ahead.runner_up_id, ahead.estimate_ratio, ahead.log) == ("a", "b", 1.08, chosen.log)
    assert ahead.estimate == Interval(value=1.08, low=0.95, high=1.21)  # carried to the re-measure's comparison
    # They put the baseline ahead (ResNet, 2026-12-04: 0.824 [0.719, 1.129]): the baseline is selected.
    behind = after_refinement(chosen, "base", Interval(value=0.824, low=0.719, high=1.129), (5500, 5400))
    assert (behind.winner_id, behind.runner_up_id, behind.estimate_ratio) == ("base", "a", 1.0)
    assert behind.estimate is None  # no gain is claimed for the baseline
    assert behind.ties == ["b"] and behind.values == chosen.values
    assert "0.824 [0.719, 1.129] on 5500 + 5400 requests puts the baseline ahead" in behind.log[-1]
    assert chosen.winner_id == "a" and len(chosen.log) == 1  # a new Selection, the old one untouched
    # A baseline selection found ineligible (an SLO it misses, say) is not handed the choice.
    ineligible = chosen.model_copy(update={"values": {"a": 34.0, "b": 34.3}})
    assert after_refinement(ineligible, "base", Interval(value=0.824, low=0.719, high=1.129), (1, 1)).winner_id == "a"
    # Nothing to reconsider when the baseline was already chosen.
    own = Selection(winner_id="base", estimate_ratio=1.0)
    assert after_refinement(own, "base", Interval(value=0.5, low=0.4, high=0.6), (1, 1)) is own


def _windowed(windows: list[np.ndarray]) -> RemeasureResult:
    results = [WindowResult(duration_s=1, requests=w.size, errors=0, throughput=w.size, p50_ms=0, p90_ms=0,
                            p99_ms=0, mean_ms=0) for w in windows]
    return RemeasureResult(stats=LatencyStats(load=LoadProfile(), windows=results),
                           samples=[WindowSample(r, w) for r, w in zip(results, windows, strict=True)])


def test_the_gain_is_paired_by_round_unless_the_spec_asks_pooled() -> None:
    # Four rounds; in the last the winner's window caught a slow spell: its p99 holds the pooled winner p99.
    rng = np.random.default_rng(4)
    base = _windowed([20 * (1 + rng.exponential(0.05, 500)) for _ in range(4)])
    win = _windowed([10 * (1 + rng.exponential(0.05, 500)) + (8.0 if i == 3 else 0.0) * (rng.random(500) < 0.2)
                     for i in range(4)])
    obj = ObjectiveSpec(metric="p99")
    paired, pooled = gain(base, win, obj, 0.95, 300), gain(base, win, obj, 0.95, 300, statistic="pooled")
    per_round = [np.percentile(b, 99) / np.percentile(w, 99) for b, w in zip(base.window_latencies_ms,
                                                                               win.window_latencies_ms, strict=True)]
    assert paired.ratio.value == pytest.approx(float(np.exp(np.mean(np.log(per_round)))))
    assert pooled.ratio.value == pytest.approx(np.percentile(base.latencies_ms, 99) / np.percentile(win.latencies_ms, 99))
    assert pooled.ratio.value < paired.ratio.value
    assert paired.baseline_ms == pooled.baseline_ms  # the per-candidate figures stay pooled either way
    assert (paired.statistic, pooled.statistic) == ("paired", "pooled")  # the report says which the ratio is
