"""Stages that take turns on one machine, a round each: the finalist pair's estimate and the re-measure.

The gain the tuner claims is re-measured on a fresh server apart from the windows that chose the winner;
the selection's estimate is measured on another fresh server in the same design. Run one after the other,
the two saw different machines: on this 2-core VM the p99 gain of an onnxruntime route whose threads sleep
over a baseline whose threads spin moved by up to 17% between two runs minutes apart, with nothing else
running (docs/measurement.md, "Six more on one re-measure server"), so the estimate missed the re-measure
by what the machine did in between, not by how either was measured. In turns, each stage's round k runs
right after the other's: both see the same spells of the machine, and each keeps its own server, seeds
and windows (neither run selects anything from the other's).

Two stages that compare clients on one server (the re-measure and the cross-check) swap places every other
cycle (``alternate``): in a fixed order the cross-check's rounds always came right after the re-measure's on
the same server while the re-measure's came after the pair server's, so the two clients' windows followed
different traffic (a spinning baseline's window can read slower right after other models' windows:
benchmarks/switch_tail.py). Swapped every other cycle, each follows each kind about as often, and
benchmarks/cross_check_runs.py splits each client's windows by the round before. (The first such tune
showed the clients' p99 gains as far apart as before: the order was not why they differ.)

Only one stage measures at any moment: a stage's round is never crowded by the other's. Each stage runs
in its own thread (the servers stay with the caller's thread, so that a server's parent-death signal
follows the run, not a worker); :class:`Relay` hands the turn on at each round's start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

_INTERRUPT_WAIT_S = 2.0  # what an interrupted caller gives the stage that is measuring before it goes on


class RelayAborted(Exception):
    """Another stage of the relay failed: this one stops at its next turn (the other's error is the run's)."""


class Relay:
    """Turns among named stages: a stage's :meth:`turn` at the start of each of its rounds passes the
    turn to the next stage still running and waits until it comes back; the first call only takes it.
    A stage that ends (:meth:`leave`) drops out of the turns; one that fails (:meth:`fail`) ends them
    all: the others' next :meth:`turn` raises :class:`RelayAborted`. With ``alternate`` = (x, y), two of
    the stages, the two trade places in every second cycle of turns (a cycle: each running stage once)."""

    def __init__(self, stages: Sequence[str], alternate: tuple[str, str] | None = None) -> None:
        if len(set(stages)) != len(stages) or not stages:
            raise ValueError(f"a relay needs distinct stage names, got {list(stages)}")
        self._orders = [list(stages)]
        if alternate is not None:
            if len(set(alternate)) != 2 or not set(alternate) <= set(stages):
                raise ValueError(f"alternate names two distinct stages of {list(stages)}, got {list(alternate)}")
            x, y = (stages.index(name) for name in alternate)
            swapped = list(stages)
            swapped[x], swapped[y] = swapped[y], swapped[x]
            self._orders.append(swapped)
        self._cycle = 0
        self._running = set(stages)
        self._started: set[str] = set()
        self._holder = self._orders[0][0]
        self._failed: str | None = None
        self._cond = threading.Condition()
        self.turns: list[str] = []  # who took each turn, in order (what the stages' windows interleave by)

    def enter(self, stage: str) -> None:
        """Wait for ``stage``'s first turn."""
        with self._cond:
            self._wait_for(stage)

    def turn(self, stage: str) -> None:
        """``stage`` is about to start a round: after its first, pass the turn on and wait for it."""
        with self._cond:
            self._check(stage)
            if stage in self._started:
                self._pass_on(stage)
                self._wait_for(stage)
            else:
                self._wait_for(stage)
                self._started.add(stage)
            self.turns.append(stage)

    def leave(self, stage: str) -> None:
        """``stage`` has ended: the others go on in turns without it."""
        with self._cond:
            if stage in self._running:
                if self._holder == stage:
                    self._pass_on(stage)
                self._running.discard(stage)
                self._cond.notify_all()

    def fail(self, stage: str) -> None:
        """``stage`` failed: every other stage stops at its next turn."""
        with self._cond:
            self._failed = self._failed or stage
            self._running.discard(stage)
            self._cond.notify_all()

    def _check(self, stage: str) -> None:
        if stage not in self._running:
            raise ValueError(f"stage {stage!r} is not in the relay's turns (running: {sorted(self._running)})")

    def _pass_on(self, stage: str) -> None:
        """The next running stage after ``stage`` in this cycle's order holds the turn; past the cycle's
        last, the first running one in the next cycle's order (``stage`` again when it is the only one left)."""
        order = self._orders[self._cycle % len(self._orders)]
        later = [name for name in order[order.index(stage) + 1:] if name in self._running]
        if not later:
            self._cycle += 1
            later = [name for name in self._orders[self._cycle % len(self._orders)] if name in self._running]
        if later:
            self._holder = later[0]
        self._cond.notify_all()

    def _wait_for(self, stage: str) -> None:
        while True:
            if self._failed is not None and self._failed != stage:
                raise RelayAborted(f"stage {self._failed!r} failed")
            if self._holder == stage:
                return
            if self._holder not in self._running:  # the holder left while it held no turn: take it on
                self._pass_on(self._holder)
                continue
            self._cond.wait()


def in_turns(relay: Relay, stages: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Run each of ``stages`` (name -> work that calls ``relay.turn(name)`` at each round's start) in its own
    thread, in turns; return their results by name. The first failure (not a :class:`RelayAborted`) is
    raised once every stage has stopped; a KeyboardInterrupt or SystemExit in the caller's thread stops
    the stages at their next turn before it goes on."""
    values: dict[str, T] = {}
    failures: list[BaseException] = []
    ended = threading.Condition()
    left = len(stages)

    def body(name: str, work: Callable[[], T]) -> None:
        nonlocal left
        try:
            relay.enter(name)
            values[name] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            relay.fail(name)
            if not isinstance(exc, RelayAborted):
                with ended:
                    failures.append(exc)
        else:
            relay.leave(name)
        finally:
            with ended:
                left -= 1
                ended.notify_all()

    # The caller waits on a condition, not Thread.join: a KeyboardInterrupt raised inside an interrupted join
    # marks a thread that still runs as stopped (CPython gh-90882), and the stage would then be forgotten.
    try:
        for name, work in stages.items():
            threading.Thread(target=body, args=(name, work), name=f"relay-{name}", daemon=True).start()
        with ended:
            while left:
                ended.wait(0.5)  # bounded: a signal handler's exception reaches this thread between waits too
    except BaseException:
        # Ctrl-C or SIGTERM (cli.py raises KeyboardInterrupt): the stages waiting for a turn stop now; the one
        # measuring stops at its next turn, or when the caller stops its server under it. A pod's grace
        # period does not wait for a 13 s window's round, so the caller waits a little, then goes on.
        relay.fail("caller")
        with ended:
            ended.wait_for(lambda: left == 0, _INTERRUPT_WAIT_S)
        raise
    if failures:
        raise failures[0]
    return values
