"""The conformance suite every canary :class:`~gpt_triton.core.shifting.TrafficShifter` passes.

A test class subclasses :class:`TrafficShifterConformance` and implements :meth:`make` (a fresh shifter,
all traffic on stable) and :meth:`observed_share` (the candidate's share of traffic *as the outside world
sees it* right now: requests actually routed, replicas actually ready), and sets ``resolution`` and
``observed_tolerance``. Shared state between the two (a router, an API server) is the subclass's, set up
by an autouse fixture if it needs one.
"""

from __future__ import annotations

import math
from typing import ClassVar

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.shifting import TrafficShifter

STEPS = (0.1, 0.25, 0.5, 1.0)  # the canary's default steps, 10,25,50,100
BAD_WEIGHTS = (-0.01, 1.01, math.nan)


class TrafficShifterConformance:
    """Contract: a new shifter sends nothing to the candidate; each ``set_weight`` is in effect when it
    returns (the observed share matches ``effective_weight``, which is within ``resolution`` of the
    weight asked and strictly between 0 and 1 for a partial weight); 0 and 1 are exact; a bad weight
    raises GptTritonError and changes nothing; the same weight twice changes nothing."""

    resolution: ClassVar[float]  # how far effective_weight may round from a partial weight asked
    observed_tolerance: ClassVar[float]  # how far the observed share may sample around effective_weight

    def make(self) -> TrafficShifter:
        raise NotImplementedError

    def observed_share(self) -> float:
        raise NotImplementedError

    def _in_effect(self, shifter: TrafficShifter, asked: float) -> None:
        effective, observed = shifter.effective_weight, self.observed_share()
        if asked in (0.0, 1.0):
            assert effective == asked and observed == asked, f"weight {asked}: effective {effective}, observed {observed}"
            return
        assert 0.0 < effective < 1.0, f"a partial weight {asked} must keep both versions serving, got {effective}"
        assert abs(effective - asked) <= self.resolution, f"weight {asked} became {effective}"
        assert abs(observed - effective) <= self.observed_tolerance, (
            f"weight {asked}: effective {effective} but {observed} observed when set_weight returned")

    def test_a_new_shifter_sends_nothing_to_the_candidate(self) -> None:
        shifter = self.make()
        assert isinstance(shifter, TrafficShifter)
        assert shifter.effective_weight == 0.0 and self.observed_share() == 0.0

    def test_each_step_is_in_effect_when_set_weight_returns(self) -> None:
        shifter = self.make()
        for weight in STEPS:
            shifter.set_weight(weight)
            self._in_effect(shifter, weight)

    def test_rollback_to_zero_is_exact_from_any_step(self) -> None:
        shifter = self.make()
        for weight in (0.5, 1.0):
            shifter.set_weight(weight)
            shifter.set_weight(0.0)
            self._in_effect(shifter, 0.0)

    def test_a_bad_weight_raises_and_changes_nothing(self) -> None:
        shifter = self.make()
        shifter.set_weight(0.5)
        before = (shifter.effective_weight, self.observed_share())
        for bad in BAD_WEIGHTS:
            with pytest.raises(GptTritonError):
                shifter.set_weight(bad)
            assert shifter.effective_weight == before[0]
            assert abs(self.observed_share() - before[1]) <= 2 * self.observed_tolerance

    def test_the_same_weight_twice_changes_nothing(self) -> None:
        shifter = self.make()
        shifter.set_weight(0.25)
        first = shifter.effective_weight
        shifter.set_weight(0.25)
        assert shifter.effective_weight == first
        self._in_effect(shifter, 0.25)
