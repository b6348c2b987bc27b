"""Checks that run before the first build, so bad input costs seconds, not a finished tune.

Everything a run would otherwise discover late is checked here, in one place the pipeline calls once: the
promoted model's name (else refused at promotion), whether ``repository/<model>`` itself can be written
(not only the repository root), the task metric's import (else at screening), the spec's knob values
against the types their families offer (else a build crash or a traceback), whether requests of the given
``--shape`` fit in memory (else a MemoryError or the OOM killer), whether ``--out`` can be written, and
NaN/Inf in the reference outputs (else at held-out acceptance), named by the request's index in the
user's file. A missing ONNX external-data file is caught earlier still, by ``inspect_model``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from gpt_triton.accuracy.compare import load_task_metric
from gpt_triton.accuracy.reference import ReferenceSet, load_reference, synthesize_reference
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.spec import TuneSpec
from gpt_triton.measure.perf_analyzer import find_perf_analyzer
from gpt_triton.promote.repository import check_model_name
from gpt_triton.routes import FAMILIES
from gpt_triton.run import TuneOptions, check_repository_writable

# Copies of one request alive at once besides the reference set: the load generator's payload, Triton's
# input buffer, the runtime's tensor and the candidate's output. A request must fit that many times over.
REQUEST_COPIES = 4


def prepare(options: TuneOptions, info: ModelInfo, shapes: dict[str, list[int]], repository: Path) -> ReferenceSet:
    """Check everything checkable before building, then load (or synthesise) the reference and check it."""
    spec = options.spec
    check_request_memory(info, shapes, spec.accuracy.synthetic_requests if options.reference is None else 1)
    if options.promote:
        name = spec.promotion.model_name or info.name
        try:
            check_model_name(name)
        except GptTritonError as exc:
            hint = "" if spec.promotion.model_name else " (the model file's stem); pass --model-name"
            raise GptTritonError(f"{exc}{hint}") from None
        check_model_dir_writable(repository, name)
    if spec.accuracy.task_metric:
        load_task_metric(spec.accuracy.task_metric)
    check_knob_values(spec, info)
    check_out_writable(options.out)
    if "perf_analyzer" in (spec.measure.client, spec.measure.cross_check):
        find_perf_analyzer(required=True)  # before any build, not when its first window is due
    if options.reference is not None:
        ref = load_reference(options.reference, info, shapes)
        check_reference_finite(ref)
        return ref
    return synthesize_reference(info, shapes, spec.accuracy.synthetic_requests, spec.accuracy.split_seed)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PB"


def check_request_memory(info: ModelInfo, shapes: dict[str, list[int]], requests: int,
                         available: int | None = None) -> None:
    """Refuse shapes whose requests could not be held in memory (dtype size x dims, batch included)."""
    per_request = 0
    largest = ("", 0)
    for tensor in info.inputs:
        shape = shapes.get(tensor.name)
        if shape is None:
            continue
        nbytes = math.prod(shape) * np.dtype(tensor.dtype).itemsize
        per_request += nbytes
        largest = max(largest, (tensor.name, nbytes), key=lambda item: item[1])
    if available is None:
        available = int(psutil.virtual_memory().available)
    needed = per_request * (max(requests, 1) + REQUEST_COPIES)
    if needed > available:
        name = largest[0]
        raise GptTritonError(
            f"--shape {name}={'x'.join(map(str, shapes[name]))} makes each request {_size(per_request)}; "
            f"{requests} request(s) and their copies in flight need about {_size(needed)} but {_size(available)} "
            "of memory is available; give smaller shapes"
        )


def check_model_dir_writable(repository: Path, name: str) -> None:
    """Promotion writes into ``repository/name`` (a temp version folder, config.pbtxt by rename): the folder
    itself must be writable when it exists, its nearest existing parent otherwise."""
    model_dir = Path(repository) / name
    if model_dir.exists() or model_dir.is_symlink():
        if not model_dir.is_dir():
            raise GptTritonError(f"{model_dir} is not a directory: promotion needs the model's folder there; "
                                 "move the file or pass --repository DIR")
        if not os.access(model_dir, os.W_OK | os.X_OK):
            raise GptTritonError(f"model folder {model_dir} is not writable: promotion adds its next version "
                                 "there; fix its permissions or pass --repository DIR")
        return
    check_repository_writable(Path(repository))


def check_out_writable(out: Path | None) -> None:
    """``--out`` must be a directory this run can write, or creatable; checked without creating it."""
    target = Path(out) if out is not None else Path("runs")
    if target.exists() and not target.is_dir():
        raise GptTritonError(f"--out {target} is a file, not a directory; pass another --out")
    probe = target
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise GptTritonError(f"--out {target}: {probe} is a file, so the run directory cannot be created there")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise GptTritonError(f"--out {target} is not writable (checked {probe}); pass a writable --out")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "list"
    return type(value).__name__


def _knob_problem(value: Any, offered: list[Any]) -> str | None:
    kinds = {_kind(v) for v in offered}
    kind = _kind(value)
    if kind not in kinds and not (kind == "int" and "number" in kinds) and not (kind == "number" and "int" in kinds
                                                                                and float(value).is_integer()):
        shown = ", ".join(repr(v) for v in offered[:6])
        return f"{value!r} is a {kind}, but this knob takes {' or '.join(sorted(kinds))} (offered: {shown})"
    numbers = [v for v in offered if _kind(v) in ("int", "number")]
    if kind in ("int", "number") and numbers and min(numbers) >= 0 and value < 0:
        return f"{value!r} is negative; give a value >= 0"
    return None


def check_knob_values(spec: TuneSpec, info: ModelInfo) -> None:
    """Each knob value in the spec has a type the family offers (``intra_op_threads: "lots"`` is refused
    here, not in a build child), and is not negative where the family offers only non-negative numbers."""
    for family_name, family_spec in spec.families.items():
        family = FAMILIES.get(family_name)
        if family is None:
            continue  # the search names unknown families with the list of known ones
        knobs = {knob.name: knob for knob in family.knobs(info)}
        for name, knob_spec in family_spec.knob_specs().items():
            knob = knobs.get(name)
            if knob is None:
                continue  # the search names unknown knobs with the list of known ones
            values = knob_spec.values if knob_spec.values is not None else [knob_spec.value]
            for value in values:
                problem = _knob_problem(value, [*knob.values, knob.default])
                if problem:
                    raise GptTritonError(f"spec families.{family_name}.knobs.{name}: {problem}")


def check_reference_finite(ref: ReferenceSet) -> None:
    """NaN/Inf in a reference output fails every candidate; say so now, naming the request by its index in
    the user's file (not in a split)."""
    if ref.outputs is None:
        return
    for position, outputs in enumerate(ref.outputs):
        for name, array in outputs.items():
            if array.dtype.kind in "fc" and not np.isfinite(array).all():
                index = ref.indices[position] if ref.indices else position
                what = "NaN" if np.isnan(array).any() else "Inf"
                raise GptTritonError(f"reference output {name!r} of request {index} in {ref.source} has {what}; "
                                     "fix the reference data")
