"""The precision step: in-process accuracy probes, and the search that proposes the mixes they find.

:class:`InProcessProbe` builds one route of a family (``fp32_groups`` = the kept groups) in this process,
runs it through :mod:`gpt_triton.runtimes` on the tuning split and compares with the run's own tolerances
and task metric (:func:`gpt_triton.accuracy.compare.compare_requests`): accuracy only, no server, no timing.

:class:`PrecisionSearch` wraps the run's :class:`~gpt_triton.search.CandidateSearch` (same ask/tell): when
the route search plans its first batch, it runs the sensitivity search once per lowering and adds the
passing mixes to that batch - candidates like any other, built in isolation, screened through Triton,
measured and raced side by side with the full-precision routes. Their route says what they keep (the family knob ``fp32_groups``); the probes, groups,
margins and time spent are lines of the run's decisions.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpt_triton.accuracy.compare import compare_requests
from gpt_triton.accuracy.reference import ReferenceSet
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import BuildContext, Route
from gpt_triton.core.spec import AccuracySpec, TuneSpec
from gpt_triton.precision._sensitivity import ProbeBudget, ProbeResult, SensitivityResult, sensitivity_search
from gpt_triton.routes._base import RouteFamily
from gpt_triton.routes._precision_groups import LayerGroup, load_groups
from gpt_triton.runtimes import open_runner
from gpt_triton.search import CandidateSearch, Score

# spec lowering -> (family, the knobs that lower the whole graph)
LOWERINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "onnxruntime:int8_static": ("onnxruntime", {"precision": "int8_static"}),
    "onnxruntime:fp16": ("onnxruntime", {"precision": "fp16"}),
    "openvino:int8": ("openvino", {"quantization": "int8"}),
    # Probes run the plan through the TensorRT runtime: only on a GPU node (never run here, see docs/gpu.md).
    "tensorrt:fp16": ("tensorrt", {"precision": "fp16"}),
}


def tightened(spec: AccuracySpec, safety: float) -> AccuracySpec:
    """The tolerance a mix must meet on the tuning split: the allowed exceedance rate scaled by ``1 - safety``,
    so a mix that only just passes in-process is not proposed to fail the served screening."""
    return spec.model_copy(update={"max_exceedance_rate": spec.max_exceedance_rate * (1.0 - safety)})


class InProcessProbe:
    """Build ``family`` with ``knobs`` + ``fp32_groups=kept`` and judge it on the tuning split, in-process."""

    def __init__(self, family: RouteFamily, knobs: dict[str, Any], context: BuildContext, tuning: ReferenceSet,
                 accuracy: AccuracySpec, work_dir: Path) -> None:
        if tuning.outputs is None:
            raise ValueError("the tuning split has no reference outputs to probe against")
        self.family = family
        self.knobs = knobs
        self.context = context
        self.tuning = tuning
        self.accuracy = accuracy
        self.work_dir = work_dir
        self.count = 0

    def __call__(self, kept: tuple[str, ...]) -> ProbeResult:
        started = time.monotonic()
        out = self.work_dir / f"probe{self.count}"
        self.count += 1
        reference = self.tuning.outputs or []
        try:
            route = Route(family=self.family.name, knobs={**self.knobs, "fp32_groups": list(kept)})
            artifact = self.family.build(route, self.context, out)
            names = list(reference[0]) if reference else None
            with open_runner(artifact.runtime, Path(artifact.directory) / artifact.files[0], artifact.runtime_options,
                             output_names=names) as runner:
                produced = [{k: np.array(v) for k, v in runner.infer(request).items()} for request in self.tuning.inputs]
            verdict = compare_requests(reference, produced, self.accuracy, "tuning", self.tuning.inputs)
        except Exception as exc:  # a build or run that fails is a failing probe, never a crashed run
            n = len(self.tuning.inputs)
            return ProbeResult(kept, n, n, -1.0, False, time.monotonic() - started,
                               reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
        finally:
            shutil.rmtree(out, ignore_errors=True)
        passed = verdict.passed and verdict.min_margin >= self.accuracy.min_margin
        return ProbeResult(kept, verdict.exceedances, verdict.requests, verdict.min_margin, passed,
                           time.monotonic() - started)


ProbeFactory = Callable[[RouteFamily, dict[str, Any]], Callable[[tuple[str, ...]], ProbeResult]]


class PrecisionSearch:
    """The run's candidate search, then (once) the mixed-precision candidates the sensitivity search finds."""

    def __init__(self, search: CandidateSearch, spec: TuneSpec, context: BuildContext,
                 tuning: Callable[[], ReferenceSet], started: float, work_dir: Path,
                 probe_factory: ProbeFactory | None = None) -> None:
        """``tuning``: the run's tuning split (without reference outputs, the default route's are computed
        in-process); ``started``: the run's ``time.monotonic()`` start, for the time budget."""
        self.search = search
        self.spec = spec
        self.context = context
        self.tuning = tuning
        self.started = started
        self.work_dir = work_dir
        self.probe_factory = probe_factory
        self.results: dict[str, SensitivityResult] = {}
        self._proposed: set[str] = set()
        self._reference = ReferenceSet(inputs=[])
        self._done = not spec.precision.enabled

    @property
    def decisions(self) -> list[str]:
        return self.search.decisions

    @property
    def baseline(self) -> Candidate:
        return self.search.baseline

    def plan_counts(self) -> dict[str, Any]:
        return self.search.plan_counts()

    def ask(self) -> list[Candidate]:
        """The route search's batch; the first one also carries the mixes, so they are deployed, measured
        and raced side by side with the full-precision routes they must beat."""
        batch = self.search.ask()
        if self._done:
            return batch
        self._done = True
        return batch + self._propose()

    def tell(self, candidates: Sequence[Candidate], score: Score) -> None:
        # The route search learns only from what it planned itself.
        self.search.tell([c for c in candidates if c.id not in self._proposed], score)

    def _tuning_reference(self) -> ReferenceSet:
        """The tuning split with reference outputs: recorded ones, else the default route's (ONNX Runtime
        defaults on the source model) computed here - what the served baseline will answer, up to rounding."""
        tuning = self.tuning()
        if tuning.outputs is not None:
            return tuning
        source = self.context.source_model or self.context.model.path
        with open_runner("onnxruntime", source, {}) as runner:
            outputs = [{k: np.array(v) for k, v in runner.infer(r).items()} for r in tuning.inputs]
        self._note("probe reference: the default route's outputs on the tuning split, computed in-process")
        return tuning.with_outputs(outputs)

    def _note(self, text: str) -> None:
        self.search.decisions.append(f"precision: {text}")

    def _probe(self, family: RouteFamily, knobs: dict[str, Any]) -> Callable[[tuple[str, ...]], ProbeResult]:
        if self.probe_factory is not None:
            return self.probe_factory(family, knobs)
        accuracy = tightened(self.spec.accuracy, self.spec.precision.safety)
        return InProcessProbe(family, knobs, self.context, self._reference, accuracy, self.work_dir)

    def _propose(self) -> list[Candidate]:
        settings = self.spec.precision
        started = time.monotonic()
        total = self.spec.time_budget_s
        deadline = None if total is None else self.started + total - settings.reserve_s
        budget = ProbeBudget(settings.max_probes, deadline)
        if self.probe_factory is None:
            self._reference = self._tuning_reference()
        groups = load_groups(self.context.source_model or self.context.model.path)
        self._note(f"layer groups: {_describe_groups(groups)}")
        space = self.search.space
        planned = self.search.strategy.budget.planned
        out: list[Candidate] = []
        for lowering in settings.lowerings:
            family_name, lower = LOWERINGS[lowering]
            if family_name not in space.compilers:
                self._note(f"{lowering}: skipped, the {family_name} family is not searched in this run")
                continue
            knob_space = space.compilers[family_name]
            knobs = knob_space.canon({**knob_space.start, **lower})
            result = sensitivity_search([g.name for g in groups], self._probe(knob_space.family, knobs), budget)
            self.results[lowering] = result
            for line in _describe_result(lowering, result):
                self._note(line)
            if result.mix is None:
                continue
            candidate = space.candidate(family_name, {**knobs, "fp32_groups": list(result.mix.kept)},
                                        space.graph.defaults, space.serving.start)
            if candidate.id in planned or candidate.id in self._proposed:
                self._note(f"{lowering}: the mix is already planned ({candidate.id})")
                continue
            self._proposed.add(candidate.id)
            out.append(candidate)
        self._note(f"{budget.used} accuracy probes (in-process builds, tuning split only) in "
                   f"{time.monotonic() - started:.1f} s; {len(out)} mixed candidate(s) proposed")
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return out


def _describe_groups(groups: Sequence[LayerGroup]) -> str:
    total = sum(g.cost for g in groups) or 1.0
    return ", ".join(f"{g.name} ({len(g.nodes)} nodes, {100 * g.cost / total:.0f}% of weights)" for g in groups)


def _describe_result(lowering: str, result: SensitivityResult) -> list[str]:
    lines = []
    if result.whole_graph is not None:
        whole = result.whole_graph
        verdict = "passes: no group needs fp32" if whole.passed else "fails"
        lines.append(f"{lowering}: whole graph lowered {verdict} ({whole.exceedances}/{whole.requests} requests fail)")
    if result.damage:
        lines.append(f"{lowering}: one group lowered at a time: " + "; ".join(
            f"{g} {p.exceedances}/{p.requests} fail" for g, p in result.damage.items()))
    for step in result.steps:
        lines.append(f"{lowering}: {step.describe()}" + (" -> proposed" if step is result.mix else ""))
    if result.stopped:
        lines.append(f"{lowering}: stopped after {result.probes} probes: {result.stopped}")
    elif result.mix is None and result.whole_graph is not None and not result.whole_graph.passed:
        lines.append(f"{lowering}: no mix short of all-fp32 passes the tolerance")
    return lines
