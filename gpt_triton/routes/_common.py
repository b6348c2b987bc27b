"""Helpers shared by the route families: file digests, atomic copies, artifact assembly, calibration data.

The optional family hooks (``file_knobs``, ``conditional``, ``runtime_options``) are declared, with
their defaults, on :class:`~gpt_triton.routes._base.RouteFamily`.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gpt_triton.core.errors import GptTritonError
from gpt_triton.routes._base import Artifact, BuildContext, Route, RouteFamily, Runtime


def files_sha256(directory: str | Path, files: list[str]) -> str:
    """One digest over the files' bytes, in order (the Artifact.sha256 contract)."""
    digest = hashlib.sha256()
    for name in files:
        with open(Path(directory) / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def make_artifact(
    family: RouteFamily, runtime: Runtime, route: Route, directory: Path, files: list[str],
    runtime_options: dict[str, Any], notes: list[str] | None = None,
) -> Artifact:
    return Artifact(
        family=family.name, runtime=runtime, route=route, directory=str(directory), files=files,
        runtime_options=runtime_options, sha256=files_sha256(directory, files),
        size_bytes=sum((directory / f).stat().st_size for f in files), notes=notes or [],
    )


def source_model(context: BuildContext) -> Path:
    return Path(context.source_model or context.model.path)


def copy_file(src: Path, dst: Path) -> None:
    """Copy through a temp name so a killed build never leaves a half-written file under the final name."""
    tmp = dst.with_name(dst.name + ".part")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


def full_knobs(family: RouteFamily, route: Route, model: Any) -> dict[str, Any]:
    """The route's knobs with the family's defaults filled in (routes may leave knobs out)."""
    knobs = {k.name: k.default for k in family.knobs(model)}
    knobs.update(route.knobs)
    return knobs


def canonical(family: RouteFamily, knobs: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Reset knobs that do not apply (given their parent's value) to ``defaults``."""
    out = dict(knobs)
    for name, (parent, when) in family.conditional.items():
        if name in out and parent in out and out[parent] not in when:
            out[name] = defaults[name]
    return out


def iter_calibration(context: BuildContext, limit: int = 64) -> Iterator[dict[str, np.ndarray]]:
    """Per-request input feeds from ``calibration_npz`` (the tuning split; never the held-out split).

    The npz holds one stacked array per input: either [N, *request_shape] (a new leading axis) or the
    requests concatenated along the batch axis [N*b, ...]; both are accepted.
    """
    if not context.calibration_npz:
        raise GptTritonError("int8 calibration needs tuning inputs (BuildContext.calibration_npz) and none were given")
    path = Path(context.calibration_npz)
    if not path.is_file():
        raise GptTritonError(f"calibration data not found: {path}")
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    names = [t.name for t in context.model.inputs]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise GptTritonError(f"calibration data {path} lacks input(s) {missing}; it has {sorted(arrays)}")
    count = min(limit, *(len(arrays[n]) for n in names))
    for i in range(count):
        feed: dict[str, np.ndarray] = {}
        for tensor in context.model.inputs:
            array = arrays[tensor.name]
            want = np.dtype(tensor.dtype)
            sample = array[i] if array.ndim == len(tensor.dims) + 1 else array[i : i + 1]
            feed[tensor.name] = np.ascontiguousarray(sample, dtype=want)
        yield feed
