"""A finished tune's gain set against perf_analyzer run as users run it, later (``gpt-triton recheck``).

The tune's re-measured gain describes the minutes it ran in. On this project's 2-core VM, conv_attention's
p99 gain read 0.86 of what perf_analyzer printed over eight tunes checked within 0.3 h (3 of 8 within 5%),
0.68-0.88 of it in four checked 7-10 h later, and perf_analyzer's own figure for one pair moved 9-13%
within an hour (docs/measurement.md, "Request by request, and perf_analyzer's own figure"). A gain is a
claim about a time as well as a pair; a recheck says how it stands now, with the tool users trust, and
keeps each answer in the run directory.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel

from gpt_triton.core.cross_check import AGREEMENT_TOLERANCE, beyond_both, within_verdict
from gpt_triton.core.measurements import Interval


class RecheckRound(BaseModel):
    """One round: perf_analyzer once on each model; a side with no figures says why (its last line)."""

    first: str  # "baseline" or "winner": the order flips every round
    baseline_p50_ms: float | None = None
    baseline_p99_ms: float | None = None
    winner_p50_ms: float | None = None
    winner_p99_ms: float | None = None
    note: str = ""  # why a side gave no figures (perf_analyzer found no stable measurement)


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

    @property
    def complete_rounds(self) -> int:
        return sum(1 for r in self.rounds if not r.note)

    @property
    def within(self) -> bool | None:
        """The tune's point within :data:`AGREEMENT_TOLERANCE` of perf_analyzer's, or None with nothing to compare."""
        return None if self.agreement is None else abs(self.agreement.value - 1.0) <= AGREEMENT_TOLERANCE

    def lines(self) -> list[str]:
        """What the command prints: perf_analyzer's gains, then the tune's against the metric's."""
        out = []
        for stat, iv in self.gains.items():
            out.append(f"perf_analyzer's {stat} gain, paired by round: {iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}] "
                       f"({self.complete_rounds} rounds)")
        if self.tune_gain is None or self.agreement is None:
            out.append(f"the tune has no {self.metric} gain that perf_analyzer prints: nothing to set against it")
            return out
        t, a = self.tune_gain, self.agreement
        tol = f"{100 * AGREEMENT_TOLERANCE:.0f}%"
        if self.within:
            verdict = within_verdict(a)
        else:
            side = "perf_analyzer reads the larger gain" if a.value < 1 else "the tune claimed the larger gain"
            verdict = (f"{100 * abs(a.value - 1):.1f}% apart, beyond {tol} ({side}); "
                       + ("beyond what both intervals allow: the gain has moved since the tune, or the two measure "
                          "it differently" if beyond_both(self.z) else
                          "within what both intervals allow: more rounds would tell"))
        out.append(f"the tune's re-measured {self.metric} gain ({self.tune_statistic}, {self.hours_after_tune:.1f} h ago) "
                   f"{t.value:.3f} [{t.low:.3f}, {t.high:.3f}] is {a.value:.3f} [{a.low:.3f}, {a.high:.3f}] of "
                   f"perf_analyzer's: {verdict}")
        return out


def hours_between(earlier: str, later: str) -> float:
    """Hours from one ISO 8601 time to another; a time without a zone is read as UTC (the tune writes one)."""
    def parse(text: str) -> datetime:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
    return (parse(later) - parse(earlier)).total_seconds() / 3600.0
