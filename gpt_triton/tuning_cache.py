"""The tuning cache: a JSON-lines file that lets an interrupted tuning run resume (trtexec's ``--continue``).

Line 1 is a header ``{tool_version, model_sha256, environment, spec_digest}``; every following line is one
Candidate record, appended each time its state changes (the last line for an id wins). Resuming needs a
matching header: results from another model, other runtime versions or another CPU would be wrong here.
A last line cut short by a kill is dropped; corruption anywhere else is an error.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, Field, ValidationError

from gpt_triton import __version__
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.outcomes import ReuseOutcome
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import TuneSpec

_RUNTIMES = ("onnxruntime", "openvino", "onnx", "nncf", "onnxconverter-common", "onnxslim", "onnxsim", "tensorrt")


class CacheHeader(BaseModel):
    tool_version: str
    model_sha256: str
    environment: dict[str, str] = Field(default_factory=dict)
    spec_digest: str = ""


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, str]:
    """Runtime versions and CPU: what a cached build or timing depends on besides the model."""
    env = {"python": platform.python_version(), "cpu": _cpu(), "cores": str(os.cpu_count() or 0)}
    for name in _RUNTIMES:
        try:
            env[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return env


def spec_digest(spec: TuneSpec) -> str:
    """Digest of the spec sections that change what a recorded build or score means.

    ``search`` is left out on purpose: raising max_builds or switching mode must be able to resume. So are
    ``measure.remeasure_servers``, ``measure.burn_in_s``, ``measure.gain_statistic`` and
    ``measure.remeasure_in_turns``: they change only
    the stages after the search
    (the finalists' pair server, the re-measure), which always run again (and a cache written before the
    fields existed keeps its digest); and ``measure.repeat_crowded``, which keeps another tenant's load out
    of a score, not what the score measures.
    """
    relevant = spec.model_dump(mode="json", include={"families", "measure", "objective", "accuracy"},
                               exclude={"measure": {"remeasure_servers", "burn_in_s", "repeat_crowded", "gain_statistic",
                                                    "remeasure_in_turns"}})
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def make_header(model: ModelInfo, spec: TuneSpec) -> CacheHeader:
    return CacheHeader(tool_version=__version__, model_sha256=model.sha256, environment=environment(), spec_digest=spec_digest(spec))


def _mismatch(path: Path, old: CacheHeader, new: CacheHeader) -> str | None:
    if old.model_sha256 != new.model_sha256:
        return f"it was made for model sha256 {old.model_sha256[:12]}... and this model is {new.model_sha256[:12]}..."
    if old.tool_version != new.tool_version:
        return f"it was made by gpt-triton {old.tool_version} and this is {new.tool_version}"
    changed = sorted(k for k in set(old.environment) | set(new.environment) if old.environment.get(k) != new.environment.get(k))
    if changed:
        what = ", ".join(f"{k} {old.environment.get(k, 'absent')} -> {new.environment.get(k, 'absent')}" for k in changed)
        return f"the environment changed ({what})"
    if old.spec_digest != new.spec_digest:
        return "the spec's families, measure, objective or accuracy sections changed"
    return None


class TuningCache:
    """Append-only record of candidates; ``previous`` holds what a resumed run already did, by id."""

    def __init__(self, path: Path, header: CacheHeader, previous: dict[str, Candidate], handle: IO[str]) -> None:
        self.path = path
        self.header = header
        self.previous = previous
        self._handle = handle

    @classmethod
    def open(
        cls, path: str | Path, header: CacheHeader | ModelInfo, spec: TuneSpec | bool | None = None, resume: bool | None = None
    ) -> TuningCache:
        """Start a new cache (``resume=False``, replacing any file) or continue a matching one.

        Called as ``open(path, header, resume)`` or, building the header here, ``open(path, model, spec, resume=...)``.
        """
        if isinstance(spec, bool):
            resume, spec = spec, None
        if isinstance(header, ModelInfo):
            header = make_header(header, spec if isinstance(spec, TuneSpec) else TuneSpec())
        resume = bool(resume)
        path = Path(path)
        if resume and path.exists():
            previous, good_bytes = cls._read(path, header)
            with open(path, "r+b") as raw:  # drop a last line cut short by a kill before appending
                raw.truncate(good_bytes)
            return cls(path, header, previous, open(path, "a", encoding="utf-8"))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        tmp.write_text(header.model_dump_json() + "\n", encoding="utf-8")
        tmp.replace(path)
        return cls(path, header, {}, open(path, "a", encoding="utf-8"))

    @staticmethod
    def _read(path: Path, header: CacheHeader) -> tuple[dict[str, Candidate], int]:
        data = path.read_bytes()
        lines = data.split(b"\n")
        try:
            old = CacheHeader.model_validate_json(lines[0])
        except ValidationError:
            raise GptTritonError(f"tuning cache {path} has no valid header line; use a new cache file") from None
        why = _mismatch(path, old, header)
        if why:
            raise GptTritonError(f"cannot resume tuning cache {path}: {why}; use a new cache file or run without --resume")
        previous: dict[str, Candidate] = {}
        good = len(lines[0]) + 1
        body = lines[1:]
        for index, line in enumerate(body):
            if not line.strip():
                good += len(line) + (1 if index < len(body) - 1 else 0)
                continue
            try:
                candidate = Candidate.model_validate_json(line)
            except ValidationError:
                if index >= len(body) - 2 and not any(rest.strip() for rest in body[index + 1 :]):
                    break  # the last record, cut short when a run was killed mid-write
                raise GptTritonError(f"tuning cache {path} is corrupt at line {index + 2}; use a new cache file") from None
            previous[candidate.id] = candidate
            good += len(line) + 1
        return previous, min(good, len(data))

    def record(self, candidate: Candidate) -> None:
        """Append the candidate's current state; flushed and synced so a kill loses at most this line."""
        self._handle.write(candidate.model_dump_json() + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def get(self, candidate_id: str) -> Candidate | None:
        return self.previous.get(candidate_id)

    def reused(self, candidates: Sequence[Candidate]) -> list[ReuseOutcome]:
        """``--resume``: built candidates whose earlier screening and measurement this cache holds keep
        them (measured, or infeasible with its accuracy result) instead of being measured again; the final
        re-measurement on a fresh server still checks any gain they claim."""
        outcomes: list[ReuseOutcome] = []
        for candidate in candidates:
            previous = self.previous.get(candidate.id)
            if previous is None or candidate.status != "built":
                continue
            if previous.status == "measured" and previous.latency:
                outcomes.append(ReuseOutcome(candidate_id=candidate.id, status="measured", reason=previous.reason,
                                             latency=previous.latency, accuracy=previous.accuracy,
                                             isolated=previous.isolated))
            elif previous.status == "infeasible" and previous.accuracy is not None:
                outcomes.append(ReuseOutcome(candidate_id=candidate.id, status="infeasible", reason=previous.reason,
                                             accuracy=previous.accuracy))
        return outcomes

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> TuningCache:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
