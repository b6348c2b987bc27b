"""Replay files: a JSONL trace with timestamps, or perf_analyzer's input-data JSON (payloads only).

* JSONL: one ``{"t": seconds, "inputs": {name: {"shape", "dtype", "data"}}}`` per line; the times are
  honoured (shifted to start at 0, sorted).
* perf_analyzer: ``{"data": [{name: {"content"|"data", "shape"}}, ...]}``; no times, so the load's
  rate (or its concurrency) decides when they are sent.

Parsing only: :class:`gpt_triton.measure.arrivals.Replay` turns a trace into a window's schedule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from gpt_triton.core.errors import GptTritonError


def _array(spec: Any, name: str, dtype: str | None, where: str) -> np.ndarray:
    if isinstance(spec, dict):
        data = spec.get("data", spec.get("content"))
        shape = spec.get("shape")
        dtype = spec.get("dtype", dtype)
    else:
        data, shape = spec, None
    if data is None:
        raise GptTritonError(f"{where}: input {name!r} has no data/content; give {{\"shape\", \"data\"}}")
    # Upper case is a Triton dtype name (FP32, INT64); anything else is numpy's spelling.
    np_dtype = np.dtype(triton_to_np_dtype(dtype) if dtype and dtype.isupper() else (dtype or "float32"))
    arr = np.asarray(data, dtype=np_dtype)
    if shape is not None:
        try:
            arr = arr.reshape(shape)
        except ValueError as exc:
            raise GptTritonError(f"{where}: input {name!r} has {arr.size} values, not shape {shape}") from exc
    return arr


def load_replay(path: str | Path, dtypes: dict[str, str] | None = None) -> tuple[np.ndarray | None, list[dict[str, np.ndarray]]]:
    """Read a replay file -> (arrival offsets in s or None when it has no timestamps, payloads).

    ``dtypes`` (input name -> Triton or numpy dtype) fills in what perf_analyzer JSON leaves out.
    """
    path = Path(path)
    if not path.is_file():
        raise GptTritonError(f"replay file not found: {path}")
    text = path.read_text()
    dtypes = dtypes or {}
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None  # JSONL: several documents, not one
    if isinstance(whole, dict) and "data" in whole:  # perf_analyzer input-data JSON
        payloads = [
            {name: _array(spec, name, dtypes.get(name), str(path)) for name, spec in entry.items()}
            for entry in whole["data"]
        ]
        if not payloads:
            raise GptTritonError(f"replay file {path} has an empty \"data\" list")
        return None, payloads
    times: list[float] = []
    payloads = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
            times.append(float(row["t"]))
            inputs = row["inputs"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise GptTritonError(f"{where}: expected {{\"t\": seconds, \"inputs\": {{...}}}} per line ({exc})") from exc
        payloads.append({name: _array(spec, name, dtypes.get(name), where) for name, spec in inputs.items()})
    if not payloads:
        raise GptTritonError(f"replay file {path} has no requests")
    offsets = np.asarray(times) - min(times)
    order = np.argsort(offsets, kind="stable")
    return offsets[order], [payloads[i] for i in order]


def cycle_trace(offsets: np.ndarray, duration_s: float, min_requests: int) -> np.ndarray:
    """Repeat a trace until it covers ``duration_s`` (and ``min_requests``); arrival i is entry i mod len.

    One period is the trace's span plus one mean gap, so the seam between repeats looks like the trace.
    """
    gap = float(np.mean(np.diff(offsets))) if len(offsets) > 1 else 0.01
    period = float(offsets[-1]) + max(gap, 1e-3)
    out: list[np.ndarray] = []
    count, k = 0, 0
    while True:
        part = offsets + k * period
        part = part[part < duration_s] if count >= min_requests else part
        out.append(part)
        count += len(part)
        k += 1
        if (k * period >= duration_s and count >= min_requests) or len(part) == 0:
            break
    return np.concatenate(out)
