"""Readers and writers of reference-traffic files. Readers return raw per-request dicts; the checks
against the model (names, dtypes, shapes) live in :mod:`gpt_triton.accuracy.reference`.

Formats:
* ``.npz`` file: ``name`` arrays with a leading request axis ``[requests, *shape]``, or keys ``name/<i>``
  (one array per request, so batch sizes may differ);
* a directory of ``.npz`` files, one request each, in sorted file-name order;
* perf_analyzer input-data JSON: ``{"data": [{name: {"content": [...], "shape": [...]}}], "validation_data": [...]}``
  (content may also be a bare list or ``{"b64": ...}``);
* JSONL: one ``{"inputs": {name: {"shape", "dtype", "data"}}, "outputs": {...}}`` per line.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpt_triton.core.errors import GptTritonError

Raw = dict[str, Any]  # name -> np.ndarray, or a JSON tensor dict still to be coerced


def read_any(path: Path, input_names: Sequence[str], output_names: Sequence[str]) -> tuple[list[Raw], list[Raw]]:
    """(inputs per request, outputs per request; an empty dict where a request has none)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".npz")
        if not files:
            raise GptTritonError(f"reference directory {path} has no .npz files (one request per file)")
        requests = []
        for file in files:
            with np.load(file, allow_pickle=False) as data:
                requests.append({k: data[k] for k in data.files})
        return _partition(requests, output_names)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        return _partition(_npz_requests(arrays, set(input_names) | set(output_names)), output_names)
    if suffix == ".json":
        return _read_perf_analyzer(path)
    if suffix == ".jsonl":
        return _read_jsonl(path, output_names)
    raise GptTritonError(f"reference data {path}: unknown format {suffix!r}; use .npz, a directory of .npz, .json or .jsonl")


def _partition(requests: list[Raw], output_names: Sequence[str]) -> tuple[list[Raw], list[Raw]]:
    outs = set(output_names)
    inputs = [{k: v for k, v in r.items() if k not in outs} for r in requests]
    outputs = [{k: v for k, v in r.items() if k in outs} for r in requests]
    return inputs, outputs


def _npz_requests(arrays: dict[str, np.ndarray], names: set[str]) -> list[Raw]:
    per_request: dict[int, Raw] = {}
    stacked: dict[str, np.ndarray] = {}
    for key, array in arrays.items():
        base, sep, index = key.rpartition("/")
        if key not in names and sep and index.isdigit():
            per_request.setdefault(int(index), {})[base] = array
        else:
            stacked[key] = array
    if per_request and stacked:
        raise GptTritonError(
            f"reference npz mixes stacked arrays ({sorted(stacked)[0]}) and per-request keys; use one layout"
        )
    if per_request:
        indices = sorted(per_request)
        if indices != list(range(len(indices))):
            raise GptTritonError("reference npz per-request keys must be numbered 0, 1, 2, ... without gaps")
        return [per_request[i] for i in indices]
    counts = {k: (a.shape[0] if a.ndim else 0) for k, a in stacked.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{k}: {n}" for k, n in counts.items())
        raise GptTritonError(f"reference npz arrays disagree on the number of requests (leading axis): {detail}")
    count = next(iter(counts.values()), 0)
    return [{k: a[i] for k, a in stacked.items()} for i in range(count)]


def _read_perf_analyzer(path: Path) -> tuple[list[Raw], list[Raw]]:
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise GptTritonError(f"reference JSON {path} needs a top-level {{\"data\": [...]}} (perf_analyzer input-data format)")
    data = doc["data"]
    if any(not isinstance(entry, dict) for entry in data):
        raise GptTritonError(f"reference JSON {path}: each entry of \"data\" must be an object name -> tensor (streams are not supported)")
    validation = doc.get("validation_data") or []
    if validation and len(validation) != len(data):
        raise GptTritonError(
            f"reference JSON {path}: validation_data has {len(validation)} entries but data has {len(data)}; they pair one to one"
        )
    return list(data), list(validation) or [{} for _ in data]


def _read_jsonl(path: Path, output_names: Sequence[str]) -> tuple[list[Raw], list[Raw]]:
    inputs: list[Raw] = []
    outputs: list[Raw] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GptTritonError(f"reference JSONL {path} line {number} is not JSON: {exc}") from exc
        if not isinstance(record, dict) or not isinstance(record.get("inputs"), dict):
            raise GptTritonError(f"reference JSONL {path} line {number} needs {{\"inputs\": {{name: {{shape, dtype, data}}}}}}")
        inputs.append(record["inputs"])
        outputs.append(record.get("outputs") or {})
    return inputs, outputs


def coerce(value: Any, dtype: str, need: Sequence[int | str]) -> np.ndarray:
    """An array from an npz array or a JSON tensor. JSON without a dtype takes the model's ``dtype``;
    JSON without a shape is reshaped to ``need`` (free batch axis ``N`` inferred from the size)."""
    if isinstance(value, np.ndarray):
        return value
    shape = None
    if isinstance(value, dict):
        shape = value.get("shape")
        dtype = value.get("dtype", dtype)
        if "b64" in value:
            array = np.frombuffer(base64.b64decode(value["b64"]), dtype=dtype).copy()
        else:
            array = np.asarray(value.get("content", value.get("data")), dtype=dtype)
    else:
        array = np.asarray(value, dtype=dtype)
    if shape is not None:
        return array.reshape([int(d) for d in shape])
    if all(isinstance(d, int) or d == "N" for d in need) and array.ndim <= 1:
        rest = int(np.prod([d for d in need if isinstance(d, int)]))
        if rest and array.size % rest == 0:
            return array.reshape([array.size // rest if d == "N" else int(d) for d in need])
    return array


def _tensor_json(array: np.ndarray, with_dtype: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"shape": list(array.shape)}
    if with_dtype:
        body["dtype"] = array.dtype.name
    body["data" if with_dtype else "content"] = array.reshape(-1).tolist()
    return body


def write_perf_analyzer_json(path: Path, inputs: Sequence[Raw], outputs: Sequence[Raw] | None) -> None:
    """Shapes are written in full (batch axis included) so requests of any batch size round-trip."""
    doc: dict[str, Any] = {"data": [{k: _tensor_json(a, False) for k, a in r.items()} for r in inputs]}
    if outputs is not None:
        doc["validation_data"] = [{k: _tensor_json(a, False) for k, a in r.items()} for r in outputs]
    atomic_write_text(path, json.dumps(doc))


def write_jsonl(path: Path, inputs: Sequence[Raw], outputs: Sequence[Raw] | None) -> None:
    lines = []
    for i, request in enumerate(inputs):
        record: dict[str, Any] = {"inputs": {k: _tensor_json(a, True) for k, a in request.items()}}
        if outputs is not None:
            record["outputs"] = {k: _tensor_json(a, True) for k, a in outputs[i].items()}
        lines.append(json.dumps(record))
    atomic_write_text(path, "\n".join(lines) + "\n")


def atomic_write_text(path: Path, text: str) -> None:
    _atomic(path, lambda handle: handle.write(text.encode()))


def atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    # savez to a handle: given a path it would append ".npz" to our temp name.
    _atomic(path, lambda handle: np.savez(handle, **arrays))


def _atomic(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
