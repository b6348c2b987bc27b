"""Candidate names people can tell apart: the family plus the knobs that differ from the baseline.

A 12-hex id is a stable key but says nothing, and a full route key spells out every knob (the shared
ones first), so two rows of a table only differ after a hundred characters. A name lists only what sets
a candidate apart: ``onnxruntime graph_opt=basic threads=1``, ``openvino precision=f16 streams=1
instances=2``, ``baseline``. Compiler knobs are compared with the baseline's when the candidate has the
baseline's family, else with that family's own defaults (the search knows them when it plans); graph and
serving knobs with the baseline's. The search stores the name on the candidate (``Candidate.name``) when
it plans it, so the decision log, the report and the plots all say the same thing; :func:`unique_names`
makes the names of a whole run unique (appending the short id where two collide) and names candidates of
older reports that carry none.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Route

BASELINE_NAME = "baseline"
SHORT_ID = 6  # characters of the id appended when two names collide

# Short spellings of the knobs a name shows; a knob not listed keeps its own name.
SHORT_KNOBS: dict[str, str] = {
    "graph_optimization_level": "graph_opt",
    "intra_op_threads": "threads",
    "inter_op_threads": "inter_threads",
    "allow_spinning": "spin",
    "execution_mode": "exec",
    "enable_mem_arena": "arena",
    "enable_mem_pattern": "mem_pattern",
    "fp16_op_block_list": "fp16_keep",
    "int8_activation_type": "int8_act",
    "inference_precision": "precision",
    "performance_hint": "hint",
    "num_streams": "streams",
    "static_shape": "static",
    "quantization": "quant",
    "instance_count": "instances",
    "dynamic_batching": "batching",
    "max_queue_delay_us": "queue_us",
    "preferred_batch_sizes": "preferred",
    "max_batch_size": "max_batch",
    "builder_optimization_level": "opt_level",
    "max_aux_streams": "aux_streams",
    "tiling_optimization_level": "tiling",
    "execution_provider": "ep",
    "constant_folding": "fold",
    "shape_inference": "shapes",
}


def value_text(value: Any) -> str:
    """A knob value as a name shows it: on/off, none, comma-joined lists, plain strings and numbers."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(value_text(v) for v in value) or "[]"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def differing(knobs: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """``short=value`` for each knob whose value differs from ``reference`` (a knob it lacks differs), in
    the route's own order."""
    return [f"{SHORT_KNOBS.get(k, k)}={value_text(v)}" for k, v in knobs.items()
            if k not in reference or not _same(v, reference[k])]


def candidate_name(candidate: Candidate, baseline: Candidate | None,
                   family_defaults: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The family and the knobs that set ``candidate`` apart from ``baseline`` (see the module docstring).

    ``family_defaults``: route family -> its default knobs, the reference for a compiler family other than
    the baseline's and for graph rewrites; a family missing there is compared with nothing (all its knobs
    shown). ``baseline`` itself (or a candidate with its id) is ``baseline``."""
    if candidate.is_baseline or (baseline is not None and candidate.id == baseline.id):
        return BASELINE_NAME
    defaults = family_defaults or {}
    if baseline is not None and candidate.family == baseline.family:
        reference: Mapping[str, Any] = baseline.route.knobs
    else:
        reference = defaults.get(candidate.family, {})
    parts = differing(candidate.route.knobs, reference)
    if candidate.graph is not None and candidate.graph.knobs:
        graph_reference = (baseline.graph.knobs if baseline is not None and baseline.graph is not None
                           else defaults.get(candidate.graph.family, {}))
        parts += differing(candidate.graph.knobs, graph_reference)
    if candidate.serving.knobs:
        parts += differing(candidate.serving.knobs, baseline.serving.knobs if baseline is not None else {})
    return " ".join([candidate.family, *parts])


def _mode_defaults(candidates: Sequence[Candidate]) -> dict[str, dict[str, Any]]:
    """Per route family, each knob's most common value among ``candidates`` (first seen wins a tie): the
    reference for reports saved before candidates carried names, whose family defaults are unknown."""
    routes: dict[str, list[Route]] = {}
    for candidate in candidates:
        for route in (candidate.route, candidate.graph):
            if route is not None:
                routes.setdefault(route.family, []).append(route)
    out: dict[str, dict[str, Any]] = {}
    for family, members in routes.items():
        knobs: dict[str, Any] = {}
        for knob in dict.fromkeys(k for r in members for k in r.knobs):
            counts = Counter(json.dumps(r.knobs[knob], sort_keys=True) for r in members if knob in r.knobs)
            knobs[knob] = json.loads(counts.most_common(1)[0][0])
        out[family] = knobs
    return out


def unique_names(candidates: Sequence[Candidate], baseline_id: str | None = None) -> dict[str, str]:
    """id -> name for a whole run: the name each candidate carries (computed for those without one), with
    the short id appended wherever two names collide."""
    baseline = next((c for c in candidates if c.id == baseline_id), None) if baseline_id else None
    baseline = baseline or next((c for c in candidates if c.is_baseline), None)
    fallback: dict[str, dict[str, Any]] | None = None
    names: dict[str, str] = {}
    for candidate in candidates:
        name = candidate.name
        if not name:
            if fallback is None:
                fallback = _mode_defaults(candidates)
            name = candidate_name(candidate, baseline, fallback)
        names[candidate.id] = name
    counts = Counter(names.values())
    return {cid: f"{name} #{cid[:SHORT_ID]}" if counts[name] > 1 else name for cid, name in names.items()}


def named(candidate: Candidate) -> str:
    """How a log line names a candidate: its name with its id, the stable key (``openvino hint=THROUGHPUT
    (3fa2c1d09e8b)``); the id alone for a candidate planned without a name."""
    return f"{candidate.name} ({candidate.id})" if candidate.name else candidate.id


def named_id(candidates: Sequence[Candidate], candidate_id: str | None) -> str:
    """:func:`named` for a candidate known by its id among ``candidates`` (the id itself when it is not there,
    "none" for no candidate)."""
    if candidate_id is None:
        return "none"
    return next((named(c) for c in candidates if c.id == candidate_id), candidate_id)
