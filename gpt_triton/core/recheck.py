"""A finished tune's gain set against perf_analyzer run as users run it, later (``gpt-triton recheck``).

The tune's re-measured gain describes the minutes it ran in. On this project's 2-core VM, conv_attention's
p99 gain read 0.86 of what perf_analyzer printed over eight tunes checked within 0.3 h (3 of 8 within 5%),
0.68-0.88 of it in four checked 7-10 h later, and perf_analyzer's own figure for one pair moved 9-13%
within an hour (docs/measurement.md, "Request by request, and perf_analyzer's own figure"). A gain is a
claim about a time as well as a pair; a recheck says how it stands now, with the tool users trust, and
keeps each answer in the run directory. One recheck is a few minutes of perf_analyzer and no 5% reference
on its own (seven tunes checked at once: 1 of 7 within 5%); the rechecks of a pair made alike are pooled
(:class:`RecheckSeries`), so that each one made later narrows the reference the tune's gain is set against
(the same seven pooled over 3-6 checks each: 3 of 7 within 5%, 0.930 [0.877, 0.985] over the seven;
benchmarks/results/recheck_series_2026-12-07.txt). A check's gain also follows the machine's pace, which
this VM's counters do not show (about -4% when the baseline's p50 runs 10% slower): each record keeps both
sides' p50s, and the load the counters did see (``Recheck.machine``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel

from gpt_triton.core.cross_check import (
    AGREEMENT_TOLERANCE,
    agreement_interval,
    beyond_both,
    within_tolerance,
    within_verdict,
)
from gpt_triton.core.measurements import Interval, ServerSpread, between_servers


class RecheckRound(BaseModel):
    """One round: perf_analyzer once on each model; a side with no figures says why (its last line)."""

    first: str  # "baseline" or "winner": the order flips every round
    baseline_p50_ms: float | None = None
    baseline_p99_ms: float | None = None
    winner_p50_ms: float | None = None
    winner_p99_ms: float | None = None
    note: str = ""  # why a side gave no figures (perf_analyzer found no stable measurement)
    # A side whose run found no stable measurement and was run again in its place: what the failed run said.
    retried: str = ""
    # Other processes' cores and the hypervisor's steal while the round's two counted runs ran (weighted by
    # their seconds), and those seconds; None in records written before they were kept.
    other_cores: float | None = None
    steal_cores: float | None = None
    seconds: float | None = None


class Recheck(BaseModel):
    """perf_analyzer's gains for a run's pair, paired by round, beside the tune's re-measured gain."""

    created: str  # when the recheck ran (UTC, ISO 8601)
    run_id: str
    tune_created: str
    hours_after_tune: float
    baseline_id: str
    winner_id: str
    baseline_model: str  # the served names perf_analyzer ran on (name or name:version)
    winner_model: str
    triton_mode: Literal["embedded", "remote"]
    server: str = ""  # --triton-url's gRPC endpoint ("" on an embedded server, and in records written before it)
    perf_analyzer: str  # its --version line
    interval_ms: int  # perf_analyzer's -p
    requests: int  # distinct inputs in its --input-data (the tune's tuning split)
    rounds: list[RecheckRound]
    # perf_analyzer's baseline/winner gains over the complete rounds (geometric mean, t interval): "p50", "p99".
    gains: dict[str, Interval]
    metric: str  # the tune's objective metric
    tune_gain: Interval | None = None  # the tune's re-measured gain (report.json), None if it had none
    tune_statistic: str = ""  # how the tune formed it (measure.gain_statistic)
    agreement: Interval | None = None  # tune / perf_analyzer, the two read as independent
    z: float = 0.0
    # This recheck and the earlier ones alike (:func:`pool_rechecks`), pooled; None when it is the first alike.
    series: RecheckSeries | None = None
    # What else the machine ran during the rounds ("other processes used ... cores ..."), "" where not read.
    machine: str = ""

    @property
    def complete_rounds(self) -> int:
        return sum(1 for r in self.rounds if not r.note)

    @property
    def rounds_done(self) -> str:
        """``complete/all`` rounds, and in how many a run was repeated after one that found no stable measurement."""
        again = sum(1 for r in self.rounds if r.retried)
        return f"{self.complete_rounds}/{len(self.rounds)}" + (f" ({again} with a run repeated)" if again else "")

    @property
    def within(self) -> bool | None:
        """The tune's point within :data:`AGREEMENT_TOLERANCE` of perf_analyzer's, or None with nothing to compare."""
        return None if self.agreement is None else within_tolerance(self.agreement)

    def lines(self) -> list[str]:
        """What the command prints: perf_analyzer's gains, then the tune's against the metric's."""
        out = []
        for stat, iv in self.gains.items():
            out.append(f"perf_analyzer's {stat} gain, paired by round: {iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}] "
                       f"({self.complete_rounds} rounds)")
        if self.machine:
            out.append(f"while perf_analyzer ran, {self.machine}")
        if self.tune_gain is None or self.agreement is None:
            out.append(f"the tune has no {self.metric} gain that perf_analyzer prints: nothing to set against it")
            return out + ([self.series.line()] if self.series is not None else [])
        t, a = self.tune_gain, self.agreement
        out.append(f"the tune's re-measured {self.metric} gain ({self.tune_statistic}, {self.hours_after_tune:.1f} h ago) "
                   f"{t.value:.3f} [{t.low:.3f}, {t.high:.3f}] is {a.value:.3f} [{a.low:.3f}, {a.high:.3f}] of "
                   f"perf_analyzer's: {_verdict(a, self.z, 'more rounds would tell')}")
        if self.series is not None:
            out.append(self.series.line(t, self.tune_statistic))
        return out

    def alike(self, other: Recheck) -> bool:
        """The same pair, served the same way and measured by perf_analyzer alike: the same run's baseline and
        pick under the same served names, on the same kind of server (and the same URL), with the same ``-p``."""
        fields = ("run_id", "baseline_id", "winner_id", "baseline_model", "winner_model", "triton_mode", "server",
                  "interval_ms", "metric")
        return all(getattr(self, name) == getattr(other, name) for name in fields)


class RecheckSeries(BaseModel):
    """perf_analyzer's gain for one pair over several rechecks alike, pooled as a random-effects mean.

    One recheck's p99 gain rests on a few perf_analyzer runs from a few minutes. On this project's 2-core VM
    two rechecks of one pair an hour apart read 1.883 [1.573, 2.253] and 1.374 [1.242, 1.520] (demo 8), so a
    single recheck is no 5% reference for the tune's gain. Each recheck is a fresh server in other minutes,
    so they are pooled as servers are (:func:`gpt_triton.core.measurements.between_servers`): a spread beyond
    their own intervals widens the pooled one. A recheck's interval is a t interval on a few rounds, read
    there as normal, so each is weighted as if a little less precise than it is: the pooled interval errs
    wide."""

    rechecks: int
    rounds: int  # complete rounds over all of them
    first_hours: float  # the first and the last recheck's hours after the tune
    last_hours: float
    gain: Interval  # perf_analyzer's gain for the metric, pooled
    spread: ServerSpread  # each recheck's interval, Cochran's Q, the between-recheck sd
    agreement: Interval | None = None  # tune / the pooled gain
    z: float = 0.0

    @property
    def within(self) -> bool | None:
        return None if self.agreement is None else within_tolerance(self.agreement)

    def line(self, tune_gain: Interval | None = None, statistic: str = "") -> str:
        g, s = self.gain, self.spread
        test = f"Q {s.q:.2f} on {self.rechecks - 1} df, p {s.p_value:.2g}"
        spread = (f"a between-recheck sd of {100 * s.between_sd:.1f}% in the log added to the interval ({test})"
                  if s.between_sd > 0 else f"no spread beyond their own intervals ({test})")
        out = (f"pooled over the {self.rechecks} rechecks alike ({self.rounds} rounds, {self.first_hours:.1f}-"
               f"{self.last_hours:.1f} h after the tune; {spread}): perf_analyzer's gain {g.value:.3f} "
               f"[{g.low:.3f}, {g.high:.3f}]")
        if tune_gain is None or self.agreement is None:
            return out
        a = self.agreement
        return (out + f"; the tune's ({statistic}) is {a.value:.3f} [{a.low:.3f}, {a.high:.3f}] of it: "
                + _verdict(a, self.z, "more rechecks would tell"))


def pool_rechecks(records: Sequence[Recheck], like: Recheck) -> RecheckSeries | None:
    """The rechecks among ``records`` alike to ``like`` (``like`` among them or not) that have a gain for its
    metric, pooled, with the tune's gain set against the pooled one; None with fewer than two."""
    alike = [r for r in records if r.alike(like) and like.metric in r.gains]
    if like not in alike and like.metric in like.gains:
        alike.append(like)
    if len(alike) < 2:
        return None
    gain, spread = between_servers([r.gains[like.metric] for r in alike])
    agreement, z = agreement_interval(like.tune_gain, gain) if like.tune_gain is not None else (None, 0.0)
    hours = [r.hours_after_tune for r in alike]
    return RecheckSeries(rechecks=len(alike), rounds=sum(r.complete_rounds for r in alike), first_hours=min(hours),
                         last_hours=max(hours), gain=gain, spread=spread, agreement=agreement, z=z)


def _verdict(a: Interval, z: float, more: str) -> str:
    """How the tune's gain stands as a fraction ``a`` of perf_analyzer's, ``z`` its log gap in standard errors."""
    if within_tolerance(a):
        return within_verdict(a)
    side = "perf_analyzer reads the larger gain" if a.value < 1 else "the tune claimed the larger gain"
    return (f"{100 * abs(a.value - 1):.1f}% apart, beyond {100 * AGREEMENT_TOLERANCE:.0f}% ({side}); "
            + ("beyond what both intervals allow: the gain has moved since the tune, or the two measure it differently"
               if beyond_both(z) else f"within what both intervals allow: {more}"))


Recheck.model_rebuild()  # its series field names the class defined after it


def hours_between(earlier: str, later: str) -> float:
    """Hours from one ISO 8601 time to another; a time without a zone is read as UTC (the tune writes one)."""
    def parse(text: str) -> datetime:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
    return (parse(later) - parse(earlier)).total_seconds() / 3600.0
