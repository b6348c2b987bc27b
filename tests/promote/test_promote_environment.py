"""Environment fingerprint and drift verdicts from constructed recorded fingerprints."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpt_triton.environment import (
    compare_environment,
    device_fingerprint,
    environment_fingerprint,
    machine,
    runtime_versions,
)


@pytest.fixture
def current() -> dict[str, Any]:
    return environment_fingerprint()


def _gpu_env(base: dict[str, Any], name: str, cc: str, driver: str) -> dict[str, Any]:
    env = copy.deepcopy(base)
    env["runtime_versions"]["tensorrt"] = "10.9.0"
    env["device"]["gpus"] = [{"name": name, "compute_capability": cc, "driver": driver}]
    return env


def test_fingerprint_describes_this_machine() -> None:
    versions = runtime_versions()
    assert {"python", "numpy", "onnxruntime", "openvino", "tritonclient", "gpt-triton"} <= set(versions)
    device = device_fingerprint()
    assert device["cores"] >= 1 and device["cpu"]
    assert all(f.startswith(("avx", "amx", "fma", "f16c", "sse4", "vnni")) for f in device["cpu_flags"])
    device["cpu"] = "mutated"  # callers get a copy
    assert device_fingerprint()["cpu"] != "mutated"
    record = machine()
    assert record.cores == device_fingerprint()["cores"] and record.memory_bytes > 0
    assert record.runtime_versions == versions


def test_same_environment_is_valid(current: dict[str, Any]) -> None:
    for runtime in ("onnxruntime", "openvino"):
        assert compare_environment(copy.deepcopy(current), current, runtime).status == "valid"


def test_runtime_version_change_means_rebuild_for_that_runtime_only(current: dict[str, Any]) -> None:
    recorded = copy.deepcopy(current)
    recorded["runtime_versions"]["onnxruntime"] = "1.17.0"
    verdict = compare_environment(recorded, current, "onnxruntime")
    assert verdict.status == "rebuild"
    assert any("onnxruntime changed 1.17.0 ->" in r and "default behaviour" in r for r in verdict.reasons)
    assert compare_environment(recorded, current, "openvino").status == "valid"
    # An unknown runtime cannot be narrowed down: any runtime change counts.
    assert compare_environment(recorded, current, "unknown").status == "rebuild"


def test_runtime_missing_here_means_rebuild(current: dict[str, Any]) -> None:
    here = copy.deepcopy(current)
    del here["runtime_versions"]["openvino"]
    verdict = compare_environment(copy.deepcopy(current), here, "openvino")
    assert verdict.status == "rebuild" and "not installed here" in verdict.reasons[0]


def test_different_cpu_means_retune(current: dict[str, Any]) -> None:
    recorded = copy.deepcopy(current)
    recorded["device"]["cpu"] = "Intel(R) Xeon(R) Platinum 8480+"
    recorded["device"]["cpu_flags"] = sorted(set(current["device"]["cpu_flags"]) | {"amx_bf16", "amx_tile"})
    recorded["runtime_versions"]["openvino"] = "2024.4.0"
    verdict = compare_environment(recorded, current, "openvino")
    assert verdict.status == "retune"
    text = " | ".join(verdict.reasons)
    assert "CPU changed" in text and "amx_bf16" in text
    assert "bf16 inference precision silently becomes fp32" in text  # no silent fallback to defaults
    assert "openvino changed 2024.4.0" in text  # rebuild reasons are listed too


def test_core_count_change_means_retune(current: dict[str, Any]) -> None:
    recorded = copy.deepcopy(current)
    recorded["device"]["cores"] = current["device"]["cores"] + 30
    verdict = compare_environment(recorded, current, "onnxruntime")
    assert verdict.status == "retune" and "cores changed" in verdict.reasons[0]


def test_gpu_verdicts(current: dict[str, Any]) -> None:
    here = _gpu_env(current, "Tesla T4", "7.5", "550.54")
    assert compare_environment(_gpu_env(current, "Tesla T4", "7.5", "550.54"), here, "tensorrt").status == "valid"

    driver = compare_environment(_gpu_env(current, "Tesla T4", "7.5", "535.104"), here, "tensorrt")
    assert driver.status == "rebuild" and "driver changed 535.104 -> 550.54" in driver.reasons[0]

    # A plan on another GPU model or compute capability cannot (or may not) load: refused, not drift.
    product = compare_environment(_gpu_env(current, "NVIDIA A10", "8.6", "550.54"), here, "tensorrt")
    assert product.status == "incompatible"
    assert any("GPU changed NVIDIA A10 -> Tesla T4" in r for r in product.reasons)
    assert any("compute capability changed 8.6 -> 7.5" in r for r in product.reasons)
    same_cc = compare_environment(_gpu_env(current, "NVIDIA A40", "7.5", "550.54"), here, "tensorrt")
    assert same_cc.status == "incompatible" and "GPU changed NVIDIA A40 -> Tesla T4" in same_cc.reasons[0]

    cpu_only = copy.deepcopy(current)
    cpu_only["runtime_versions"]["tensorrt"] = "10.9.0"
    gone = compare_environment(here, cpu_only, "tensorrt")
    assert gone.status == "incompatible" and "no NVIDIA GPU here" in gone.reasons[0]

    # Another TensorRT: the plan does not deserialize (build number included when both give it).
    other_trt = copy.deepcopy(here)
    other_trt["runtime_versions"]["tensorrt"] = "10.8.0"
    verdict = compare_environment(_gpu_env(current, "Tesla T4", "7.5", "550.54"), other_trt, "tensorrt")
    assert verdict.status == "incompatible" and "built by TensorRT 10.9.0, this Triton runs TensorRT 10.8.0" in verdict.reasons[0]

    # A CPU change does not matter to a GPU engine.
    other_cpu = _gpu_env(current, "Tesla T4", "7.5", "550.54")
    other_cpu["device"]["cpu"] = "another CPU"
    assert compare_environment(other_cpu, here, "tensorrt").status == "valid"


def test_missing_record_is_never_valid(current: dict[str, Any]) -> None:
    verdict = compare_environment({}, current, "onnxruntime")
    assert verdict.status == "retune" and "no environment was recorded" in verdict.reasons[0]
