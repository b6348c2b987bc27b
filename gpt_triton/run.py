"""One tuning run's state: its options, its report (saved after every stage), its log and its clock."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gpt_triton import __version__
from gpt_triton.accuracy.reference import ReferenceSet
from gpt_triton.budget import TimeBudget
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.naming import named
from gpt_triton.core.outcomes import StageOutcome, apply_outcomes
from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.core.spec import TuneSpec
from gpt_triton.environment import machine
from gpt_triton.measure.runs import RemeasuredInTurns
from gpt_triton.measure.window_log import WINDOWS_FILE, WindowLog
from gpt_triton.routes.baseline import BaselineRoute

Log = Callable[[str], None]
Advance = Callable[[str], None]  # one step done; the text says what


class Progress:
    """How the pipeline tells a person (or a log pipeline) what it is doing: log lines and step counters.

    ``log(text)`` is one decision or event; ``bar(description, total)`` opens a step counter for a stage
    (``total`` None when the number of steps is not known in advance, e.g. measurement windows) and yields
    ``advance(text)``, called once per step done. The description's first word names the stage
    (:func:`stage_of`). This plain version only logs; the CLI passes one per output: rich bars on a terminal,
    rate-bounded full-width lines in a Job's log, JSON lines for log pipelines (``gpt_triton.pipeline_cli``).
    """

    def __init__(self, log: Log = print) -> None:
        self.log = log

    @contextlib.contextmanager
    def bar(self, description: str, total: int | None) -> Iterator[Advance]:
        yield lambda text: None


_STAGES = {"building": "build", "deploying": "deploy", "measuring": "measure", "re-measuring": "remeasure",
           "screening": "screen", "repeat": "repeat-check"}


def stage_of(description: str) -> str:
    """The stage a progress bar's description names: ``"building 3 candidates"`` -> ``"build"``."""
    first = description.split(" ", 1)[0].rstrip(":")
    return _STAGES.get(first, first)


@dataclass
class TuneOptions:
    model: Path
    spec: TuneSpec
    shapes: dict[str, list[int]] = field(default_factory=dict)
    reference: Path | None = None
    repository: Path | None = None  # default: spec.promotion.repository
    out: Path | None = None  # default: runs/<model>-<run id>
    triton_url: str | None = None
    resume: bool = False
    repeat_check: bool = False
    promote: bool = True
    pushgateway: str | None = None
    signing_key_file: str | None = None
    # tune --model-repository: what production serves, planned as the baseline (gpt_triton.served_model)
    baseline: BaselineRoute | None = None


# What the decision log says when a stage disqualifies a candidate.
_DECISIONS = {
    ("deploy", "failed"): "{id}: failed to load in Triton ({reason})",
    ("screen", "failed"): "{id}: inference failed on the tuning split ({reason})",
    ("screen", "infeasible"): "{id}: infeasible on the tuning split: {reason}",
}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, text: str) -> None:
    """Write by temp file + rename; a refused write (read-only, full disk, a file in the way) is one line."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise GptTritonError(f"cannot write {path}: {exc.strerror or exc}; check --out and its permissions") from exc


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run directory (and its staging repository) or say in one line why it cannot be."""
    for directory in (run_dir, run_dir / "staging"):
        if directory.exists() and not directory.is_dir():
            raise GptTritonError(f"--out {run_dir}: {directory} is a file, not a directory; pass another --out")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GptTritonError(f"cannot create run directory {directory}: {exc.strerror or exc}; "
                                 "pass a writable --out") from exc
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise GptTritonError(f"run directory {run_dir} is not writable; pass a writable --out")


def check_repository_writable(repository: Path) -> None:
    """Fail before any work when promotion could not write: one line, naming the path."""
    probe_dir = repository
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir() or not os.access(probe_dir, os.W_OK | os.X_OK):
        raise GptTritonError(f"model repository {repository} is not writable (checked {probe_dir}); pass --repository DIR")


class Run:
    """One tuning run: owns the report and saves it after every stage."""

    def __init__(self, options: TuneOptions, info: ModelInfo, shapes: dict[str, list[int]], progress: Progress) -> None:
        self.options = options
        self.spec = options.spec
        self.info = info
        self.shapes = shapes
        self.progress = progress
        self.log = progress.log
        self.budget = TimeBudget(self.spec)  # the run's clock, planned from its observed costs
        self.tuning: ReferenceSet = ReferenceSet(inputs=[], source="(not split yet)")  # set once split
        run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        self.run_dir = options.out or Path("runs") / f"{info.name}-{run_id}"
        prepare_run_dir(self.run_dir)
        self.staging = self.run_dir / "staging"  # the candidates' Triton model repository
        self.windows = WindowLog(self.run_dir / WINDOWS_FILE, run_id)  # every window of every stage, as run
        # The re-measure when it ran in turns with the finalist pair (gpt_triton/steps.py, pair_and_remeasure_in_turns), until judged.
        self.remeasured_in_turns: RemeasuredInTurns | None = None
        self.report = RunReport(
            run_id=run_id, run_dir=str(self.run_dir), tool_version=__version__, created=_now(), model=info, shapes=shapes,
            spec=self.spec, machine=machine(),
            triton_mode="remote" if options.triton_url else "embedded",
        )

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.info.outputs]

    @property
    def started(self) -> float:
        """When the run started (monotonic): its time budget's start."""
        return self.budget.started

    def apply(self, candidates: Iterable[Candidate], outcomes: Iterable[StageOutcome],
              after: Callable[[Candidate, StageOutcome], None] | None = None) -> None:
        """Apply a stage's outcomes (the one way a candidate's status changes) and log the failures."""
        def each(candidate: Candidate, outcome: StageOutcome) -> None:
            line = _DECISIONS.get((outcome.stage, outcome.status))
            if line is not None:
                self.decide(line.format(id=named(candidate), reason=outcome.reason))
            if after is not None:
                after(candidate, outcome)

        apply_outcomes(candidates, outcomes, after=each)

    def decide(self, text: str) -> None:
        self.report.decisions.append(text)
        self.log(text)

    def save(self) -> None:
        self.report.tuning_seconds = round(time.monotonic() - self.started, 3)
        write_json_atomic(self.run_dir / "report.json", self.report.model_dump_json(indent=1))
