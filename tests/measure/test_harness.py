"""Interleaving, racing, dedupe and re-measure against a real Triton (python models with known costs)."""

from __future__ import annotations

import re
import time

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.core.outcomes import apply_outcomes
from gpt_triton.core.records import Candidate, DeployInfo
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.racing import drift_fit
from gpt_triton.measure.runs import MeasureRun, dedupe_key
from gpt_triton.select import gain, select
from gpt_triton.server import EmbeddedTriton


def cand(cid: str, model: str, sha: str | None = None, threads: int = 0) -> Candidate:
    route = Route(family="onnxruntime", knobs={"threads": threads})
    art = Artifact(family="onnxruntime", runtime="onnxruntime", route=route, directory="/nonexistent",
                   files=["model.onnx"], runtime_options={"session_options": {"intra_op_num_threads": threads}},
                   sha256=sha or f"sha-{cid}")
    return Candidate(id=cid, family="onnxruntime", route=route, serving=Route(family="serving"), status="deployed",
                     artifact=art, deploy=DeployInfo(model_name=model, backend="python", adapter=True))


def spec(**kw: object) -> MeasureSpec:
    # tail_requests=1: a p99 window holds 100 requests, not the default 500 (short tests; the sizing
    # itself is tested in test_quantiles.py and below). No burn-in unless a test asks for one.
    base: dict[str, object] = dict(warmup_s=0.1, window_s=0.3, window_min_requests=5, min_windows=3, max_windows=6,
                                   bootstrap_resamples=300, remeasure_windows=3, tail_requests=1, burn_in_s=0.0)
    base.update(kw)
    return MeasureSpec.model_validate(base)


def measured(m: Measurer, cands: list[Candidate], until_separated: bool = False) -> MeasureRun:
    """Measure, then apply the outcomes as the pipeline does (the measurer never changes a candidate)."""
    run = m.measure(cands, until_separated=until_separated)
    assert all(c.status == "deployed" for c in cands)  # read, never changed
    apply_outcomes(cands, run.outcomes)
    return run


@pytest.mark.slow
def test_racing_drops_the_slow_candidate_after_one_full_window(delay_models: EmbeddedTriton, requests_x: list) -> None:
    fast, slow = cand("fast", "measure_fast"), cand("slow", "measure_slow30")
    messages: list[str] = []
    loads = [LoadProfile(concurrency=1), LoadProfile(kind="rate", rate=40)]
    m = Measurer(delay_models.grpc_url, requests_x, spec(loads=loads, max_windows=4), ObjectiveSpec(metric="p50"),
                 progress=messages.append)
    run = measured(m, [fast, slow])
    log = run.log
    assert fast.status == slow.status == "measured"
    assert slow.reason is not None and "dropped by racing" in slow.reason
    assert fast.reason is None
    assert len(slow.latency[0].windows) == 1  # one full window each before any drop, dropped right after
    assert any(line.startswith("racing: dropped slow") and "leader fast" in line and "lower bound" in line
               for line in log)
    assert any("fast separated from every other candidate" in line for line in log)
    assert [cid for cid, _ in m.window_order[:2]] == ["fast", "slow"]
    # Racing's view of the objective load: one entry per window, in the order run.
    raced = run.race_windows[loads[0].label()]
    assert [w.candidate for w in raced] == [cid for cid, label in m.window_order if label == loads[0].label()]
    assert fast.latency[0].p50_ms is not None and slow.latency[0].p50_ms is not None
    assert slow.latency[0].p50_ms.low > 25 > fast.latency[0].p50_ms.high
    assert messages  # progress reported
    # The second load runs only for the survivors; the dropped candidate keeps an empty entry there.
    assert len(slow.latency) == len(fast.latency) == 2 and slow.latency[1].windows == []
    assert len(fast.latency[1].windows) >= 3 and fast.latency[1].rate_held is not None
    assert "slow" not in {cid for cid, label in m.window_order if label == loads[1].label()}
    chosen = select([fast, slow], ObjectiveSpec(metric="p50"), lambda c: (True, ""))
    assert chosen.winner_id == "fast" and chosen.ties == []
    assert run.contrasts is None  # one window each: no residual to fit a drift model on; intervals decide


@pytest.mark.slow
def test_without_racing_every_candidate_gets_its_windows(delay_models: EmbeddedTriton, requests_x: list) -> None:
    fast, slow = cand("fast", "measure_fast"), cand("slow", "measure_slow20")
    m = Measurer(delay_models.grpc_url, requests_x, spec(racing=False, max_windows=3), ObjectiveSpec(metric="p99"),
                 metrics_url=delay_models.metrics_url)
    run = measured(m, [fast, slow])
    assert slow.reason is None and len(slow.latency[0].windows) == 3 and len(fast.latency[0].windows) == 3
    server = slow.latency[0].server
    assert server is not None and server.compute_infer_ms > 19  # the model's 20 ms sleep, seen server-side
    assert server.success_count == sum(w.requests for w in slow.latency[0].windows)
    assert slow.latency[0].windows[0].server is not None and slow.latency[0].windows[0].server.metrics_delta
    assert run.machine_sharing["cores"] >= 1 and "note" in run.machine_sharing
    # The drift model of the objective load's run, for selection's paired tie test.
    assert run.contrasts is not None and run.contrasts.covers("fast", "slow")
    diff, se = run.contrasts.contrast("slow", "fast")
    assert diff > 1.0 and se > 0
    # 2 candidates x 3 windows leave the drift model 1 degree of freedom: too few to judge a tie on, so
    # selection falls back to the intervals, which separate a 20 ms sleep from none.
    assert run.contrasts.df == 1
    chosen = select([fast, slow], ObjectiveSpec(metric="p99"), lambda c: (True, ""), [run.contrasts])
    assert chosen.winner_id == "fast" and chosen.ties == []


@pytest.mark.slow
def test_duplicates_are_measured_once_and_missing_models_fail(delay_models: EmbeddedTriton, requests_x: list) -> None:
    a = cand("a", "measure_fast", sha="same")
    b = cand("b", "measure_fast_b", sha="same")  # same artifact/options/serving: never driven
    missing = cand("missing", "no_such_model")
    assert dedupe_key(a) == dedupe_key(b) != dedupe_key(cand("c", "measure_fast", sha="same", threads=2))
    m = Measurer(delay_models.grpc_url, requests_x, spec(racing=False, max_windows=3), ObjectiveSpec())
    run = measured(m, [a, b, missing])
    log = run.log
    assert {cid for cid, _ in m.window_order} == {"a"}
    assert any("b: same artifact" in line and "measured once" in line for line in log)
    assert b.status == "measured" and b.latency[0].p99_ms == a.latency[0].p99_ms
    assert b.latency[0] is not a.latency[0]  # copied, not shared
    assert missing.status == "failed" and missing.reason and "no_such_model" in missing.reason
    # One candidate measured: no contrast to fit, so selection falls back to its intervals.
    assert run.contrasts is None


@pytest.mark.slow
def test_remeasure_interleaves_and_the_gain_is_significant(delay_models: EmbeddedTriton, requests_x: list) -> None:
    base, win = cand("base", "measure_slow20"), cand("win", "measure_fast")
    base.is_baseline = True
    objective = ObjectiveSpec(metric="p50")
    m = Measurer(delay_models.grpc_url, requests_x, spec(), objective)
    results = m.remeasure([base, win])
    assert [cid for cid, _ in m.window_order] == ["base", "win"] * 3
    assert len(results["base"].stats.windows) == 3 and results["win"].latencies_ms.size > 50
    g = gain(results["base"], results["win"], objective, 0.95, 500, selection_estimate_ratio=20.0)
    assert g.significant and g.ratio.low > 5 and g.baseline_ms > 19 > g.winner_ms
    assert g.selection_estimate_ratio == 20.0


@pytest.mark.slow
def test_throughput_objective_with_an_slo(delay_models: EmbeddedTriton, requests_x: list) -> None:
    fast, slow = cand("fast", "measure_fast"), cand("slow", "measure_slow20")
    objective = ObjectiveSpec(metric="throughput", slo_p99_ms=10.0)
    m = Measurer(delay_models.grpc_url, requests_x, spec(max_windows=4), objective)
    measured(m, [fast, slow])
    assert slow.reason is not None and "SLO" in slow.reason  # p99 ~20 ms can never meet 10 ms
    chosen = select([fast, slow], objective, lambda c: (True, ""))
    assert chosen.winner_id == "fast" and chosen.values["fast"] < 0


@pytest.mark.slow
def test_compare_runs_fixed_windows_in_shuffled_rounds(delay_models: EmbeddedTriton, requests_x: list) -> None:
    a, b, c = cand("a", "measure_fast"), cand("b", "measure_slow20"), cand("c", "measure_fast_b")
    m = Measurer(delay_models.grpc_url, requests_x, spec(warmup_s=0.0, window_s=0.2), ObjectiveSpec(metric="p50"))
    windows = m.compare([a, b, c], 4)
    assert m.windows_run == 12 and len(windows) == 12
    for k in range(4):  # every round holds each candidate once; the judge never races anyone out
        assert sorted(w.candidate for w in windows[3 * k: 3 * k + 3]) == ["a", "b", "c"]
        assert {w.round for w in windows[3 * k: 3 * k + 3]} == {k + 1}
    fit = drift_fit(windows)
    assert fit is not None and fit.mu["b"] - fit.mu["a"] > 1.0  # 20 ms sleep vs ~0: e-fold and more
    with pytest.raises(GptTritonError, match="not deployed"):
        m.compare([cand("a", "measure_fast").model_copy(update={"deploy": None}), b], 2)


@pytest.mark.slow
def test_windows_hold_enough_requests_for_the_objective_quantile(delay_models: EmbeddedTriton,
                                                                 requests_x: list) -> None:
    fast = cand("fast", "measure_fast")
    m = Measurer(delay_models.grpc_url, requests_x, spec(tail_requests=2, window_s=0.05, max_windows=3, racing=False),
                 ObjectiveSpec(metric="p99"))
    assert m.window_min_requests == 200  # 2 requests beyond the p99
    run = measured(m, [fast])
    stats = fast.latency[0]
    assert all(w.requests >= 200 for w in stats.windows)
    assert stats.requests == sum(w.requests for w in stats.windows) and stats.unbounded == []
    assert any("holds at least 200 requests" in line and "a window lasts about" in line for line in run.log)


@pytest.mark.slow
def test_until_separated_keeps_going_past_stability(delay_models: EmbeddedTriton, requests_x: list) -> None:
    a, b = cand("a", "measure_fast"), cand("b", "measure_fast_b")  # the same cost: hard to separate
    # stability=10: every 3 windows are "stable", so a plain run stops at 3 windows each.
    kw = dict(warmup_s=0.0, window_s=0.1, min_windows=3, max_windows=5, stability=10.0)
    plain = measured(Measurer(delay_models.grpc_url, requests_x, spec(**kw, racing=False), ObjectiveSpec(metric="p50")),
                     [a, b])
    assert any(line.startswith("a stable at") for line in plain.log) and len(a.latency[0].windows) == 3
    a, b = cand("a", "measure_fast"), cand("b", "measure_fast_b")
    run = measured(Measurer(delay_models.grpc_url, requests_x, spec(**kw), ObjectiveSpec(metric="p50")), [a, b],
                   until_separated=True)
    assert not any("stable at" in line for line in run.log)
    # It ends only as racing decides: futile to separate (a tie that holds), one dropped, or max_windows.
    ended = (any("cannot be separated" in line for line in run.log) or a.reason or b.reason
             or len(a.latency[0].windows) == len(b.latency[0].windows) == 5)
    assert ended


@pytest.mark.slow
def test_past_the_deadline_a_run_ends_at_min_windows(delay_models: EmbeddedTriton, requests_x: list) -> None:
    """The finalist stage's share of the time budget: once it has passed, no round starts beyond
    min_windows, whether the run would go on until separated or until stable."""
    a, b = cand("a", "measure_fast"), cand("b", "measure_fast_b")  # the same cost: racing would go on
    kw = dict(warmup_s=0.0, window_s=0.1, min_windows=3, max_windows=6, stability=1e-9)
    m = Measurer(delay_models.grpc_url, requests_x, spec(**kw, racing=False), ObjectiveSpec(metric="p50"))
    run = m.measure([a, b], until_separated=True, deadline=time.monotonic())
    assert {o.candidate_id: len(o.latency[0].windows) for o in run.outcomes} == {"a": 3, "b": 3}
    assert any(line.startswith("time budget: concurrency=1 ended after 3 rounds") for line in run.log), run.log
    # stability 1e-9 never holds: the stable rule would run to max_windows; the deadline ends it, and says so.
    a, b = cand("a", "measure_fast"), cand("b", "measure_fast_b")
    late = measured(Measurer(delay_models.grpc_url, requests_x, spec(**kw, racing=False), ObjectiveSpec(metric="p50")),
                    [a, b])
    assert len(a.latency[0].windows) == 6 and any(line.endswith("(max_windows)") for line in late.log)
    m = Measurer(delay_models.grpc_url, requests_x, spec(**kw, racing=False), ObjectiveSpec(metric="p50"))
    run = m.measure([a, b], deadline=time.monotonic())
    assert {o.candidate_id: len(o.latency[0].windows) for o in run.outcomes} == {"a": 3, "b": 3}
    assert any(line.startswith("a not stable") and line.endswith("(time budget)") for line in run.log), run.log
    # A deadline not yet reached changes nothing.
    m = Measurer(delay_models.grpc_url, requests_x, spec(**kw, racing=False), ObjectiveSpec(metric="p50"))
    run = m.measure([a, b], until_separated=True, deadline=time.monotonic() + 3600)
    assert {o.candidate_id: len(o.latency[0].windows) for o in run.outcomes} == {"a": 6, "b": 6}


@pytest.mark.slow
def test_a_deadline_can_move_with_what_the_windows_took(delay_models: EmbeddedTriton, requests_x: list) -> None:
    """The search's deadline is a function: the run learns how long its windows take while it runs
    (gpt_triton.budget). The measurer times every objective window, warm-ups apart."""
    a, b = cand("a", "measure_fast"), cand("b", "measure_fast_b")
    kw = dict(window_s=0.1, min_windows=3, max_windows=6, stability=1e-9)
    m = Measurer(delay_models.grpc_url, requests_x, spec(**kw, warmup_s=0.2, racing=False), ObjectiveSpec(metric="p50"))
    # Not yet known after three rounds (six windows), passed once eight windows have been timed.
    run = m.measure([a, b], until_separated=True,
                    deadline=lambda: time.monotonic() if len(m.objective_window_seconds) >= 8 else None)
    assert {o.candidate_id: len(o.latency[0].windows) for o in run.outcomes} == {"a": 4, "b": 4}
    assert any(line.startswith("time budget: concurrency=1 ended after 4 rounds") for line in run.log), run.log
    assert len(m.objective_window_seconds) == 8 and m.windows_run == 10  # the two warm-ups are not timed
    assert all(s >= 0.1 for s in m.objective_window_seconds)


@pytest.mark.slow
def test_remeasure_goes_on_with_the_pair_until_the_gain_is_known(delay_models: EmbeddedTriton,
                                                                  requests_x: list) -> None:
    base, win, other = cand("base", "measure_slow20"), cand("win", "measure_fast"), cand("other", "measure_fast_b")
    base.is_baseline = True
    objective = ObjectiveSpec(metric="p50")
    # An unreachable target: the pair goes on to the window cap, the third candidate stops at 3.
    m = Measurer(delay_models.grpc_url, requests_x, spec(gain_precision=1e-6, gain_max_windows=5, window_s=0.1),
                 objective)
    notes: list[str] = []
    results = m.remeasure([win, other, base], ("base", "win"), notes)
    assert len(results["base"].stats.windows) == len(results["win"].stats.windows) == 5
    assert len(results["other"].stats.windows) == 3
    assert sorted(cid for cid, _ in m.window_order[9:]) == ["base", "base", "win", "win"]  # only the pair goes on
    assert len(notes) == 1 and "NOT reached" in notes[0] and "after 5 windows each" in notes[0]
    # ... and says what the target would have cost, timed by the pair's own rounds (two windows of >= 0.1 s)
    shortfall = re.search(r"needs about (\d+) windows each, some (\d+) rounds \((\d+) (s|min)\) more$", notes[0])
    assert shortfall is not None and int(shortfall[1]) > 5 and int(shortfall[2]) == int(shortfall[1]) - 5
    # A target the first windows already meet: nothing more runs.
    m = Measurer(delay_models.grpc_url, requests_x, spec(gain_precision=0.9, window_s=0.1), objective)
    notes = []
    m.remeasure([win, base], ("base", "win"), notes)
    assert m.windows_run == 6 + 2 and "reached" in notes[0] and "NOT" not in notes[0]  # + 2 warm-ups
    # The run's time budget already spent: the re-measure's own windows run, the extension does not.
    m = Measurer(delay_models.grpc_url, requests_x, spec(gain_precision=1e-6, gain_max_windows=5, window_s=0.1),
                 objective)
    notes = []
    results = m.remeasure([win, base], ("base", "win"), notes, deadline=time.monotonic())
    assert len(results["base"].stats.windows) == len(results["win"].stats.windows) == 3
    assert "NOT reached (time budget)" in notes[0] and "after 3 windows each" in notes[0]


@pytest.mark.slow
def test_every_counted_window_is_reported_as_it_ends(delay_models: EmbeddedTriton, requests_x: list) -> None:
    base, win = cand("base", "measure_slow20"), cand("win", "measure_fast")
    reported: list[tuple[str, str, int, float]] = []
    m = Measurer(delay_models.grpc_url, requests_x, spec(gain_precision=1e-6, gain_max_windows=4, window_s=0.1),
                 ObjectiveSpec(metric="p50"), on_window=lambda c, load, r, res, lat: reported.append((c, load, r, res.p50_ms)))
    results = m.remeasure([win, base], ("base", "win"), [])
    # The re-measure's 3 rounds and the pair's extension to 4, not the two warm-ups (windows_run counts them).
    assert m.windows_run == 8 + 2
    assert [(c, load) for c, load, _, _ in reported] == m.window_order
    assert [r for c, _, r, _ in reported if c == "win"] == [1, 2, 3, 4]
    for cid in ("base", "win"):  # the figures reported are the windows the result rests on, in order
        assert [p50 for c, _, _, p50 in reported if c == cid] == [w.p50_ms for w in results[cid].stats.windows]


@pytest.mark.slow
def test_measure_pair_runs_the_remeasure_design(delay_models: EmbeddedTriton, requests_x: list) -> None:
    """The estimate's run is the re-measure's design: every candidate given in its order (A, B, C) for
    remeasure_windows rounds, then the pair alone until the stop rule or the cap."""
    base, fast, slow = cand("base", "measure_slow20"), cand("fast", "measure_fast"), cand("slow", "measure_slow30")
    base.is_baseline = True
    kw = dict(warmup_s=0.0, window_s=0.1, min_windows=2, max_windows=3, racing=False, gain_precision=1e-6,
              gain_max_windows=5, remeasure_windows=3)
    m = Measurer(delay_models.grpc_url, requests_x, spec(**kw), ObjectiveSpec(metric="p50"))
    notes: list[str] = []
    found = m.measure_pair([fast, slow, base], ("base", "fast"), notes)
    # remeasure_windows 3 rounds of all three in the order given (no warm-ups: warmup_s 0; min_windows
    # plays no part), then two more rounds of the pair up to gain_max_windows 5 each.
    assert m.windows_run == 3 * 3 + 2 * 2
    assert [cid for cid, _ in m.window_order[:9]] == ["fast", "slow", "base"] * 3
    assert {cid for cid, _ in m.window_order[9:]} == {"base", "fast"}
    assert found is not None and found.windows == 5 and not found.reached
    assert found.ratio.low > 5  # 20 ms against ~0
    assert len(notes) == 1 and notes[0].startswith("finalists: base/fast ratio") and "NOT reached" in notes[0]
    assert m.measure_pair([base, fast], ("base", "fast"), [], "x") is not None
    off = Measurer(delay_models.grpc_url, requests_x, spec(**dict(kw, gain_precision=0)), ObjectiveSpec(metric="p50"))
    assert off.measure_pair([base, fast], ("base", "fast"), []) is None and off.windows_run == 0  # nothing measured
    with pytest.raises(GptTritonError, match="slow is not deployed"):
        m.measure_pair([base, slow.model_copy(update={"deploy": None})], ("base", "slow"), [])


@pytest.mark.slow
def test_the_stop_rule_is_checked_on_a_geometric_schedule(delay_models: EmbeddedTriton, requests_x: list,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule's bootstrap grows with the windows: it runs at 3, 4, 5, 7, 9 and 12 windows each, not
    after each of the nine rounds, and always on the last windows."""
    import gpt_triton.measure.harness as harness

    checked: list[int] = []
    original = harness.gain_precision

    def counting(baseline: list, leader: list, *args: object, **kwargs: object) -> object:
        checked.append(min(len(baseline), len(leader)))
        return original(baseline, leader, *args, **kwargs)

    monkeypatch.setattr(harness, "gain_precision", counting)
    base, fast = cand("base", "measure_slow20"), cand("fast", "measure_fast")
    base.is_baseline = True
    kw = dict(warmup_s=0.0, window_s=0.05, min_windows=3, max_windows=3, racing=False, gain_precision=1e-6,
              gain_max_windows=12)
    m = Measurer(delay_models.grpc_url, requests_x, spec(**kw), ObjectiveSpec(metric="p50"))
    found = m.measure_pair([base, fast], ("base", "fast"), [])
    assert found is not None and found.windows == 12
    assert checked == [3, 4, 5, 7, 9, 12]
    # Ended by the time budget between two checks: the note still reads every window. (Only the stop
    # rule's loop has a deadline; the pair's first min_windows rounds always run.)
    checked.clear()
    ticks = iter([False, False, False, True])
    monkeypatch.setattr(harness, "_past", lambda deadline: deadline is not None and next(ticks))
    notes: list[str] = []
    found = m.measure_pair([base, fast], ("base", "fast"), notes, deadline=0.0)
    assert checked == [3, 4, 5, 6] and found is not None and found.windows == 6
    assert "after 6 windows each" in notes[0] and "NOT reached (time budget)" in notes[0]


@pytest.mark.slow
def test_the_burn_in_comes_before_any_counted_window_and_counts_in_nothing(delay_models: EmbeddedTriton,
                                                                           requests_x: list) -> None:
    base, win, other = cand("base", "measure_slow20"), cand("win", "measure_fast"), cand("other", "measure_fast_b")
    reported: list[tuple[str, int, int]] = []
    m = Measurer(delay_models.grpc_url, requests_x, spec(burn_in_s=0.4, window_s=0.2), ObjectiveSpec(metric="p50"),
                 on_window=lambda c, load, r, res, lat: reported.append((c, r, res.requests)))
    notes: list[str] = []
    began = time.monotonic()
    results = m.remeasure([win, other, base], None, notes)
    assert time.monotonic() - began >= 3 * 0.4  # 0.4 s for each of the three
    rounds = [r for _, r, _ in reported]
    first_counted = rounds.index(1)
    # Round 0 (the burn-in, to windows.csv) first, over every candidate, then only counted rounds.
    assert set(rounds[:first_counted]) == {0} and 0 not in rounds[first_counted:]
    assert {c for c, r, _ in reported if r == 0} == {"base", "win", "other"}
    burnt = sum(n for _, r, n in reported if r == 0)
    assert burnt > 0 and len(notes) == 1
    assert notes[0].startswith(f"re-measure: burn-in: {burnt} requests in {first_counted} windows over ")
    assert notes[0].endswith(" s before any counted window (measure.burn_in_s 0.4 per model)")
    # The counted windows are what they were without it: 3 each, and only they are in the window order.
    assert all(len(r.stats.windows) == 3 for r in results.values()) and len(m.window_order) == 9
    assert m.windows_run == first_counted + 3 + 9  # the burn-in's windows, 3 warm-ups, 9 counted
    # The estimate's server has the re-measure's design: every candidate on it is burnt in.
    reported.clear()
    pair = Measurer(delay_models.grpc_url, requests_x, spec(burn_in_s=0.3, window_s=0.2, gain_precision=0.9),
                    ObjectiveSpec(metric="p50"), on_window=lambda c, load, r, res, lat: reported.append((c, r, res.requests)))
    notes = []
    assert pair.measure_pair([win, other, base], ("base", "win"), notes) is not None
    assert {c for c, r, _ in reported if r == 0} == {"base", "win", "other"} and notes[0].startswith("finalists: burn-in: ")
    # A member not deployed fails the step before the burn-in sends anything.
    early = Measurer(delay_models.grpc_url, requests_x, spec(burn_in_s=5.0, gain_precision=0.9), ObjectiveSpec(metric="p50"))
    with pytest.raises(GptTritonError, match="candidate other is not deployed: deploy it before finalists"):
        early.measure_pair([base, other.model_copy(update={"deploy": None})], ("base", "other"), [])
    assert early.windows_run == 0
    # None without the gain-precision rule: no server time spent on a burn-in either.
    off = Measurer(delay_models.grpc_url, requests_x, spec(burn_in_s=5.0, gain_precision=0), ObjectiveSpec(metric="p50"))
    assert off.measure_pair([base, win], ("base", "win"), []) is None and off.windows_run == 0
