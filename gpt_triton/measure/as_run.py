"""perf_analyzer run the way its users run it, on two served models in rounds (``gpt-triton recheck``).

The tuner's other perf_analyzer paths (``measure.client: perf_analyzer``, ``measure.cross_check``) put it
behind the tuner's seam: one short process per window, its per-request latencies formed into the tuner's
statistic. A user reads something else: ``perf_analyzer -m MODEL --concurrency-range 1`` at its defaults
prints one p99 over the requests of its last three stable windows merged (InferenceProfiler's
MergePerfStatusReports in NVIDIA's sources; windows of 1.2 x ``-p``, 5000 ms by default, repeated until
three agree within 10%), about 18 s of traffic. This module runs exactly that, once per model per round,
the order flipping every round, and reads the p50 and p99 from its ``-f`` CSV. A run that finds no stable
measurement is run again in its place, as a user would (``retries``); the round notes it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpt_triton.core.measurements import Interval
from gpt_triton.measure.machine_load import cores_during, load_over
from gpt_triton.measure.paired import log_ratio_interval, round_log_ratios
from gpt_triton.measure.perf_analyzer import PerfAnalyzer, read_csv_ms

ROLES = ("baseline", "winner")
# perf_analyzer gives up after 10 windows that do not settle (its --max-trials); each spans 1.2 x -p.
_MAX_TRIALS = 10
# Its exit code then (STABILITY_ERROR in perf_analyzer's constants.h; OPTION_ERROR is 3, GENERIC_ERROR 99).
STABILITY_ERROR = 2


@dataclass(frozen=True)
class Printed:
    """What one perf_analyzer run printed for a model, in ms."""

    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Failed:
    """A perf_analyzer run that printed no figures: its exit code and last line."""

    returncode: int
    line: str

    @property
    def unsettled(self) -> bool:
        """It found no stable measurement (the machine, not the model or the server): worth running again."""
        return self.returncode == STABILITY_ERROR

    def __str__(self) -> str:
        return f"exit {self.returncode}: {self.line}"


@dataclass(frozen=True)
class RoundResult:
    """One round: each role's figures, or why that run gave none (perf_analyzer's last line)."""

    first: str  # the role measured first this round
    figures: Mapping[str, Printed | str]
    # Roles whose run was repeated because it found no stable measurement, and what the failed runs said.
    retried: Mapping[str, str] = field(default_factory=dict)
    # Each role's counted run: (other processes' cores, steal cores, seconds) while it ran
    # (gpt_triton/measure/machine_load.py); absent where the machine's counters cannot be read.
    load: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)

    def round_load(self) -> tuple[float, float, float] | None:
        """The round's two runs together: their cores weighted by their seconds (:func:`load_over`), and those
        seconds."""
        summary = load_over(list(self.load.values()))
        if summary is None:
            return None
        return summary.mean_cores, summary.steal_cores, sum(s for _, _, s in self.load.values())

    @property
    def complete(self) -> bool:
        return all(isinstance(self.figures.get(role), Printed) for role in ROLES)


@dataclass(frozen=True)
class Model:
    """A served model to run perf_analyzer on: its name, and a version (empty: Triton's policy picks)."""

    name: str
    version: str = ""


def run_once(tool: PerfAnalyzer, grpc_url: str, model: Model, data: Path, batch: int, interval_ms: int,
             folder: Path) -> Printed | Failed:
    """One perf_analyzer run at its own measurement defaults but ``-p``: what it printed, or, when it found
    no stable measurement (it says so and exits non-zero), its last line."""
    report = folder / "report.csv"
    report.unlink(missing_ok=True)
    args = ["-m", model.name, "-u", grpc_url, "-i", "grpc", "-b", str(batch), "--concurrency-range", "1:1",
            "-p", str(interval_ms), "--input-data", str(data), "-f", str(report)]
    if model.version:
        args += ["-x", model.version]
    done = tool.run(args, timeout_s=interval_ms / 1000 * 1.2 * (_MAX_TRIALS + 2) + 120)
    p50, p99 = read_csv_ms(report, "p50"), read_csv_ms(report, "p99")
    if done.returncode != 0 or p50 is None or p99 is None:
        last = (done.stderr or done.stdout).strip().splitlines()
        return Failed(returncode=done.returncode, line=last[-1] if last else "no output")
    return Printed(p50_ms=p50, p99_ms=p99)


def run_rounds(tool: PerfAnalyzer, grpc_url: str, models: Mapping[str, Model], data: Path, batch: int, rounds: int,
               interval_ms: int, folder: Path, on_round: Callable[[int, RoundResult], None] | None = None,
               retries: int = 1) -> list[RoundResult]:
    """A short run on each model first (their first requests are not what is compared), then ``rounds``
    rounds of one run per model, the baseline first in even rounds and the winner first in odd ones.

    A run that finds no stable measurement is repeated in its place up to ``retries`` times before the
    round is left incomplete. Left out, such rounds fall where the machine was unsettled, which is also
    where a model's tail is widest; a user who meets the message runs perf_analyzer again. Any other
    failure is not repeated: running again would not change it."""
    for role in ROLES:
        run_once(tool, grpc_url, models[role], data, batch, min(1000, interval_ms), folder)
    results = []
    for r in range(rounds):
        order = ROLES if r % 2 == 0 else ROLES[::-1]
        figures: dict[str, Printed | str] = {}
        retried: dict[str, str] = {}
        load: dict[str, tuple[float, float, float]] = {}
        for role in order:
            run = functools.partial(run_once, tool, grpc_url, models[role], data, batch, interval_ms, folder)
            got, failed, cores = _run_settled(run, retries)
            figures[role] = got if isinstance(got, Printed) else str(got)
            if failed:
                retried[role] = "; ".join(failed)
            if cores is not None:
                load[role] = cores
        result = RoundResult(first=order[0], figures=figures, retried=retried, load=load)
        results.append(result)
        if on_round is not None:
            on_round(r, result)
    return results


def _run_settled(run: Callable[[], Printed | Failed], retries: int,
                 ) -> tuple[Printed | Failed, list[str], tuple[float, float, float] | None]:
    """``run()`` until it is not unsettled or ``retries`` repeats are spent: the last run's outcome, what the
    unsettled ones said, and the machine's load during the last run (other cores, steal cores, seconds)."""
    failed: list[str] = []
    while True:
        start = time.monotonic()
        got, cores = cores_during(run)
        if not (isinstance(got, Failed) and got.unsettled and len(failed) < retries):
            return got, failed, None if cores is None else (cores[0], cores[1], time.monotonic() - start)
        failed.append(str(got))


def paired_gains(results: Sequence[RoundResult]) -> dict[str, Interval]:
    """perf_analyzer's baseline/winner p50 and p99 gains paired by round (geometric mean, t interval) over the
    complete rounds; empty with fewer than two."""
    complete = [r for r in results if r.complete]
    if len(complete) < 2:
        return {}
    gains = {}
    for stat in ("p50", "p99"):
        sides = {role: [getattr(r.figures[role], f"{stat}_ms") for r in complete] for role in ROLES}
        gains[stat] = log_ratio_interval(round_log_ratios(sides["baseline"], sides["winner"]))
    return gains
