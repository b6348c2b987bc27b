"""Stages in turns (gpt_triton/measure/relay.py): strict alternation a round each, one stage at a time, a
finished stage dropping out, a failure stopping the rest; and two measurers' windows on a real Triton."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from test_harness import cand, spec

from gpt_triton.core.spec import ObjectiveSpec
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.relay import Relay, RelayAborted, in_turns
from gpt_triton.measure.window_log import WindowSink
from gpt_triton.server import EmbeddedTriton


def rounds(relay: Relay, name: str, count: int, seen: list[tuple[str, int]], busy: list[int],
           fail_at: int | None = None) -> Callable[[], int]:
    def work() -> int:
        for k in range(1, count + 1):
            relay.turn(name)
            busy.append(1)
            assert len(busy) == 1, "two stages measured at once"
            seen.append((name, k))
            busy.pop()
            if k == fail_at:
                raise ValueError(f"{name} broke in round {k}")
        return count
    return work


def test_stages_alternate_a_round_each_and_one_that_ends_drops_out() -> None:
    relay = Relay(["a", "b", "c"])
    seen: list[tuple[str, int]] = []
    busy: list[int] = []
    done = in_turns(relay, {"a": rounds(relay, "a", 3, seen, busy), "b": rounds(relay, "b", 1, seen, busy),
                            "c": rounds(relay, "c", 4, seen, busy)})
    assert done == {"a": 3, "b": 1, "c": 4}
    assert seen == [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("c", 2), ("a", 3), ("c", 3), ("c", 4)]
    assert relay.turns == [name for name, _ in seen]
    assert not [t for t in threading.enumerate() if t.name.startswith("relay-")]


def test_two_alternated_stages_trade_places_every_other_cycle_and_follow_each_kind_as_often() -> None:
    """The cross-check's design (remeasure_step.py): the pair's stage first, the two clients' stages on one
    server swapping places every other cycle, so that each client's rounds come after the pair's as often
    as after the other client's; a stage that ends drops out of both orders."""
    relay = Relay(["pair", "mine", "other"], alternate=("mine", "other"))
    seen: list[tuple[str, int]] = []
    busy: list[int] = []
    in_turns(relay, {"pair": rounds(relay, "pair", 2, seen, busy), "mine": rounds(relay, "mine", 4, seen, busy),
                     "other": rounds(relay, "other", 5, seen, busy)})
    assert relay.turns == ["pair", "mine", "other", "pair", "other", "mine", "mine", "other", "other", "mine", "other"]
    after = [(a, b) for a, b in zip(relay.turns[:-1], relay.turns[1:], strict=True) if b != "pair"][:4]
    assert [a for a, b in after if b == "mine"] == ["pair", "other"]
    assert [a for a, b in after if b == "other"] == ["mine", "pair"]


def test_two_stages_alone_alternate_who_goes_first() -> None:
    relay = Relay(["mine", "other"], alternate=("mine", "other"))
    seen: list[tuple[str, int]] = []
    in_turns(relay, {"mine": rounds(relay, "mine", 3, seen, []), "other": rounds(relay, "other", 3, seen, [])})
    assert relay.turns == ["mine", "other", "other", "mine", "mine", "other"]
    with pytest.raises(ValueError, match="two distinct stages"):
        Relay(["a", "b"], alternate=("a", "z"))
    with pytest.raises(ValueError, match="two distinct stages"):
        Relay(["a", "b"], alternate=("a", "a"))


def test_a_failure_stops_the_other_stages_at_their_next_turn_and_is_raised() -> None:
    relay = Relay(["a", "b"])
    seen: list[tuple[str, int]] = []
    with pytest.raises(ValueError, match="b broke in round 2"):
        in_turns(relay, {"a": rounds(relay, "a", 10, seen, []), "b": rounds(relay, "b", 10, seen, [], fail_at=2)})
    assert seen == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]  # a never got its third round
    assert not [t for t in threading.enumerate() if t.name.startswith("relay-")]


def test_a_turn_outside_the_relay_or_after_a_failure_is_refused() -> None:
    relay = Relay(["a", "b"])
    with pytest.raises(ValueError, match="not in the relay"):
        relay.turn("z")
    relay.enter("a")
    relay.turn("a")
    relay.fail("b")
    with pytest.raises(RelayAborted, match="'b' failed"):
        relay.turn("a")
    with pytest.raises(ValueError, match="distinct"):
        Relay(["a", "a"])


def test_two_measurers_on_a_real_server_take_turns_a_round_each(delay_models: EmbeddedTriton, requests_x: list) -> None:
    """The finalist pair's design and the re-measure's, each its own measurer and seeds, in turns: their
    counted windows come in alternating blocks of one round (every burn-in first), and each reaches its
    own result."""
    base, fast = cand("base", "measure_slow20"), cand("fast", "measure_fast")
    base.is_baseline = True
    order: list[tuple[str, str, int]] = []

    def sink(stage: str) -> WindowSink:
        return lambda cid, _load, round_no, _res, _lat: order.append((stage, cid, round_no))

    kw = dict(warmup_s=0.0, window_s=0.1, racing=False, gain_precision=1e-6, gain_max_windows=5, remeasure_windows=2,
              burn_in_s=0.2)
    relay = Relay(["pair", "remeasure"])
    pair_m = Measurer(delay_models.grpc_url, requests_x, spec(**kw), ObjectiveSpec(metric="p50"), seed=1,
                      on_window=sink("pair"), at_round=lambda: relay.turn("pair"))
    again = Measurer(delay_models.grpc_url, requests_x, spec(**dict(kw, gain_max_windows=4)), ObjectiveSpec(metric="p50"),
                     on_window=sink("remeasure"), at_round=lambda: relay.turn("remeasure"))
    notes: list[str] = []
    results = in_turns(relay, {"pair": lambda: pair_m.measure_pair([fast, base], ("base", "fast"), notes),
                               "remeasure": lambda: again.remeasure([fast, base], ("base", "fast"), [])})
    found, remeasured = results["pair"], results["remeasure"]
    assert found is not None and found.windows == 5  # its own cap, reached after the other's
    assert isinstance(remeasured, dict) and len(remeasured["base"].samples) == 4
    burn = [stage for stage, _, round_no in order if round_no == 0]
    counted = [(stage, round_no) for stage, _, round_no in order if round_no > 0]
    assert burn and burn == sorted(burn, key=["pair", "remeasure"].index)  # both burn-ins before any counted round
    assert order.index(next(o for o in order if o[2] > 0)) == len(burn)
    blocks: list[tuple[str, int]] = []  # (stage, round) of each run of consecutive windows
    for stage, round_no in counted:
        if not blocks or blocks[-1] != (stage, round_no):
            blocks.append((stage, round_no))
    assert blocks == [("pair", 1), ("remeasure", 1), ("pair", 2), ("remeasure", 2), ("pair", 3), ("remeasure", 3),
                      ("pair", 4), ("remeasure", 4), ("pair", 5)]
    assert all(sum(1 for o in counted if o == block) == 2 for block in blocks)  # a round: both models once


def test_an_interrupt_in_the_caller_stops_the_stages_without_waiting_out_a_round() -> None:
    """Ctrl-C (or SIGTERM, which the CLI turns into KeyboardInterrupt) reaches the caller's thread while a
    stage is inside a long round: it is raised at once, and the waiting stage never gets another turn."""
    import os
    import signal

    relay = Relay(["a", "b"])
    inside, release = threading.Event(), threading.Event()
    seen: list[tuple[str, int]] = []

    def long_round() -> int:
        relay.turn("a")
        seen.append(("a", 1))
        relay.turn("a")  # b's first round, then a's second: a window that does not end by itself
        inside.set()
        release.wait(60)
        seen.append(("a", 2))
        relay.turn("a")
        seen.append(("a", 3))
        return 3

    def interrupt() -> None:
        inside.wait(60)
        os.kill(os.getpid(), signal.SIGINT)  # a real signal, as Ctrl-C sends it; its handler runs in this test's thread

    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background shell may have ignored it
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            in_turns(relay, {"a": long_round, "b": rounds(relay, "b", 5, seen, [])})
        assert seen == [("a", 1), ("b", 1)]  # b never got its second turn
    finally:
        release.set()
        signal.signal(signal.SIGINT, inherited)
    for thread in [t for t in threading.enumerate() if t.name.startswith("relay-")]:
        thread.join(10)
    assert seen == [("a", 1), ("b", 1), ("a", 2)], seen  # a stopped at its next turn
