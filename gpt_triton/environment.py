"""Where an engine was tuned: runtime versions and device fingerprint, and whether it is still valid here.

A tuned engine is specific to its runtime version and its device (NVIDIA's own caveat for TensorRT's
tuner, and just as true on CPU: OpenVINO picks bf16 only where the CPU has it). ``compare_environment``
turns a recorded fingerprint into a verdict with reasons, so an engine never silently falls back to a
runtime's default behaviour on another machine.
"""

from __future__ import annotations

import copy
import functools
import math
import os
import platform
import shutil
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gpt_triton import __version__
from gpt_triton.core.records import Machine
from gpt_triton.tensorrt_support import compatible

# distribution name -> key in runtime_versions. Read from package metadata: importing the runtimes
# themselves (openvino, tensorrt) costs seconds and may initialise devices.
_DISTRIBUTIONS = {
    "numpy": "numpy",
    "onnx": "onnx",
    "onnxruntime": "onnxruntime",
    "onnxruntime-gpu": "onnxruntime",
    "openvino": "openvino",
    "tritonclient": "tritonclient",
    "nvidia-pytriton": "nvidia-pytriton",
    "tensorrt": "tensorrt",
    "tensorrt-cu12": "tensorrt",
}

# CPU flags that change which kernels a runtime picks (vector width, int8 dot products, bf16, AMX tiles).
_KERNEL_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c", "sse4", "vnni")

Status = Literal["valid", "rebuild", "retune", "incompatible"]
# Which runtime package an artifact's engine depends on.
_RUNTIME_PACKAGES = {"onnxruntime": ["onnxruntime"], "openvino": ["openvino"], "tensorrt": ["tensorrt"]}


class EnvVerdict(BaseModel):
    """``valid``: use as is. ``rebuild``: the engine must be rebuilt (same route) before it can be trusted.
    ``retune``: the device differs, so the route choice itself should be re-tuned (which also rebuilds).
    ``incompatible``: the engine cannot run here at all (a TensorRT plan on another TensorRT, GPU model or
    compute capability); no flag accepts it."""

    status: Status
    reasons: list[str] = Field(default_factory=list)


def runtime_versions() -> dict[str, str]:
    """Versions of python, the runtimes and tools an engine depends on; absent packages are left out."""
    versions = {"python": platform.python_version(), "gpt-triton": __version__}
    for dist, key in _DISTRIBUTIONS.items():
        if key in versions:
            continue
        try:
            versions[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _cpuinfo() -> tuple[str, list[str]]:
    """(CPU model, kernel-relevant flags) from /proc/cpuinfo; the first core speaks for all."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name") or fields.get("Model") or platform.processor() or platform.machine()
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    return model, sorted({f for f in flags if f.startswith(_KERNEL_FLAG_PREFIXES)})


def _gpus() -> list[dict[str, str]]:
    """name, compute capability and driver of each NVIDIA GPU via nvidia-smi; [] when there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "compute_capability": parts[1], "driver": parts[2]})
    return gpus


CGROUP_ROOT_ENV = "GPT_TRITON_CGROUP_ROOT"  # another cgroup directory to read (tests, unusual mounts)
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroup_dirs(root: Path) -> list[Path]:
    """This process's cgroup directories below ``root`` (from /proc/self/cgroup), then ``root`` itself
    (inside a container with its own cgroup namespace the two are the same)."""
    dirs: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _hier, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if path.startswith("/") and path != "/":
            rel = path.lstrip("/")
            if controllers == "":  # v2 unified
                dirs.append(root / rel)
            elif "cpu" in controllers.split(","):  # v1: cpu or cpu,cpuacct
                dirs += [root / controllers / rel, root / "cpu" / rel, root / "cpu,cpuacct" / rel]
    return dirs + [root, root / "cpu", root / "cpu,cpuacct"]


def _read_quota(directory: Path) -> float | None:
    """CPUs allowed by the CFS quota of one cgroup directory; None when unlimited or not there.

    v2: ``cpu.max`` holds "<quota> <period>" or "max <period>"; v1: ``cpu.cfs_quota_us`` (-1 = none) and
    ``cpu.cfs_period_us``."""
    try:
        quota_text, _, period_text = (directory / "cpu.max").read_text().strip().partition(" ")
        if quota_text == "max":
            return None
        return int(quota_text) / int(period_text or "100000")
    except (OSError, ValueError):
        pass
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text().strip())
        period = int((directory / "cpu.cfs_period_us").read_text().strip())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def cpu_quota(cgroup_root: Path | None = None) -> float | None:
    """The CPUs this process may use per scheduling period under its CFS quota (a Kubernetes CPU limit),
    or None without one. ``cgroup_root`` (or $GPT_TRITON_CGROUP_ROOT) replaces /sys/fs/cgroup."""
    override = cgroup_root or (Path(os.environ[CGROUP_ROOT_ENV]) if os.environ.get(CGROUP_ROOT_ENV) else None)
    if override is not None:
        return _read_quota(override)
    for directory in _own_cgroup_dirs(_CGROUP_ROOT):
        quota = _read_quota(directory)
        if quota is not None:
            return quota
    return None


def cpu_cores(cgroup_root: Path | None = None) -> int:
    """The cores this process can keep busy: its CPU affinity (a container's cpuset, exclusive cores under
    the static CPU manager) capped by its CFS quota rounded up (a CPU limit throttles past it, which
    sched_getaffinity does not show)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota(cgroup_root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota - 1e-9)))
    return cores


@functools.lru_cache(maxsize=1)
def _device() -> dict[str, Any]:
    cpu, flags = _cpuinfo()
    # The cores this process may use (a container's cpuset and CPU limit), not the host's count.
    device = {"cpu": cpu, "arch": platform.machine(), "cpu_flags": flags, "cores": cpu_cores(), "gpus": _gpus()}
    quota = cpu_quota()
    if quota is not None:
        device["cpu_quota"] = round(quota, 3)
    return device


def device_fingerprint() -> dict[str, Any]:
    """CPU model, kernel-relevant flags, arch, cores; the GPUs when nvidia-smi exists.

    Probed once per process (nvidia-smi takes a while); callers get their own copy to modify.
    """
    return copy.deepcopy(_device())


def machine() -> Machine:
    device = device_fingerprint()
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    gpus = device["gpus"]
    return Machine(
        hostname=socket.gethostname(),
        cpu=device["cpu"],
        cores=device["cores"],
        memory_bytes=memory,
        gpu=", ".join(g["name"] for g in gpus) or None,
        runtime_versions=runtime_versions(),
        extra={"arch": device["arch"], "cpu_flags": device["cpu_flags"], "gpus": gpus},
    )


def environment_fingerprint() -> dict[str, Any]:
    """runtime versions + device, stored in provenance and tuning-cache keys."""
    return {"runtime_versions": runtime_versions(), "device": device_fingerprint()}


def _runtime_reasons(recorded: dict[str, Any], current: dict[str, Any], runtime: str) -> list[str]:
    old_versions: dict[str, str] = recorded.get("runtime_versions") or {}
    new_versions: dict[str, str] = current.get("runtime_versions") or {}
    # Unknown runtime: any runtime's change may matter, so check them all.
    packages = _RUNTIME_PACKAGES.get(runtime, sorted({p for ps in _RUNTIME_PACKAGES.values() for p in ps}))
    reasons = []
    for package in packages:
        old, new = old_versions.get(package), new_versions.get(package)
        if old == new:
            continue
        if new is None:
            reasons.append(f"{package} {old} was used to build this engine but is not installed here")
        elif old is None:
            if runtime in _RUNTIME_PACKAGES:
                reasons.append(f"no {package} version was recorded (now {new}): rebuild to know the engine matches")
        else:
            reasons.append(
                f"{package} changed {old} -> {new}: tuned options may be ignored or behave differently "
                "(the engine could silently run with default behaviour); rebuild and re-validate"
            )
    return reasons


def tensorrt_fingerprint(builder: str | None, gpus: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """What a TensorRT plan is tied to, for its provenance: the builder's TensorRT version and the GPU it
    was built on (name, compute capability, driver; the first GPU nvidia-smi lists unless ``gpus`` is given)."""
    gpus = device_fingerprint()["gpus"] if gpus is None else gpus
    return {"version": builder, "gpu": dict(gpus[0]) if gpus else None}


def _same_tensorrt(built: str, served: str) -> bool:
    try:
        return compatible(built, served)
    except ValueError:  # a version without major.minor.patch: only an exact match is known to load
        return built == served


def plan_verdict(recorded: dict[str, Any], serving_tensorrt: str | None, gpus: list[dict[str, str]]) -> EnvVerdict:
    """Whether a TensorRT plan with provenance ``recorded`` (:func:`tensorrt_fingerprint`) runs on the
    TensorRT ``serving_tensorrt`` and the first of ``gpus`` here.

    ``incompatible`` (it cannot load, or may not: TensorRT refuses a plan from another version or compute
    capability, and warns that one built on another GPU model "is likely to affect performance or even
    cause errors") unless the TensorRT version, GPU model and compute capability all match; a changed
    driver alone means ``rebuild``. Unknown is never taken for a match.
    """
    refuse: list[str] = []
    built, old = recorded.get("version"), recorded.get("gpu")
    if not built:
        refuse.append("no TensorRT version was recorded for this plan: rebuild it where it will serve")
    elif not serving_tensorrt:
        refuse.append("which TensorRT serves here is unknown: pass --serving-image (an image the support table "
                      "lists) or --tensorrt-version")
    elif not _same_tensorrt(str(built), serving_tensorrt):
        refuse.append(f"plan built by TensorRT {built}, this Triton runs TensorRT {serving_tensorrt}: a plan loads only "
                      "on the TensorRT that built it; rebuild it with that TensorRT")
    if not old:
        refuse.append("no GPU was recorded for this plan: rebuild and re-tune on this GPU")
    elif not gpus:
        refuse.append("no NVIDIA GPU here: a TensorRT plan cannot run")
    else:
        new = gpus[0]
        if old.get("compute_capability") != new.get("compute_capability"):
            refuse.append(f"compute capability changed {old.get('compute_capability')} -> "
                          f"{new.get('compute_capability')}: TensorRT plans are tied to it and will not load")
        if old.get("name") != new.get("name"):
            refuse.append(f"GPU changed {old.get('name')} -> {new.get('name')}: a plan is built and tuned for one "
                          "GPU model; rebuild and re-tune on this one")
        if not refuse and old.get("driver") != new.get("driver"):
            return EnvVerdict(status="rebuild", reasons=[
                f"GPU driver changed {old.get('driver')} -> {new.get('driver')}: rebuild the plan"])
    if refuse:
        return EnvVerdict(status="incompatible", reasons=refuse)
    return EnvVerdict(status="valid", reasons=[])


def _cpu_reasons(old: dict[str, Any], new: dict[str, Any], runtime: str) -> list[str]:
    reasons = []
    if old.get("cpu") != new.get("cpu"):
        reasons.append(f"CPU changed {old.get('cpu')!r} -> {new.get('cpu')!r}: routes were tuned for the old CPU")
    if old.get("arch") and old.get("arch") != new.get("arch"):
        reasons.append(f"architecture changed {old.get('arch')} -> {new.get('arch')}")
    lost = sorted(set(old.get("cpu_flags") or []) - set(new.get("cpu_flags") or []))
    gained = sorted(set(new.get("cpu_flags") or []) - set(old.get("cpu_flags") or []))
    if lost:
        text = f"CPU lacks {', '.join(lost)} that the tuning machine had: kernels fall back to slower paths"
        if runtime == "openvino" and any("bf16" in f or f.startswith("amx") for f in lost):
            text += "; OpenVINO's default bf16 inference precision silently becomes fp32 here"
        reasons.append(text)
    if gained:
        reasons.append(f"CPU adds {', '.join(gained)}: faster routes may exist")
    if old.get("cores") and old.get("cores") != new.get("cores"):
        reasons.append(f"cores changed {old.get('cores')} -> {new.get('cores')}: thread and instance settings were tuned for {old.get('cores')}")
    return reasons


def compare_environment(recorded: dict[str, Any], current: dict[str, Any], runtime: str) -> EnvVerdict:
    """Verdict for an artifact of ``runtime`` tuned in ``recorded`` and now in ``current``.

    Severity: retune > rebuild > valid (re-tuning builds new engines anyway); every reason is listed.
    """
    if not recorded or "device" not in recorded:
        return EnvVerdict(status="retune", reasons=["no environment was recorded for this version: re-tune here"])
    old_device: dict[str, Any] = recorded.get("device") or {}
    new_device: dict[str, Any] = current.get("device") or {}
    if runtime == "tensorrt":  # the CPU does not matter to a plan; its TensorRT and GPU decide
        old_gpus = old_device.get("gpus") or []
        trt = tensorrt_fingerprint((recorded.get("runtime_versions") or {}).get("tensorrt"), old_gpus)
        return plan_verdict(trt, (current.get("runtime_versions") or {}).get("tensorrt"), new_device.get("gpus") or [])
    rebuild = _runtime_reasons(recorded, current, runtime)
    retune = _cpu_reasons(old_device, new_device, runtime)
    if retune:
        return EnvVerdict(status="retune", reasons=retune + rebuild)
    if rebuild:
        return EnvVerdict(status="rebuild", reasons=rebuild)
    return EnvVerdict(status="valid", reasons=[])
