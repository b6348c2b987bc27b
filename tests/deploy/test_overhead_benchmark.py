"""benchmarks/overhead.py runs end to end on a small model and cleans up after itself."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gpt_triton.server import EmbeddedTriton

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "overhead.py"


@pytest.mark.slow
def test_measure_reports_both_sides_and_the_breakdown(
    triton_server: EmbeddedTriton, tiny_model_path: Path, tmp_path: Path
) -> None:
    spec = importlib.util.spec_from_file_location("overhead_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    options = {"config_entries": {"session.intra_op.allow_spinning": "0"}}
    result = module.measure(triton_server, tiny_model_path, "bench_tiny", 20, 2, tmp_path, options)
    for key in ("in_process_ms", "served_ms", "floor_ms", "compute_infer_ms"):
        assert result[key] > 0, key
    # Serving costs something: the same runner behind Triton and gRPC is slower than in this process.
    assert result["served_ms"] > result["in_process_ms"] and result["ratio"] > 1.0, result
    # Triton's split of a request lies inside the server's total for it (the ns counters' deltas, so
    # within float rounding), and the server's total inside the client's round trip: what is left is
    # the transport the benchmark sets out to measure.
    parts = sum(result[f"{k}_ms"] for k in ("queue", "compute_input", "compute_infer", "compute_output"))
    assert 0 < parts <= result["success_ms"] * (1 + 1e-9), result
    assert 0 < result["success_ms"] < result["served_mean_ms"], result
    assert result["outside_server_ms"] > 0, result
    for name in ("bench_tiny", "bench_tiny_floor"):
        assert not triton_server.client().is_model_ready(name)
