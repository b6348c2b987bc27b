"""`cores` in the environment fingerprint reflects a container's CPU limit (the CFS quota), which
sched_getaffinity does not show: read from a fake cgroup directory, v2 and v1 layouts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpt_triton import environment
from gpt_triton.environment import cpu_cores, cpu_quota

AFFINITY = len(os.sched_getaffinity(0))


@pytest.fixture
def fresh_device() -> Iterator[None]:
    environment._device.cache_clear()
    yield
    environment._device.cache_clear()


@pytest.mark.parametrize(("cpu_max", "quota", "cores"), [
    ("50000 100000", 0.5, 1),     # 500m: one core, throttled
    ("100000 100000", 1.0, 1),
    ("150000 100000", 1.5, 2),    # a fraction of a core still runs on a second one
    ("800000 100000", 8.0, 8),    # capped by the cpuset / affinity below
    ("max 100000", None, None),   # no limit
])
def test_cgroup_v2_cpu_max(tmp_path: Path, cpu_max: str, quota: float | None, cores: int | None) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    assert cpu_quota(tmp_path) == quota
    assert cpu_cores(tmp_path) == (AFFINITY if cores is None else min(AFFINITY, cores))


def test_cgroup_v1_cfs_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_quota(tmp_path) is None
    (tmp_path / "cpu.cfs_quota_us").write_text("50000\n")
    assert cpu_quota(tmp_path) == 0.5 and cpu_cores(tmp_path) == 1


def test_unreadable_cgroup_means_no_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("garbage\n")
    assert cpu_quota(tmp_path) is None and cpu_cores(tmp_path) == AFFINITY


def test_fingerprint_records_the_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_device: None) -> None:
    """The drift check compares `cores`: a tune under a 1-CPU limit differs from serving under 4."""
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    monkeypatch.setenv("GPT_TRITON_CGROUP_ROOT", str(tmp_path))
    tuned = environment.environment_fingerprint()
    assert tuned["device"]["cores"] == 1 and tuned["device"]["cpu_quota"] == 1.0
    if AFFINITY > 1:
        environment._device.cache_clear()
        (tmp_path / "cpu.max").write_text("max 100000\n")
        served = environment.environment_fingerprint()
        verdict = environment.compare_environment(tuned, served, "onnxruntime")
        assert verdict.status == "retune" and any("cores changed 1 ->" in r for r in verdict.reasons)
