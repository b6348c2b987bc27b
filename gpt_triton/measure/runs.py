"""What the measurement harness returns and works on: one load's interleaved run, a measure run's
outcomes and evidence, a re-measured candidate, and which candidates serve identically."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from gpt_triton.core.measurements import LatencyStats, LoadProfile, ObjectiveContrasts
from gpt_triton.core.outcomes import MeasureOutcome
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import MeasureSpec
from gpt_triton.measure.loadgen import WindowSample
from gpt_triton.measure.racing import RaceWindow
from gpt_triton.measure.windows import pooled_latencies, summarise


@dataclass
class RemeasureResult:
    stats: LatencyStats
    samples: list[WindowSample]  # the windows, in the order run (one server's, or every server's pooled)

    @cached_property
    def latencies_ms(self) -> np.ndarray:
        """Pooled over the windows."""
        return pooled_latencies(self.samples)

    @property
    def window_latencies_ms(self) -> list[np.ndarray]:
        """Per window, for the two-stage gain interval."""
        return [s.latencies_ms for s in self.samples]


@dataclass
class CrossChecked:
    """What the other load client (``measure.cross_check``) found on the re-measure's first server, in turns
    with the re-measure: each contender's result (None when its stage failed: ``notes`` say why, and the
    gain stands without it), its decision lines, and the client's version line."""

    results: dict[str, RemeasureResult] | None
    notes: list[str]
    version: str


@dataclass
class RemeasuredInTurns:
    """A re-measure's results for the re-measure step to judge, whether it ran in turns with the finalist pair's
    estimate (gpt_triton/measure/relay.py) or on its own after it: whom its servers held (ids, in its order)
    and, per server, each candidate's result and that server's decision lines; with ``measure.cross_check``,
    the other client's."""

    contenders: list[str]
    per_server: list[dict[str, RemeasureResult]]
    notes: list[list[str]]
    cross_checked: CrossChecked | None = None


def remeasure_result(load: LoadProfile, samples: Sequence[WindowSample], spec: MeasureSpec, seed: int) -> RemeasureResult:
    """A candidate's re-measure from its windows (one server's, or every server's pooled)."""
    stats = summarise(load, samples, spec.stability, spec.confidence, spec.bootstrap_resamples, seed)
    return RemeasureResult(stats=stats, samples=list(samples))


@dataclass
class MeasureRun:
    """What one :meth:`Measurer.measure` found: an outcome per candidate, and the run's evidence."""

    outcomes: list[MeasureOutcome]
    log: list[str]  # the decision log, in order
    # The objective load's drift model, for selection's tie test (None: the objective spans loads, or too few windows).
    contrasts: ObjectiveContrasts | None
    # Every window's log objective in the order run, by load label: what the drift model was fitted on.
    race_windows: dict[str, list[RaceWindow]]
    machine_sharing: dict[str, Any]  # cores pinned, who else runs: pinned()'s note
    windows: int  # windows this run took, warm-ups included


@dataclass
class LoadRun:
    """One load level's interleaved run over representatives (the harness's working state)."""

    samples: dict[str, list[WindowSample]] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    windows: list[RaceWindow] = field(default_factory=list)  # log objective per window, in the order run


def dedupe_key(candidate: Candidate) -> str:
    """Candidates with the same engine bytes, runtime options and serving route serve identically."""
    art = candidate.artifact
    if art is None or not art.sha256:
        return f"id:{candidate.id}"
    options = json.dumps(art.runtime_options, sort_keys=True, default=str)
    return f"{art.sha256}|{options}|{candidate.serving.key()}"
