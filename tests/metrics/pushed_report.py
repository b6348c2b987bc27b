"""A RunReport shaped like a finished tuning run, built from a real (tiny) ONNX model."""

from __future__ import annotations

from pathlib import Path

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.measurements import Interval
from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.records import BuildCost, Candidate, Gain, Machine, RunReport
from gpt_triton.core.routes import Route
from gpt_triton.testing.models import build_tiny_mlp


def make_report(tmp_path: Path, *, status: str = "done") -> RunReport:
    model = inspect_model(build_tiny_mlp(tmp_path / "tiny_mlp.onnx"))
    serving = Route(family="serving", knobs={"instances": 1})

    def candidate(cid: str, status: str, seconds: float, baseline: bool = False) -> Candidate:
        return Candidate(
            id=cid, family="onnxruntime", route=Route(family="onnxruntime", knobs={"opt_level": cid}),
            serving=serving, is_baseline=baseline, status=status,  # type: ignore[arg-type]
            build=BuildCost(seconds=seconds),
        )

    heldout = AccuracyResult(
        split="heldout", requests=40, passed=True, exceedances=0, exceedance_upper_bound=0.072, min_margin=0.31,
    )
    return RunReport(
        run_id="run-1", tool_version="0.1.0", created="2026-12-02T18:00:00Z", model=model,
        shapes={"x": [1, 16]}, spec={}, triton_version="2.51.0",
        machine=Machine(hostname="h", cpu="cpu", cores=2, memory_bytes=1 << 30),
        candidates=[
            candidate("base", "measured", 1.5, baseline=True), candidate("all", "measured", 2.0),
            candidate("bad", "crashed", 0.5), candidate("wrong", "infeasible", 0.25),
        ],
        baseline_id="base", winner_id="all",
        gain=Gain(metric="p99", ratio=Interval(value=1.4, low=1.2, high=1.6), winner_ms=2.5, baseline_ms=3.5,
                  significant=True),
        heldout=heldout, tuning_seconds=123.0, status=status,  # type: ignore[arg-type]
    )
