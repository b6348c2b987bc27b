"""The result bundle of a tuning pod: a tar.gz of report.json and the promoted version, and its reader.

Where it travels: the tuner writes it into its run directory on the shared volume
(``RUNS/<job>/<index>/result.tar.gz``, temp file + rename) and logs one pointer line with its sha256;
``gpt-triton k8s collect --from RUNS`` reads it there (a mount or copy of the PVC's runs/). Nothing large goes
through the log pipeline. Only with ``k8s run --log-bundle`` (clusters where nobody can read the volume) is
it also printed to the log as base64, capped at ``DEFAULT_MAX_BYTES`` (the kubelet rotates container logs at
``containerLogMaxSize``, 10 MiB by default); ``k8s collect`` without ``--from`` reads that fallback. A sha256
over the bytes detects a truncated or interleaved copy either way.

Log format of the fallback (one bundle per log; the last one wins)::

    ==> gpt-triton bundle v1 sha256=<hex> bytes=<n>
    <base64, 76 chars a line>
    <== gpt-triton bundle end
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError

BEGIN = "==> gpt-triton bundle v1"
END = "<== gpt-triton bundle end"
DEFAULT_MAX_BYTES = 6 * 1024 * 1024  # 8 MiB of base64: under the kubelet's 10 MiB log rotation
_BEGIN_RE = re.compile(re.escape(BEGIN) + r" sha256=([0-9a-f]{64}) bytes=(\d+)\s*$")
MANIFEST = "bundle.json"
RESULT_FILE = "result.tar.gz"  # in the run directory on the shared volume
POINTER = "==> gpt-triton result"


def _skip(name: str) -> bool:
    """Bytecode the python backend writes next to a served model: not part of the artifact."""
    return name == "__pycache__" or name.endswith(".pyc")


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def make_bundle(run_dir: Path, promoted_path: Path | None, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """A tar.gz of report.json (and the rest of the run's small files) plus the promoted version directory."""
    manifest: dict[str, Any] = {"run_dir": str(run_dir), "promoted_path": str(promoted_path) if promoted_path else None}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        report = run_dir / "report.json"
        if report.is_file():
            tar.add(report, arcname="report.json")
        artifact_bytes = 0
        if promoted_path is not None and promoted_path.exists():
            files = [p for p in sorted(promoted_path.rglob("*")) if p.is_file() and not _skip(p.name)] \
                if promoted_path.is_dir() else [promoted_path]
            artifact_bytes = sum(p.stat().st_size for p in files)
            # Compressed size is unknown until written; the raw size is a safe upper bound for the cap.
            if artifact_bytes <= max_bytes:
                tar.add(promoted_path, arcname="artifact",
                        filter=lambda info: None if _skip(Path(info.name).name) else info)
                manifest["artifact"] = "artifact"
            else:
                manifest["artifact"] = None
                manifest["artifact_omitted"] = (
                    f"{artifact_bytes} bytes exceeds the {max_bytes}-byte log bundle cap; copy it from the PVC"
                )
        manifest["artifact_bytes"] = artifact_bytes
        _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=2).encode())
    return buf.getvalue()


def format_bundle(data: bytes) -> str:
    text = base64.b64encode(data).decode()
    lines = [text[i : i + 76] for i in range(0, len(text), 76)]
    digest = hashlib.sha256(data).hexdigest()
    return "\n".join([f"{BEGIN} sha256={digest} bytes={len(data)}", *lines, END]) + "\n"


def parse_bundle(log: str) -> bytes | None:
    """The last complete bundle in a log, or None when the log has none. Raises when it is corrupt."""
    lines = log.splitlines()
    begin = None
    for i in range(len(lines) - 1, -1, -1):
        if _BEGIN_RE.match(lines[i].strip()):
            begin = i
            break
    if begin is None:
        return None
    match = _BEGIN_RE.match(lines[begin].strip())
    assert match is not None
    digest, size = match.group(1), int(match.group(2))
    body: list[str] = []
    for line in lines[begin + 1 :]:
        if line.strip() == END:
            break
        body.append(line.strip())
    else:
        raise GptTritonError("the result bundle in the pod log is truncated: the log was rotated or cut; copy the run directory from the PVC")
    try:
        data = base64.b64decode("".join(body), validate=True)
    except ValueError as exc:
        raise GptTritonError(f"the result bundle in the pod log is not valid base64 ({exc}); copy the run directory from the PVC") from exc
    if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
        raise GptTritonError("the result bundle in the pod log fails its checksum; copy the run directory from the PVC")
    return data


def extract_bundle(data: bytes, dest: Path) -> dict[str, Any]:
    """Unpack into ``dest`` (created); member paths are confined to it. Returns the bundle manifest."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        # The "data" filter refuses absolute paths, '..', links out of dest and device files.
        tar.extractall(dest, filter="data")
    manifest_path = dest / MANIFEST
    manifest: dict[str, Any] = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    return manifest


def write_result(run_dir: Path, data: bytes) -> Path:
    """Store the bundle as ``run_dir/result.tar.gz`` (temp file + fsync + rename: never half-written)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / RESULT_FILE
    tmp = run_dir / f".{RESULT_FILE}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(final)
    return final


def pointer_line(path: Path, data: bytes) -> str:
    """The one log line that says where the result is and which bytes it holds."""
    return f"{POINTER} {path} sha256={hashlib.sha256(data).hexdigest()} bytes={len(data)}\n"


def read_result(run_dir: Path) -> bytes | None:
    """The stored bundle of a run directory, or None when the run wrote none (not finished)."""
    path = run_dir / RESULT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise GptTritonError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.getmembers()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise GptTritonError(f"{path} is not a complete result bundle ({exc}); re-run or copy it again") from exc
    return data
