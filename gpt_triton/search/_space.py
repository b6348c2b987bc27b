"""The search space: each family's knobs under the spec (:class:`KnobSpace`) and the whole plan's spaces
(:class:`SearchSpace`: compilers, graph rewrite, serving, and the baseline candidate).

A spec entry ``{knob: value}`` fixes a knob, ``{knob: [values]}`` sweeps those values, and an unspecified
knob sweeps every value its family offers. Knobs that cannot matter (a family's ``conditional`` hook, e.g.
the fp16 block list under fp32) are reset to their default, so no two routes differ only in them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.naming import BASELINE_NAME, candidate_name
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact, BuildContext, Knob, Route
from gpt_triton.core.spec import FamilySpec, TuneSpec
from gpt_triton.routes._base import RouteFamily
from gpt_triton.routes._common import canonical
from gpt_triton.routes.baseline import BaselineRoute

BASELINE_FAMILY = "onnxruntime"


def value_key(value: Any) -> str:
    """Knob values compare by their JSON text: lists (block lists, batch sizes) are values too."""
    return json.dumps(value, sort_keys=True)


def _unique(values: Sequence[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for value in values:
        if value_key(value) not in seen:
            seen.add(value_key(value))
            out.append(value)
    return out


@dataclass
class KnobSpace:
    """One family's knobs under the spec: values swept per knob and the starting route."""

    family: RouteFamily
    values: dict[str, list[Any]]
    defaults: dict[str, Any]  # the family's own defaults
    start: dict[str, Any]  # the starting route under the spec (fixed values applied)
    rules: Mapping[str, tuple[str, tuple[Any, ...]]] = field(default_factory=dict)

    def canon(self, knobs: dict[str, Any]) -> dict[str, Any]:
        return canonical(self.family, knobs, self.defaults)

    def _split(self, values: Mapping[str, list[Any]]) -> tuple[list[str], list[str]]:
        conds = [k for k in values if k in self.rules and self.rules[k][0] in values]
        return [k for k in values if k not in conds], conds

    def enumerate(self, values: Mapping[str, list[Any]] | None = None) -> Iterator[dict[str, Any]]:
        """Every distinct canonical route over ``values`` (default: the whole space), in a stable order."""
        values = values or self.values
        plain, conds = self._split(values)
        for combo in itertools.product(*(values[k] for k in plain)):
            base = dict(zip(plain, combo, strict=True))
            choices = [
                values[c] if base[self.rules[c][0]] in self.rules[c][1] else [self.defaults[c]] for c in conds
            ]
            for extra in itertools.product(*choices):
                yield {**base, **dict(zip(conds, extra, strict=True))}

    def count(self, values: Mapping[str, list[Any]] | None = None) -> int:
        """len(list(enumerate(values))) without enumerating: sum over the parents' values only."""
        values = values or self.values
        plain, conds = self._split(values)
        parents = sorted({self.rules[c][0] for c in conds})
        free = 1
        for k in plain:
            if k not in parents:
                free *= len(values[k])
        total = 0
        for combo in itertools.product(*(values[p] for p in parents)):
            chosen = dict(zip(parents, combo, strict=True))
            n = 1
            for c in conds:
                parent, when = self.rules[c]
                n *= len(values[c]) if chosen[parent] in when else 1
            total += n
        return free * total

    def contains(self, knobs: Mapping[str, Any]) -> bool:
        """Whether :meth:`enumerate` yields ``knobs`` (so a count need not enumerate to find a route)."""
        if set(knobs) != set(self.values) or self.canon(dict(knobs)) != dict(knobs):
            return False
        _, conds = self._split(self.values)
        for name, allowed in self.values.items():
            parent = self.rules[name][0] if name in conds else None
            if parent is not None and knobs[parent] not in self.rules[name][1]:
                continue  # an inapplicable knob is enumerated at its default, which canon() checked
            if value_key(knobs[name]) not in {value_key(v) for v in allowed}:
                return False
        return True

    def frozen(self) -> KnobSpace:
        """This family at its defaults only: a disabled graph/serving family still applies its defaults."""
        return KnobSpace(self.family, {k: [v] for k, v in self.defaults.items()}, self.defaults, dict(self.defaults), self.rules)


def knob_space(family: RouteFamily, model: ModelInfo, family_spec: FamilySpec | None) -> KnobSpace:
    knobs = family.knobs(model)
    values = {k.name: _unique(k.values) for k in knobs}
    defaults = {k.name: k.default for k in knobs}
    start = dict(defaults)
    for name, ks in (family_spec.knob_specs() if family_spec else {}).items():
        if name not in values:
            raise GptTritonError(
                f"spec families.{family.name}.knobs names unknown knob {name!r}; {family.name} knobs: {', '.join(values)}"
            )
        if ks.values is not None:
            if not ks.values:
                raise GptTritonError(f"spec families.{family.name}.knobs.{name} sweeps an empty list; give at least one value")
            values[name] = _unique(ks.values)
            start[name] = defaults[name] if value_key(defaults[name]) in {value_key(v) for v in values[name]} else values[name][0]
        else:
            values[name] = [ks.value]
            start[name] = ks.value
    space = KnobSpace(family=family, values=values, defaults=defaults, start={}, rules=family.conditional)
    space.start = space.canon(start)
    return space


def candidate_id(route: Route, graph: Route | None, serving: Route) -> str:
    text = f"{route.key()} | {graph.key() if graph else 'graph: none'} | {serving.key()}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class _NoFamily(RouteFamily):
    """Stands in for a graph or serving family the family table lacks: no knobs, never built."""

    name = "none"

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def knobs(self, model: ModelInfo) -> list[Knob]:
        return []

    def build(self, route: Route, context: BuildContext, out_dir: Any) -> Artifact:
        raise NotImplementedError("the empty family has nothing to build")


@dataclass
class SearchSpace:
    """Every space a strategy draws from: one per searched compiler, plus the graph and serving spaces
    every candidate combines with, and the baseline (the reference for every gain)."""

    compilers: dict[str, KnobSpace]  # enabled and available compiler families, in the family table's order
    graph: KnobSpace
    serving: KnobSpace
    baseline: Candidate = field(init=False)
    # Route family -> its own default knobs: what a candidate's name is read against (core.naming).
    family_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)

    def spaces(self, name: str) -> list[KnobSpace]:
        """The three spaces of a candidate of compiler ``name``: 0 compiler, 1 graph, 2 serving."""
        return [self.compilers[name], self.graph, self.serving]

    def candidate(
        self, family: str, knobs: dict[str, Any], graph: dict[str, Any], serving: dict[str, Any], is_baseline: bool = False
    ) -> Candidate:
        route = Route(family=family, knobs=knobs)
        # The identity rewrite is "no graph route", so a default-graph candidate shares the baseline's id form.
        graph_route = None if graph == self.graph.defaults else Route(family=self.graph.family.name, knobs=graph)
        serving_route = Route(family=self.serving.family.name, knobs=serving)
        candidate = Candidate(
            id=candidate_id(route, graph_route, serving_route), family=family, route=route, graph=graph_route,
            serving=serving_route, is_baseline=is_baseline,
        )
        baseline = getattr(self, "baseline", None)  # unset while the baseline itself is made
        candidate.name = BASELINE_NAME if is_baseline else candidate_name(candidate, baseline, self.family_defaults)
        return candidate

    def make(self, family: str, routes: Iterable[dict[str, Any]]) -> Candidate:
        """A candidate from (compiler, graph, serving) knob dicts."""
        compiler, graph, serving = routes
        return self.candidate(family, compiler, graph, serving)

    def full_count(self, name: str) -> int:
        return self.compilers[name].count() * self.graph.count() * self.serving.count()

    def product(self, name: str, values: Sequence[dict[str, list[Any]]] | None = None) -> Iterator[Candidate]:
        """Compiler ``name``'s cartesian product over its three spaces (``values``: per space, a restriction)."""
        spaces = self.spaces(name)
        restricted: Sequence[dict[str, list[Any]] | None] = values if values else [None, None, None]
        for routes in itertools.product(*(s.enumerate(v) for s, v in zip(spaces, restricted, strict=True))):
            yield self.make(name, routes)

    def full(self, restrict: Mapping[str, Sequence[dict[str, list[Any]]]] | None = None) -> Iterator[Candidate]:
        """Products of every compiler (or only those in ``restrict``, restricted), interleaved round-robin
        so a max_builds cap still covers every family."""
        names = [n for n in self.compilers if restrict is None or n in restrict]
        streams = [self.product(name, restrict[name] if restrict else None) for name in names]
        for batch in itertools.zip_longest(*streams):
            yield from (c for c in batch if c is not None)

    def baseline_in_product(self) -> bool:
        """Whether the full product already holds the baseline (then it is not one route more)."""
        if self.baseline.family not in self.compilers:
            return False
        knobs = [self.baseline.route.knobs, self.graph.defaults, self.serving.defaults]
        return all(s.contains(k) for s, k in zip(self.spaces(self.baseline.family), knobs, strict=True))


def _anchor(space: KnobSpace, knobs: Mapping[str, Any], family_spec: FamilySpec | None) -> None:
    """Start ``space`` from the production values in ``knobs`` (adding a value the family does not offer),
    except for knobs the spec fixes: one-knob-at-a-time then moves away from what production serves."""
    fixed = {n for n, ks in (family_spec.knob_specs() if family_spec else {}).items() if ks.values is None}
    start = dict(space.start)
    for name, value in knobs.items():
        if name not in space.values or name in fixed:
            continue
        if value_key(value) not in {value_key(v) for v in space.values[name]}:
            space.values[name] = [*space.values[name], value]
        start[name] = value
    space.start = space.canon(start)


def build_space(
    spec: TuneSpec, model: ModelInfo, families: Mapping[str, RouteFamily], decisions: list[str],
    unavailable: Mapping[str, str] | None = None, baseline: BaselineRoute | None = None,
) -> SearchSpace:
    """The spaces under ``spec``; why a family is left out is appended to ``decisions``.

    ``baseline``: what production serves (``tune --model-repository``): planned as the baseline instead of
    ONNX Runtime's defaults, and the start of its compiler family's and the serving family's spaces.

    ``unavailable`` names families available here that the run still cannot use, with the reason (the
    server cannot serve their artifacts, or their engines would not run on the serving image); a family's
    own unavailability is reported first."""
    unknown = sorted(set(spec.families) - set(families))
    if unknown:
        raise GptTritonError(f"spec names unknown route famil(ies) {unknown}; known families: {', '.join(families)}")
    compilers: dict[str, KnobSpace] = {}
    graph: KnobSpace | None = None
    serving: KnobSpace | None = None
    family_defaults: dict[str, dict[str, Any]] = {}
    for name, family in families.items():
        fspec = spec.families.get(name)
        space = knob_space(family, model, fspec)  # validates knob names even for disabled families
        family_defaults[name] = dict(space.defaults)
        available, why = family.availability()
        if available and unavailable and name in unavailable:
            available, why = False, unavailable[name]
        if fspec is not None and not fspec.enabled:
            decisions.append(f"{name}: disabled by the spec")
            space = space.frozen()
        elif not available:
            decisions.append(f"{name}: unavailable here ({why})")
            space = space.frozen()
        elif family.kind == "compiler":
            compilers[name] = space
        if family.kind == "graph" and graph is None:
            graph = space
        elif family.kind == "serving" and serving is None:
            serving = space
    empty = KnobSpace(_NoFamily(), {}, {}, {})
    out = SearchSpace(compilers=compilers, graph=graph or empty, serving=serving or empty,
                      family_defaults=family_defaults)
    if baseline is not None:
        return _production(out, spec, model, families, decisions, baseline)
    base_family = families.get(BASELINE_FAMILY) or next(iter(families.values()))
    # The baseline is the family's own defaults, whatever the spec fixes: gains are measured against it.
    out.baseline = out.candidate(
        base_family.name, knob_space(base_family, model, None).defaults, out.graph.defaults, out.serving.defaults,
        is_baseline=True,
    )
    if BASELINE_FAMILY not in compilers:
        decisions.append(f"baseline: {BASELINE_FAMILY} defaults are still planned first, as the reference for every gain")
    return out


def _production(out: SearchSpace, spec: TuneSpec, model: ModelInfo, families: Mapping[str, RouteFamily],
                decisions: list[str], baseline: BaselineRoute) -> SearchSpace:
    """``out`` with the production route as its baseline and the start of its family's and serving spaces."""
    if baseline.family not in families:
        raise GptTritonError(f"the production config is served by {baseline.family}, a family this run does not have")
    family = families[baseline.family]
    defaults = knob_space(family, model, None).defaults
    unknown = sorted(set(baseline.knobs) - set(defaults))
    if unknown:
        raise GptTritonError(f"the production config sets {unknown}, which {baseline.family} has no knobs for")
    compiler = {**defaults, **baseline.knobs}
    serving = {**out.serving.defaults, **{k: v for k, v in baseline.serving.items() if k in out.serving.defaults}}
    if baseline.family in out.compilers:
        _anchor(out.compilers[baseline.family], compiler, spec.families.get(baseline.family))
    _anchor(out.serving, serving, spec.families.get(out.serving.family.name))
    out.baseline = out.candidate(baseline.family, compiler, out.graph.defaults, out.serving.canon(serving),
                                 is_baseline=True)
    decisions.append(f"baseline: {baseline.describe()}; every gain is measured against it")
    decisions.extend(f"baseline: {note}" for note in baseline.notes)
    if baseline.family not in out.compilers:
        decisions.append(f"baseline: {baseline.family} is not searched, but production's route is still planned first")
    return out
