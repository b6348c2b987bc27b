"""Isolated builds: every route is built in a fresh child interpreter with a timeout and a memory limit.

The memory limit is the child's address space (RLIMIT_AS) for CPU families; for GPU families (``device ==
"gpu"``) it is their resident memory, watched from here: CUDA reserves a large virtual address range at start-up,
which any address-space cap of a few GB makes fail, and Linux does not enforce RLIMIT_RSS at all.

A child killed by a signal, one that runs past ``build_timeout_s`` and one that raises all mark their
candidates ``crashed`` with the reason, and the run goes on (TensorRT's tuner forks one child per route for
the same reason: compilers crash). Work is shared:

* a graph rewrite is built once and is the source model of every compiler route over it;
* compiler routes that differ only in knobs that change runtime options (not files) share one build,
  and candidates that differ only in serving knobs share one artifact;
* builds whose files come out byte-identical are stored once; a later candidate whose files *and* runtime
  options equal an earlier one's is marked ``BuildCost.cached`` and points at the same artifact.

Each build writes into a temporary directory that is renamed into place only when complete.
Run as ``python -m gpt_triton.build JOB.json`` in the child.

A child never outlives the tuner: it asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``)
and then removes its temp directory and job files and kills its process group (compilers' workers too); its
own alarm ends it shortly after ``build_timeout_s`` even if the parent is stopped and cannot enforce the
timeout. Files a killed child still left (``.tmp-*`` of a dead process) are removed by the next build in the
same run directory. The child gets no signing key: only promotion signs.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gpt_triton.core.model_info import request_batch
from gpt_triton.core.outcomes import BuildOutcome
from gpt_triton.core.records import BuildCost, Candidate
from gpt_triton.core.routes import Artifact, BuildContext, Route
from gpt_triton.core.spec import SearchSpec
from gpt_triton.routes import FAMILIES, ServingFamily
from gpt_triton.routes._base import RouteFamily
from gpt_triton.routes._common import files_sha256, full_knobs
from gpt_triton.tuning_cache import TuningCache

_POLL_S = 0.05  # how often the parent checks a child; builds take seconds to minutes
# The signing key's environment (gpt_triton.promote.signing.KEY_ENV / KEY_FILE_ENV; build may not import
# promote): a build child runs compilers and user plugins and has no use for it.
SECRET_ENV = ("GPT_TRITON_SIGNING_KEY", "GPT_TRITON_SIGNING_KEY_FILE")
# The child's own alarm fires this long after the parent's deadline: the parent normally acts first.
_CHILD_TIMEOUT_GRACE_S = 30
_PR_SET_PDEATHSIG = 1
# Names of a build's temp directory and job files: .tmp-<out>-<pid>[.job.json|.result.json[.part]].
_TEMP_NAME = re.compile(r"^\.tmp-.+-(\d+)(\.job\.json|\.result\.json(\.part)?)?$")
_REUSABLE = {"built", "deployed", "measured", "infeasible", "failed"}


@dataclass
class _ChildResult:
    artifact: Artifact | None
    reason: str | None
    seconds: float
    peak_rss_bytes: int


def _class_path(family: RouteFamily) -> str:
    cls = type(family)
    return f"{cls.__module__}:{cls.__qualname__}"


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _describe_exit(returncode: int, timed_out: bool, spec: SearchSpec, error: str | None, log: Path,
                   over_rss: int = 0) -> str:
    if timed_out:
        return f"timed out after {spec.build_timeout_s:g} s"
    if over_rss:
        return (f"killed: resident memory reached {over_rss / 2**20:.0f} MB, above the {spec.build_memory_mb} MB "
                "limit (raise search.build_memory_mb)")
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        hint = f" (possibly the {spec.build_memory_mb} MB memory limit)" if name in ("SIGKILL", "SIGABRT") else ""
        return f"killed by {name}{hint}"
    if error:
        if error.startswith("MemoryError"):
            error += f" (hit the {spec.build_memory_mb} MB memory limit; raise search.build_memory_mb)"
        return error
    tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:] if log.exists() else []
    return f"exited with code {returncode}" + (f": {tail[0][:200]}" if tail else "")


def run_isolated(family: RouteFamily, route: Route, context: BuildContext, out_dir: Path, spec: SearchSpec, log: Path) -> _ChildResult:
    """Build one route in a child interpreter; the result is renamed to ``out_dir`` only when complete."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".tmp-{out_dir.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    job = tmp.parent / f"{tmp.name}.job.json"
    result = tmp.parent / f"{tmp.name}.result.json"
    job.write_text(json.dumps({
        "family": _class_path(family), "route": route.model_dump(), "context": context.model_dump(),
        "out_dir": str(tmp), "result": str(result), "memory_mb": spec.build_memory_mb,
        "limit_address_space": family.device == "cpu", "parent_pid": os.getpid(),
        "timeout_s": spec.build_timeout_s + _CHILD_TIMEOUT_GRACE_S,
    }))
    env = {name: value for name, value in os.environ.items() if name not in SECRET_ENV}
    # The child must import what the parent could (a test's family, an editable checkout).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpt_triton.build", str(job)], stdout=log_file, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        timed_out = False
        over_rss = 0
        rss_limit = spec.build_memory_mb * 2**20 if family.device == "gpu" else 0
        deadline = started + spec.build_timeout_s
        try:
            while True:
                # wait4 rather than Popen.wait: it returns this child's own peak RSS.
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if rss_limit:
                    resident = _tree_rss(proc.pid)
                    over_rss = resident if resident > rss_limit else 0
                timed_out = not over_rss and time.monotonic() > deadline
                if timed_out or over_rss:
                    _kill_group(proc.pid)
                    pid, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(_POLL_S)
        except BaseException:  # Ctrl-C reaches only us (the child has its own session): stop it too
            _kill_group(proc.pid)
            os.wait4(proc.pid, 0)
            proc.returncode = -signal.SIGKILL
            shutil.rmtree(tmp, ignore_errors=True)
            for leftover in (job, result, result.with_name(result.name + ".part")):
                leftover.unlink(missing_ok=True)
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        _kill_group(proc.pid)  # grandchildren a compiler may have left behind
    seconds = time.monotonic() - started
    peak = int(usage.ru_maxrss) * 1024  # kilobytes on Linux
    payload = json.loads(result.read_text()) if result.exists() else {}
    try:
        if proc.returncode == 0 and not timed_out and "artifact" in payload:
            if out_dir.exists():  # a stale build from an earlier run without a cache
                shutil.rmtree(out_dir)
            tmp.rename(out_dir)
            artifact = Artifact.model_validate(payload["artifact"])
            if Path(artifact.directory) == tmp:
                artifact.directory = str(out_dir)
            return _ChildResult(artifact, None, seconds, peak)
        reason = _describe_exit(proc.returncode, timed_out, spec, payload.get("error"), log, over_rss)
        return _ChildResult(None, reason, seconds, peak)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        job.unlink(missing_ok=True)
        result.unlink(missing_ok=True)
        result.with_name(result.name + ".part").unlink(missing_ok=True)


def remove_stale_temp(directory: Path) -> list[str]:
    """Remove build temp directories and job files whose process is gone (a tuner killed mid-build)."""
    removed: list[str] = []
    if not directory.is_dir():
        return removed
    for entry in directory.iterdir():
        match = _TEMP_NAME.match(entry.name)
        if match is None or psutil.pid_exists(int(match.group(1))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed


def _tree_rss(pid: int) -> int:
    """Resident bytes of a build child and every process it started (compilers fork workers)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:  # already gone: wait4 will say how it ended
        return 0
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _restore(candidate: Candidate, cache: TuningCache | None) -> BuildOutcome | None:
    """Take a candidate's build from the cache when its files are still there and unchanged."""
    previous = cache.previous.get(candidate.id) if cache else None
    if previous is None:
        return None
    if previous.status == "crashed":
        return BuildOutcome(candidate_id=candidate.id, status="crashed", reason=previous.reason, build=previous.build)
    artifact = previous.artifact
    if previous.status not in _REUSABLE or artifact is None:
        return None
    directory = Path(artifact.directory)
    if not all((directory / f).is_file() for f in artifact.files) or files_sha256(directory, artifact.files) != artifact.sha256:
        return None
    return BuildOutcome(candidate_id=candidate.id, status="built", artifact=artifact,
                        build=previous.build.model_copy(update={"cached": True}))


def build_candidates(
    candidates: Sequence[Candidate], context: BuildContext, work_dir: Path, spec: SearchSpec,
    cache: TuningCache | None = None, families: Mapping[str, RouteFamily] = FAMILIES,
) -> Iterator[BuildOutcome]:
    """Build every planned candidate: one outcome each, as soon as it is decided (those the tuning cache
    restores first, then the rest in order). Candidates are read, never changed. Never raises for a build."""
    work_dir = Path(work_dir)
    artifacts, logs = work_dir / "artifacts", work_dir / "logs"
    remove_stale_temp(artifacts)
    if context.cache_dir is None:  # caches builds share (TensorRT's timing cache) live beside the artifacts
        context = context.model_copy(update={"cache_dir": str(artifacts)})
    todo: list[Candidate] = []
    ready: list[tuple[Candidate, Artifact]] = [
        (c, c.artifact) for c in candidates if c.status not in ("planned", "crashed") and c.artifact is not None]
    for candidate in candidates:
        if candidate.status != "planned":
            continue
        restored = _restore(candidate, cache)
        if restored is None:
            todo.append(candidate)
            continue
        if restored.artifact is not None:
            ready.append((candidate, restored.artifact))
        yield restored

    shared = _Shared()
    for candidate, artifact in ready:
        # Builds restored from the cache are reused by new routes with the same files (a resumed run).
        if candidate.family in families:
            key = _build_key(candidate, families[candidate.family], context, families)
            shared.builds.setdefault(key, _ChildResult(artifact, None, 0.0, 0))
            shared.stored.setdefault(artifact.sha256, artifact.directory)
            shared.seen.add((artifact.sha256, json.dumps(artifact.runtime_options, sort_keys=True)))
    for candidate in todo:
        yield _build_one(candidate, families, context, artifacts, logs, spec, shared)


@dataclass
class _Shared:
    """What one call's builds share, so identical work is done and stored once."""

    graph_sources: dict[str, _ChildResult] = field(default_factory=dict)  # graph route key -> rewrite
    graph_cost_charged: set[str] = field(default_factory=set)  # a rewrite's cost goes to its first user
    builds: dict[str, _ChildResult] = field(default_factory=dict)  # build key -> child result
    stored: dict[str, str] = field(default_factory=dict)  # files sha256 -> directory: identical builds stored once
    seen: set[tuple[str, str]] = field(default_factory=set)  # (files sha256, runtime options): later ones are cached


def _build_one(
    candidate: Candidate, families: Mapping[str, RouteFamily], context: BuildContext, artifacts: Path, logs: Path,
    spec: SearchSpec, shared: _Shared,
) -> BuildOutcome:
    graph_sources, graph_cost_charged = shared.graph_sources, shared.graph_cost_charged
    builds, stored, seen = shared.builds, shared.stored, shared.seen
    family = families[candidate.family]
    cost = BuildCost()
    graph_key = candidate.graph.key() if candidate.graph else ""
    build_context = context
    if candidate.graph is not None:
        if graph_key not in graph_sources:
            graph_family = families[candidate.graph.family]
            out = artifacts / f"graph-{_digest(graph_key, context.source_model or context.model.path)}"
            graph_sources[graph_key] = run_isolated(graph_family, candidate.graph, context, out, spec, logs / f"{out.name}.log")
        graph = graph_sources[graph_key]
        if graph.artifact is None:
            return BuildOutcome(candidate_id=candidate.id, status="crashed", reason=f"graph rewrite failed: {graph.reason}",
                                build=cost)
        if graph_key not in graph_cost_charged:
            graph_cost_charged.add(graph_key)
            cost.seconds, cost.peak_rss_bytes = graph.seconds, graph.peak_rss_bytes
        entry = Path(graph.artifact.directory) / graph.artifact.files[0]
        build_context = context.model_copy(update={"source_model": str(entry)})
    batch = _serving_batch(candidate, family, context, families)
    if batch is not None:
        build_context = build_context.model_copy(update={"max_batch_size": batch[0], "opt_batch_size": batch[1]})
    build_key = _build_key(candidate, family, context, families)
    if build_key not in builds:
        out = artifacts / f"{candidate.family}-{build_key}"
        child = run_isolated(family, candidate.route, build_context, out, spec, logs / f"{out.name}.log")
        builds[build_key] = child
        if child.artifact is not None:
            same = stored.get(child.artifact.sha256)
            if same is not None and same != child.artifact.directory:
                shutil.rmtree(child.artifact.directory, ignore_errors=True)
                child.artifact.directory = same
            stored.setdefault(child.artifact.sha256, child.artifact.directory)
        cost.seconds += child.seconds
        cost.peak_rss_bytes = max(cost.peak_rss_bytes, child.peak_rss_bytes)
    child = builds[build_key]
    if child.artifact is None:
        return BuildOutcome(candidate_id=candidate.id, status="crashed", reason=child.reason, build=cost)
    # The files may be shared with a route that differs only in runtime options: take this route's own.
    runtime_options = family.runtime_options(candidate.route, context.model)
    if runtime_options is None:
        runtime_options = child.artifact.runtime_options
    artifact = child.artifact.model_copy(update={"route": candidate.route, "runtime_options": runtime_options})
    identity = (child.artifact.sha256, json.dumps(runtime_options, sort_keys=True))
    cost.cached = identity in seen  # an earlier candidate already has this exact artifact
    seen.add(identity)
    return BuildOutcome(candidate_id=candidate.id, status="built", artifact=artifact, build=cost)


def _serving_batch(candidate: Candidate, family: RouteFamily, context: BuildContext,
                   families: Mapping[str, RouteFamily]) -> tuple[int, int] | None:
    """(max batch, opt batch) the candidate's serving route needs of a ``batch_in_build`` family's files; None
    for other families.

    max: what deploy writes as config.pbtxt's max_batch_size (the engine must take it). opt, the batch the
    engine's kernels are timed at, is the batch the server will mostly run: without the dynamic batcher every
    request runs as sent (the request's batch); with it, the largest preferred batch size the batcher aims for,
    else max_batch_size, which it fills toward under load (where throughput is measured)."""
    if not family.batch_in_build:
        return None
    model = context.model
    batch = request_batch(context.shapes)
    top = ServingFamily.resolved_max_batch_size(candidate.serving, model, batch)
    if top <= 0:
        return 0, 0
    serving = families.get("serving")
    knobs = full_knobs(serving, candidate.serving, model) if serving is not None else dict(candidate.serving.knobs)
    opt = batch
    if knobs.get("dynamic_batching"):
        preferred = [int(b) for b in knobs.get("preferred_batch_sizes") or [] if 0 < int(b) <= top]
        opt = max(preferred) if preferred else top
    return top, min(max(opt, 1), top)


def _build_key(candidate: Candidate, family: RouteFamily, context: BuildContext,
               families: Mapping[str, RouteFamily] = FAMILIES) -> str:
    """What decides a build's files: family, file-changing knobs, graph route and source model; and the serving
    batch for families whose files depend on it (``batch_in_build``)."""
    knobs = full_knobs(family, candidate.route, context.model)
    shared = family.file_knobs
    file_part = {k: v for k, v in knobs.items() if shared is None or k in shared}
    graph_key = candidate.graph.key() if candidate.graph else ""
    parts: list[Any] = [candidate.family, file_part, graph_key, context.source_model or context.model.path]
    batch = _serving_batch(candidate, family, context, families)
    if batch is not None:
        parts.append({"max_batch_size": batch[0], "opt_batch_size": batch[1]})
    return _digest(*parts)


# -- the child ----------------------------------------------------------------------------------------
def _die_with_parent(job: dict[str, Any], job_path: str) -> None:
    """Make this build end when the tuner does, leaving no temp files nor processes behind.

    The kernel sends SIGTERM when the parent dies (Linux); the handler removes the temp directory and job
    files, then SIGKILLs the process group (this child and whatever a compiler started). ``alarm`` ends the
    child if the parent, alive but stopped, cannot enforce the timeout (default action: terminate, even
    inside native code)."""
    parent = int(job.get("parent_pid") or 0)

    def cleanup_and_die(signum: int, frame: object) -> None:
        shutil.rmtree(job["out_dir"], ignore_errors=True)
        for name in (job_path, job["result"], job["result"] + ".part"):
            with contextlib.suppress(OSError):
                os.unlink(name)
        os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGTERM, cleanup_and_die)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if parent and os.getppid() != parent:  # the tuner died before the request took effect
        cleanup_and_die(signal.SIGTERM, None)
    if job.get("timeout_s"):
        signal.alarm(max(1, math.ceil(float(job["timeout_s"]))))


def _child(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    _die_with_parent(job, job_path)
    if job.get("limit_address_space", True):  # GPU families: the parent watches resident memory instead
        limit = int(job["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = Path(job["result"])
    try:
        module_name, _, qualname = job["family"].partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        family: RouteFamily = obj()
        route = Route.model_validate(job["route"])
        context = BuildContext.model_validate(job["context"])
        artifact = family.build(route, context, Path(job["out_dir"]))
        payload: dict[str, Any] = {"artifact": artifact.model_dump()}
        code = 0
    except BaseException as exc:  # the parent turns this into the candidate's crash reason
        traceback.print_exc()
        message = " ".join(str(exc).split())[:500]
        payload = {"error": f"{type(exc).__name__}: {message}" if message else type(exc).__name__}
        code = 1
    tmp = result.with_name(result.name + ".part")
    tmp.write_text(json.dumps(payload))
    tmp.replace(result)
    return code


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
