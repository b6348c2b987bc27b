"""Realistic RunReport objects for the report tests: 9 candidates over 3 compiler families, two load
levels, bootstrap intervals, some crashed/infeasible/failed-accuracy candidates, a re-measured gain."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.core.accuracy import AccuracyResult, OutputResult
from gpt_triton.core.measurements import (
    Interval,
    IsolatedStats,
    LatencyStats,
    LoadProfile,
    ServerBreakdown,
    WindowResult,
)
from gpt_triton.core.model_info import ModelInfo, TensorInfo
from gpt_triton.core.records import BuildCost, Candidate, DeployInfo, Gain, Machine, RunReport
from gpt_triton.core.routes import Route
from gpt_triton.core.spec import TuneSpec

LOADS = [LoadProfile(kind="concurrency", concurrency=1), LoadProfile(kind="concurrency", concurrency=4)]


def _interval(value: float, spread: float) -> Interval:
    return Interval(value=value, low=value * (1 - spread), high=value * (1 + spread))


def latency(base_ms: float, rng: random.Random, loads: list[LoadProfile] = LOADS) -> list[LatencyStats]:
    """Per-load stats whose windows scatter around ``base_ms``; more concurrency queues more."""
    out = []
    for load in loads:
        scale = 1.0 + 0.6 * (load.concurrency - 1)
        windows = []
        for _ in range(6):
            p50 = base_ms * scale * rng.uniform(0.95, 1.05)
            windows.append(WindowResult(
                duration_s=2.0, requests=200, errors=0, throughput=load.concurrency * 1000 / p50,
                p50_ms=p50, p90_ms=p50 * 1.2, p99_ms=p50 * rng.uniform(1.4, 1.8), mean_ms=p50 * 1.05,
            ))
        p50 = sum(w.p50_ms for w in windows) / len(windows)
        p99 = sum(w.p99_ms for w in windows) / len(windows)
        thr = sum(w.throughput for w in windows) / len(windows)
        out.append(LatencyStats(
            load=load, windows=windows, stable=True, p50_ms=_interval(p50, 0.03), p90_ms=_interval(p50 * 1.2, 0.04),
            p99_ms=_interval(p99, 0.06), mean_ms=_interval(p50 * 1.05, 0.03), throughput=_interval(thr, 0.03),
            server=ServerBreakdown(queue_ms=0.1 * scale, compute_infer_ms=base_ms * 0.8, success_count=1200, execution_count=1200),
        ))
    return out


def accuracy(margin: float, passed: bool = True, exceedances: int = 0, requests: int = 45) -> AccuracyResult:
    return AccuracyResult(
        split="tuning", requests=requests, passed=passed, exceedances=exceedances,
        exceedance_upper_bound=0.064 if exceedances == 0 else 0.3, min_margin=margin,
        outputs=[OutputResult(output="logits", metric="max_abs", tolerance=1e-3, worst=1e-3 * (1 - margin),
                              quantile=5e-4, margin=margin, exceedances=exceedances, requests=requests)],
    )


def candidate(cid: str, family: str, knobs: dict[str, Any], status: str, *, base_ms: float | None = None,
              margin: float = 0.9, passed: bool = True, reason: str | None = None, baseline: bool = False,
              serving: dict[str, Any] | None = None, graph: dict[str, Any] | None = None, build_s: float = 3.0,
              isolated_ms: float | None = None, rng: random.Random | None = None,
              loads: list[LoadProfile] = LOADS) -> Candidate:
    rng = rng or random.Random(cid)
    measured = status == "measured" and base_ms is not None
    return Candidate(
        id=cid, family=family, route=Route(family=family, knobs=knobs),
        graph=Route(family="onnxslim", knobs=graph) if graph else None,
        serving=Route(family="serving", knobs=serving or {"instances": 1}), is_baseline=baseline,
        status=status, reason=reason,  # type: ignore[arg-type]
        build=BuildCost(seconds=build_s, peak_rss_bytes=int(300e6 + build_s * 50e6), cached=build_s == 0),
        deploy=DeployInfo(model_name=f"m_{cid}", backend="python", adapter=True) if measured else None,
        latency=latency(base_ms, rng, loads) if measured and base_ms else [],
        accuracy=accuracy(margin, passed, 0 if passed else 7) if measured else None,
        isolated=IsolatedStats(single_request_ms=isolated_ms, profiler_op_sum_ms=isolated_ms * 0.8 if isolated_ms else None)
        if isolated_ms else None,
    )


def spec(**sections: Any) -> TuneSpec:
    """A run's spec from plain sections, validated as `gpt-triton tune` validates the YAML."""
    return TuneSpec.model_validate(sections)


def make_report(**overrides: Any) -> RunReport:
    rng = random.Random(7)
    cands = [
        candidate("c00", "ort", {"level": "basic"}, "measured", base_ms=4.0, margin=1.0, baseline=True, isolated_ms=3.1, rng=rng),
        candidate("c01", "ort", {"level": "all"}, "measured", base_ms=3.2, margin=0.95, isolated_ms=2.6, rng=rng),
        candidate("c02", "ort", {"level": "all", "quant": "u8s8"}, "measured", base_ms=1.9, margin=-0.4, passed=False,
                  isolated_ms=1.5, rng=rng),
        candidate("c03", "ort", {"level": "all", "fp16": True}, "crashed", reason="killed by signal 11 (SIGSEGV)", build_s=1.2),
        candidate("c04", "openvino", {"precision": "f32", "streams": 1}, "measured", base_ms=2.6, margin=0.99,
                  isolated_ms=2.2, graph={"slim": True}, rng=rng),
        candidate("c05", "openvino", {"precision": "bf16", "streams": 1}, "measured", base_ms=1.7, margin=0.3,
                  isolated_ms=1.4, serving={"instances": 2, "dynamic_batching": True}, rng=rng),
        candidate("c06", "openvino", {"precision": "int8"}, "infeasible", reason="NNCF needs calibration data of 300 samples",
                  build_s=0.4),
        candidate("c07", "tensorrt", {"builder_optimization_level": 3}, "infeasible", reason="no NVIDIA GPU on this machine",
                  build_s=0.0),
        candidate("c08", "openvino", {"precision": "f32", "streams": 2}, "measured", base_ms=2.9, margin=0.99,
                  isolated_ms=2.0, build_s=0.0, rng=rng),
    ]
    report = RunReport(
        run_id="run-20261202-181200", tool_version="0.1.0", created="2026-12-02T18:12:00Z",
        model=ModelInfo(path="/tmp/conv_attention.onnx", name="conv_attention", sha256="ab" * 32, size_bytes=400_000,
                        opset=17, inputs=[TensorInfo(name="images", dtype="float32", dims=["batch", 3, 64, 64])],
                        outputs=[TensorInfo(name="logits", dtype="float32", dims=["batch", 10])]),
        shapes={"images": [1, 3, 64, 64]},
        spec=spec(objective={"metric": "p99", "load_index": 0}, measure={"loads": [load.model_dump() for load in LOADS]}),
        machine=Machine(hostname="box", cpu="AMD EPYC", cores=2, memory_bytes=24 << 30,
                        runtime_versions={"onnxruntime": "1.32", "openvino": "2026.4"}),
        triton_version="2.51.0", reference={"source": "synthetic", "synthetic": True, "split_seed": 0, "tuning": 45, "heldout": 19},
        candidates=cands, baseline_id="c00", selected_id="c05", winner_id="c05",
        gain=Gain(metric="p99", ratio=Interval(value=2.21, low=2.02, high=2.40), winner_ms=2.9, baseline_ms=6.4,
                  selection_estimate_ratio=2.45, significant=True,
                  remeasured_baseline=latency(4.0, rng, LOADS[:1])[0], remeasured_winner=latency(1.81, rng, LOADS[:1])[0]),
        heldout=AccuracyResult(split="heldout", requests=19, passed=True, exceedances=0, exceedance_upper_bound=0.146,
                               min_margin=0.28),
        promoted_version=3, promoted_path="/tmp/repo/conv_attention/3",
        decisions=["baseline c00: ORT defaults", "c02 ineligible: 7/45 exceedances", "winner c05 confirmed by re-measurement"],
        tuning_seconds=412.0, status="done",
    )
    return report.model_copy(update=overrides)


@pytest.fixture
def report() -> RunReport:
    return make_report()


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with make_report()'s report.json rendered once (plots take seconds on 2 cores);
    tests only read it - copy it before changing anything."""
    from gpt_triton.report import render_report

    run_dir = tmp_path_factory.mktemp("rendered")
    (run_dir / "report.json").write_text(make_report().model_dump_json())
    render_report(run_dir)
    return run_dir
