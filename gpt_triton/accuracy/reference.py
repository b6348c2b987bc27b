"""Reference traffic: load it (npz, npz directory, perf_analyzer JSON, JSONL), synthesise it, split it.

A :class:`ReferenceSet` is a list of requests, each a dict ``name -> array`` with the batch axis, plus
optional reference outputs per request. The held-out part of a split is wrapped in :class:`HeldOut`,
which hands its data out exactly once and logs who asked and why, so a run can prove that selection
(which only sees the tuning part) never touched it.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpt_triton.accuracy import _formats
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, TensorInfo

Request = dict[str, np.ndarray]


@dataclass(frozen=True)
class ReferenceSet:
    """Requests (name -> array, batch axis included) and, when known, the reference outputs per request."""

    inputs: list[Request]
    outputs: list[Request] | None = None
    source: str = ""
    synthetic: bool = False
    # Positions of these requests in the set they were split from (None: not a split part).
    indices: list[int] | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return len(self.inputs)

    def with_outputs(self, outputs: Sequence[Request]) -> ReferenceSet:
        """The same inputs with ``outputs`` as the reference (e.g. the default route's outputs)."""
        if len(outputs) != len(self.inputs):
            raise GptTritonError(
                f"got {len(outputs)} reference outputs for {len(self.inputs)} requests; they must pair one to one"
            )
        return replace(self, outputs=[dict(o) for o in outputs])

    def describe(self) -> dict[str, Any]:
        """What the report records about the reference (never the data itself)."""
        return {
            "source": self.source,
            "synthetic": self.synthetic,
            "requests": len(self.inputs),
            "samples": sum(_batch_of(r) for r in self.inputs),
            "has_outputs": self.outputs is not None,
        }


@dataclass(frozen=True)
class AccessRecord:
    reason: str
    caller: str  # module:function that opened the held-out data
    when: str  # UTC ISO timestamp


class HeldOut:
    """The held-out split. Its data is reachable only through :meth:`open_for_acceptance`, once."""

    def __init__(self, ref: ReferenceSet, *, seed: int, fraction: float) -> None:
        self.__ref = ref  # name-mangled: reaching it from outside takes a deliberate act
        self.size = len(ref)
        self.indices = list(ref.indices or [])
        self.seed = seed
        self.fraction = fraction
        self.log: list[AccessRecord] = []

    @property
    def opened(self) -> bool:
        return bool(self.log)

    def open_for_acceptance(self, reason: str) -> ReferenceSet:
        """Hand out the held-out requests for the final acceptance check. A second call raises."""
        frame = inspect.stack()[1]
        caller = f"{frame.frame.f_globals.get('__name__', '?')}:{frame.function}"
        if self.log:
            first = self.log[0]
            raise GptTritonError(
                f"held-out reference was already opened by {first.caller} ({first.reason!r}); "
                "it may be used for one acceptance check only"
            )
        if not reason.strip():
            raise GptTritonError("open_for_acceptance needs a reason saying why the held-out data is read")
        when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.log.append(AccessRecord(reason=reason, caller=caller, when=when))
        return self.__ref

    def describe(self) -> dict[str, Any]:
        return {
            "heldout_requests": self.size,
            "split_seed": self.seed,
            "heldout_fraction": self.fraction,
            "opened": [vars(a) for a in self.log],
        }

    def __repr__(self) -> str:  # never print the data
        return f"HeldOut(size={self.size}, seed={self.seed}, opened={self.opened})"


# ---------------------------------------------------------------------------------------------- split


def split_reference(ref: ReferenceSet, heldout_fraction: float, seed: int) -> tuple[ReferenceSet, HeldOut]:
    """Deterministic split: a seeded permutation, the first ``round(n*fraction)`` requests held out.

    Both parts keep at least one request when ``0 < fraction < 1`` (a held-out part of zero requests
    proves nothing; a tuning part of zero leaves selection blind).
    """
    n = len(ref)
    if not 0.0 <= heldout_fraction < 1.0:
        raise GptTritonError(f"accuracy.heldout_fraction is {heldout_fraction}; use a value in [0, 1), e.g. 0.3")
    if n == 0:
        raise GptTritonError("the reference set is empty; give at least one request")
    held = round(n * heldout_fraction)
    if heldout_fraction > 0:
        if n < 2:
            raise GptTritonError(
                f"the reference set has {n} request; a held-out split needs at least 2 (add requests or set heldout_fraction: 0)"
            )
        held = min(max(held, 1), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    # Sorted within each part so the tuning order follows the original traffic order.
    held_idx = sorted(int(i) for i in order[:held])
    tune_idx = sorted(int(i) for i in order[held:])
    tuning = _subset(ref, tune_idx, "tuning")
    heldout = _subset(ref, held_idx, "heldout")
    return tuning, HeldOut(heldout, seed=seed, fraction=heldout_fraction)


def describe_split(tuning: ReferenceSet, heldout: HeldOut) -> dict[str, Any]:
    """What RunReport.reference records: source, synthetic or not, split seed and sizes, held-out access log."""
    summary = tuning.describe()
    summary["source"] = tuning.source.removesuffix(" [tuning]")
    summary["tuning_requests"] = summary.pop("requests")
    summary.update(heldout.describe())
    return summary


def _subset(ref: ReferenceSet, idx: list[int], part: str) -> ReferenceSet:
    base = ref.indices
    return ReferenceSet(
        inputs=[ref.inputs[i] for i in idx],
        outputs=None if ref.outputs is None else [ref.outputs[i] for i in idx],
        source=f"{ref.source} [{part}]",
        synthetic=ref.synthetic,
        indices=[base[i] if base else i for i in idx],
    )


# ---------------------------------------------------------------------------------------------- synthesis


def synthesize_reference(model: ModelInfo, shapes: dict[str, list[int]], count: int, seed: int) -> ReferenceSet:
    """``count`` seeded requests of the resolved ``shapes``: floats ~U(0,1), ints in [0, 16), bools fair."""
    if count < 1:
        raise GptTritonError(f"accuracy.synthetic_requests is {count}; use at least 1")
    rng = np.random.default_rng(seed)
    requests: list[Request] = []
    for _ in range(count):
        request: Request = {}
        for tensor in model.inputs:
            shape = shapes.get(tensor.name) or [d if isinstance(d, int) and d > 0 else 1 for d in tensor.dims]
            request[tensor.name] = _random_array(rng, tensor.dtype, shape)
        requests.append(request)
    return ReferenceSet(inputs=requests, source=f"synthetic (seed {seed}, {count} requests)", synthetic=True)


def _random_array(rng: np.random.Generator, dtype: str, shape: list[int]) -> np.ndarray:
    kind = np.dtype(dtype).kind if dtype != "object" else "O"
    if kind == "f":
        # U(0,1) is what normalised images look like and keeps every activation finite in fp16.
        return rng.random(shape).astype(dtype)
    if kind in "iu":
        # Small non-negative ints are valid ids/indices for embedding tables and gathers.
        return rng.integers(0, 16, size=shape).astype(dtype)
    if kind == "b":
        return rng.random(shape) < 0.5
    raise GptTritonError(f"cannot synthesise {dtype} inputs; give reference traffic with --reference")


# ---------------------------------------------------------------------------------------------- load / save


def load_reference(path: str | Path, model: ModelInfo, shapes: dict[str, list[int]]) -> ReferenceSet:
    """Read reference traffic and check it against the model; every problem is a one-line error.

    ``shapes`` are the resolved request shapes: non-batch dims of the data must agree with them (the
    batch axis may vary per request when the model is batch-dynamic). Inputs missing from ``shapes``
    are only checked against the model's fixed dims.
    """
    path = Path(path)
    if not path.exists():
        raise GptTritonError(f"reference data not found: {path}")
    try:
        raw_inputs, raw_outputs = _formats.read_any(
            path, [t.name for t in model.inputs], [t.name for t in model.outputs]
        )
    except GptTritonError:
        raise
    except Exception as exc:  # numpy, zipfile and json raise many types for corrupt files
        raise GptTritonError(f"cannot read reference data {path} ({type(exc).__name__}: {exc})") from exc
    if not raw_inputs:
        raise GptTritonError(f"reference data {path} holds no requests")
    inputs = [_check_request(i, r, model.inputs, model, shapes, "input") for i, r in enumerate(raw_inputs)]
    outputs: list[Request] | None = None
    present = [bool(o) for o in raw_outputs]
    if any(present):
        if not all(present):
            raise GptTritonError(
                f"reference request {present.index(False)} has no outputs but request {present.index(True)} does; "
                "give outputs for all requests or none"
            )
        outputs = [_check_request(i, o, model.outputs, model, {}, "output") for i, o in enumerate(raw_outputs)]
        for i, (inp, out) in enumerate(zip(inputs, outputs, strict=True)):
            if model.batch_dynamic and _batch_of(out) != _batch_of(inp):
                raise GptTritonError(
                    f"reference request {i}: outputs have batch {_batch_of(out)} but inputs have batch {_batch_of(inp)}"
                )
    return ReferenceSet(inputs=inputs, outputs=outputs, source=str(path), synthetic=False)


def _check_request(
    index: int, raw: dict[str, Any], tensors: list[TensorInfo], model: ModelInfo, shapes: dict[str, list[int]], kind: str
) -> Request:
    where = f"reference request {index}"
    wanted = {t.name: t for t in tensors}
    extra = sorted(set(raw) - set(wanted))
    if extra:
        raise GptTritonError(f"{where}: unknown {kind} {extra[0]!r}; the model's {kind}s are: {', '.join(wanted)}")
    missing = [name for name in wanted if name not in raw]
    if missing and kind == "input":
        raise GptTritonError(f"{where}: input {missing[0]!r} is missing; every request needs: {', '.join(wanted)}")
    request: Request = {}
    for name, value in raw.items():
        tensor = wanted[name]
        need = _needed_dims(tensor, model, shapes.get(name))
        try:
            array = _formats.coerce(value, tensor.dtype, need)  # JSON content takes the model's dtype
        except (ValueError, TypeError) as exc:  # a JSON shape that does not fit its content, bad base64...
            raise GptTritonError(f"{where}: {kind} {name} is not a valid tensor ({exc})") from exc
        if array.dtype.name != tensor.dtype:
            raise GptTritonError(
                f"{where}: {kind} {name} has dtype {array.dtype.name} but the model needs {tensor.dtype}; "
                f"cast it (e.g. array.astype('{tensor.dtype}'))"
            )
        if model.batch_dynamic and array.ndim == len(need) - 1:
            array = array[np.newaxis]  # a single sample without its batch axis (perf_analyzer's convention)
        if array.ndim != len(need) or any(
            isinstance(d, int) and d != s for d, s in zip(need, array.shape, strict=False)
        ):
            have = "[" + ",".join(str(s) for s in array.shape) + "]"
            want = "[" + ",".join(str(d) for d in need) + "]"
            raise GptTritonError(f"{where}: {kind} {name} has shape {have} but the model needs {want}")
        request[name] = np.ascontiguousarray(array)
    return request


def _needed_dims(tensor: TensorInfo, model: ModelInfo, resolved: list[int] | None) -> list[int | str]:
    """The shape a request must have: ``N`` for a free batch axis, ``?`` for an unresolved dynamic dim."""
    need: list[int | str] = []
    for axis, dim in enumerate(tensor.dims):
        if axis == 0 and model.batch_dynamic:
            need.append("N")
        elif isinstance(dim, int) and dim > 0:
            need.append(dim)
        elif resolved is not None and axis < len(resolved):
            need.append(resolved[axis])
        else:
            need.append("?")
    return need


def _batch_of(request: Request) -> int:
    first = next(iter(request.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def save_npz(ref: ReferenceSet, path: Path) -> None:
    """One ``.npz`` with keys ``name/<request>`` (batch sizes may differ per request). Atomic."""
    arrays: dict[str, np.ndarray] = {}
    for i, request in enumerate(ref.inputs):
        arrays.update({f"{name}/{i}": a for name, a in request.items()})
    for i, request in enumerate(ref.outputs or []):
        arrays.update({f"{name}/{i}": a for name, a in request.items()})
    _formats.atomic_savez(Path(path), arrays)


def save_npz_dir(ref: ReferenceSet, out_dir: Path) -> None:
    """A directory of ``000000.npz``... one request each (inputs and outputs by name). Atomic as a whole."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=False)
    try:
        for i, request in enumerate(ref.inputs):
            arrays = dict(request)
            if ref.outputs is not None:
                arrays.update(ref.outputs[i])
            _formats.atomic_savez(tmp / f"{i:06d}.npz", arrays)
        if out_dir.exists():
            raise GptTritonError(f"{out_dir} already exists; remove it or choose another directory")
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            _formats.remove_tree(tmp)


def save_perf_analyzer_json(ref: ReferenceSet, path: Path) -> None:
    _formats.write_perf_analyzer_json(Path(path), ref.inputs, ref.outputs)


def save_jsonl(ref: ReferenceSet, path: Path) -> None:
    _formats.write_jsonl(Path(path), ref.inputs, ref.outputs)


def save_calibration_npz(ref: ReferenceSet, path: Path) -> None:
    """Inputs stacked along the batch axis (``name -> [samples, ...]``), for int8 calibration readers."""
    if not ref.inputs:
        raise GptTritonError("cannot write calibration data from an empty reference set")
    stacked: dict[str, np.ndarray] = {}
    for name in ref.inputs[0]:
        parts = [r[name] for r in ref.inputs]
        if len({p.shape[1:] for p in parts}) != 1:
            raise GptTritonError(f"calibration input {name} has requests of different non-batch shapes; cannot stack")
        stacked[name] = np.concatenate(parts, axis=0)
    _formats.atomic_savez(Path(path), stacked)
