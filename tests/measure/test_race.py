"""Racing's drift model: wrongly dropping a candidate better than the leader stays within the stated
error rate when a drift process common to all candidates moves every window (simulation), and the
model removes drift that neighbouring windows share."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_triton.accuracy.bounds import clopper_pearson_upper
from gpt_triton.measure.racing import RaceWindow, drift_fit, race_alpha, race_round, window_log_stat

SLOTS_PER_WINDOW = 10  # drift is simulated on a finer grid than a window, so windows see part of it


def simulate_race(rng: np.random.Generator, mus: np.ndarray, rounds: int, confidence: float,
                  drift_sd: float, drift_rho: float, requests: int = 48) -> tuple[bool, int, int]:
    """One interleaved race over candidates with true log values ``mus``; a shared OU drift (per slot
    correlation ``drift_rho``, stationary sd ``drift_sd``) multiplies every request. Returns (a candidate
    truly better than the leader was dropped, windows spent, candidates left)."""
    n = len(mus)
    alpha = race_alpha(confidence, n, rounds)
    level = 0.0
    innovation = drift_sd * np.sqrt(1 - drift_rho**2)
    windows: list[RaceWindow] = []
    live = [str(c) for c in range(n)]
    wrong, spent = False, 0
    for r in range(rounds):
        order = live if r == 0 else [live[k] for k in rng.permutation(len(live))]
        for cid in order:
            slots = []
            for _ in range(SLOTS_PER_WINDOW):
                level = drift_rho * level + innovation * rng.standard_normal()
                slots.append(level)
            per_request = np.repeat(slots, requests // SLOTS_PER_WINDOW)
            lat = np.exp(mus[int(cid)] + per_request) * rng.lognormal(0.0, 0.15, per_request.size)
            windows.append(RaceWindow(cid, r, *window_log_stat(lat, "p50", seed=int(rng.integers(1 << 30)))))
            spent += 1
        if len(live) < 2:
            break
        state = race_round(windows, live, alpha)
        if state is None:
            continue
        for cid, verdict in state.verdicts.items():
            if verdict.drop:
                wrong |= mus[int(cid)] < mus[int(state.leader)]
                live.remove(cid)
    return wrong, spent, len(live)


@pytest.mark.parametrize(("drift_sd", "drift_rho"), [(0.08, 0.98), (0.08, 0.9)])
def test_wrong_drops_stay_within_the_stated_error_rate_under_shared_drift(drift_sd: float, drift_rho: float) -> None:
    # rho 0.98 per tenth of a window: drift slower than a window; 0.9: on the scale of a window, which
    # the in-window estimate of the first round sees least (uninflated, it wrongly dropped in 7.5% of 80 races).
    rng = np.random.default_rng(11)
    # 24 candidates: a cluster of near-ties at the top (1-3% apart) and a tail of clear losers.
    mus = np.log(np.concatenate([[10.0, 10.1, 10.2, 10.3], np.linspace(11.0, 20.0, 20)]))
    races, confidence = 100, 0.95
    wrong_races, spent, left = 0, 0, []
    for _ in range(races):
        wrong, used, remaining = simulate_race(rng, mus, rounds=4, confidence=confidence, drift_sd=drift_sd,
                                               drift_rho=drift_rho)
        wrong_races += wrong
        spent += used
        left.append(remaining)
    # Family-wise claim: P(any better-than-leader candidate dropped) <= 1 - confidence. The test asserts
    # the claim itself, not the claim plus slack: the one-sided 95% Clopper-Pearson upper bound of the
    # wrong-drop rate over these races must be within 5%. With 100 races that admits at most one wrong
    # race (bound 4.7%; two give 6.2%); the seeded runs here have none (bound 3.0%).
    assert clopper_pearson_upper(wrong_races, races, 0.95) <= 1 - confidence, wrong_races
    # And racing must actually save: far fewer than 24 x 4 windows, the tail gone after round 1-2.
    assert spent / races < 0.6 * 24 * 4, spent / races  # about 48 of 96 here
    assert np.median(left) <= 8, left


def test_a_window_constant_shared_offset_cancels_between_candidates() -> None:
    # Drift that is constant within a round is removed exactly by the round effect: two equal
    # candidates are never separated however large the drift, and a 30% worse one is dropped.
    y = {"a": [0.0, 0.5, -0.3], "b": [0.01, 0.49, -0.29], "c": [0.27, 0.77, -0.03]}
    windows = [RaceWindow(c, r, y[c][r], 1e-4) for r in range(3) for c in "abc"]
    state = race_round(windows, ["a", "b", "c"], alpha=0.01)
    assert state is not None and state.leader == "a"
    assert not state.verdicts["b"].drop and state.verdicts["c"].drop


def test_drift_shared_by_neighbouring_windows_is_removed() -> None:
    # Drift on the scale of a window (AR(1) between consecutive windows, rho 0.8, sd 10%) plus 2%
    # window noise: the per-round effect cannot see it, the neighbour correlation does. The model's
    # innovation sd is near the window noise, and the fitted candidate effects are close to the truth.
    rng = np.random.default_rng(3)
    mus = {f"c{k}": float(np.log(1 + 0.1 * k)) for k in range(12)}
    rho, level, windows = 0.8, 0.0, []
    for r in range(4):
        order = list(mus) if r == 0 else [list(mus)[k] for k in rng.permutation(len(mus))]
        for cid in order:
            level = rho * level + 0.10 * np.sqrt(1 - rho**2) * rng.standard_normal()
            windows.append(RaceWindow(cid, r, mus[cid] + level + 0.02 * rng.standard_normal(), 0.02**2))
    fit = drift_fit(windows)
    assert fit is not None and fit.rho > 0.4
    assert np.sqrt(fit.sigma2) < 0.08  # the raw window-to-window sd is ~0.10
    errors = [fit.mu[c] - fit.mu["c0"] - (mus[c] - mus["c0"]) for c in mus]
    assert max(abs(e) for e in errors) < 3.5 * np.sqrt(max(fit.contrast_var(c, "c0") for c in mus if c != "c0"))
    # And with no residual degrees of freedom (one round) there is no fit.
    assert drift_fit(windows[:12]) is None


def test_no_interval_without_any_noise_estimate() -> None:
    # One round and windows too small to look inside: nothing honest to say, so nothing is dropped.
    assert race_round([RaceWindow("a", 0, 0.0), RaceWindow("b", 0, 1.0)], ["a", "b"], 0.01) is None
    value, var = window_log_stat(np.full(8, 5.0), "p50")
    assert var is None and abs(value - np.log(5.0)) < 1e-12


def _windows(rng: np.random.Generator, mus: dict[str, float], rounds: int, sd: float) -> list[RaceWindow]:
    out = []
    for r in range(rounds):
        for cid, mu in mus.items():
            out.append(RaceWindow(cid, r, mu + sd * rng.standard_normal(), (sd / 4) ** 2))
    return out


def test_racing_is_futile_when_the_contenders_left_are_ties_the_budget_cannot_split() -> None:
    rng = np.random.default_rng(5)
    # three candidates 0.5% apart with 6% window noise: 10 windows each cannot separate them
    futile = 0
    for _ in range(20):
        windows = _windows(rng, {"a": 0.0, "b": 0.005, "c": 0.01}, rounds=3, sd=0.06)
        state = race_round(windows, ["a", "b", "c"], alpha=0.01, max_windows=10)
        assert state is not None
        futile += state.futile
    assert futile >= 10  # 13 of 20 here: a tie that happens to look 8% apart is worth more windows


def test_racing_is_rarely_futile_while_a_contender_could_still_be_separated() -> None:
    rng = np.random.default_rng(5)
    # 15% apart with 8% window noise: seldom separated after 3 rounds, but 10 windows each would
    # separate them; a third, far slower candidate's windows inform the noise model
    futile = dropped = 0
    for _ in range(20):
        windows = _windows(rng, {"a": 0.0, "b": 0.15, "c": 0.5}, rounds=3, sd=0.08)
        state = race_round(windows, ["a", "b"], alpha=0.01, max_windows=10)
        assert state is not None
        futile += state.futile
        dropped += any(v.drop for v in state.verdicts.values())
        assert not race_round(windows, ["a", "b"], alpha=0.01).futile  # no budget: nothing to be futile about
    assert futile <= 6
    assert dropped <= 10


def test_a_stopped_candidate_that_was_not_dropped_does_not_hold_the_race_open() -> None:
    rng = np.random.default_rng(5)
    # b is 15% slower: 10 windows each could separate it, so the race is seldom futile while b is still
    # measured. Once the harness stopped b (stable after 3 windows), only the leader's windows can
    # sharpen the contrast; once both are stopped, nothing can, and the race must be released.
    held_open = released_b = released_both = undropped = 0
    for _ in range(20):
        windows = _windows(rng, {"a": 0.0, "b": 0.15, "c": 0.5}, rounds=3, sd=0.08)
        live = race_round(windows, ["a", "b"], alpha=0.01, max_windows=10)
        b_stopped = race_round(windows, ["a", "b"], alpha=0.01, max_windows=10, frozen=frozenset({"b"}))
        both = race_round(windows, ["a", "b"], alpha=0.01, max_windows=10, frozen=frozenset({"a", "b"}))
        assert live is not None and b_stopped is not None and both is not None
        if any(v.drop for v in live.verdicts.values()):
            continue
        undropped += 1
        held_open += not live.futile
        released_b += b_stopped.futile and not live.futile
        released_both += both.futile
        assert b_stopped.futile >= live.futile  # stopping b never makes a futile race worth continuing
    assert held_open >= 10 and released_both == undropped  # nothing more to measure: always a tie
    assert released_b >= 1  # the leader's windows alone seldom suffice
