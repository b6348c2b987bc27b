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
    assert result["ratio"] == pytest.approx(result["served_ms"] / result["in_process_ms"])
    for name in ("bench_tiny", "bench_tiny_floor"):
        assert not triton_server.client().is_model_ready(name)
