"""In-process estimates with the artifact's runtime options, and the isolated-vs-served rank correlation."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import Interval, IsolatedStats, LatencyStats, LoadProfile
from gpt_triton.core.model_info import sha256_file
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.measure.isolated import isolated_estimate, profiler_op_sum_ms, rank_correlation


def artifact(path: Path, runtime: str, options: dict) -> Artifact:
    return Artifact(family=runtime, runtime=runtime, route=Route(family=runtime), directory=str(path.parent),  # type: ignore[arg-type]
                    files=[path.name], runtime_options=options, sha256=sha256_file(path))


def requests() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"images": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)} for _ in range(3)]


def test_ort_estimate_uses_options_and_profiler(conv_attention_path: Path) -> None:
    opts = {"session_options": {"graph_optimization_level": "ORT_ENABLE_ALL", "intra_op_num_threads": 1},
            "config_entries": {"session.intra_op.allow_spinning": "0"}}
    est = isolated_estimate(artifact(conv_attention_path, "onnxruntime", opts), requests(), repeats=8)
    assert est.single_request_ms is not None and est.single_request_ms > 0
    # The two figures come from two sessions timed one after the other, so on a shared machine neither
    # bounds the other; the kernels-inside-the-run invariant is checked within one trace below.
    assert est.profiler_op_sum_ms is not None and est.profiler_op_sum_ms > 0
    with pytest.raises(GptTritonError, match="not_an_option"):
        isolated_estimate(artifact(conv_attention_path, "onnxruntime", {"session_options": {"not_an_option": 1}}),
                          requests(), repeats=2)


def test_profiler_op_sum_stays_inside_each_runs_span(conv_attention_path: Path, tmp_path: Path) -> None:
    """One real trace, sequential and single-threaded: kernels do not overlap, so per run their summed
    durations fit inside that run's ``model_run`` span (the same clock, the same run)."""
    from gpt_triton.runtimes import OnnxRuntime

    opts = {"session_options": {"intra_op_num_threads": 1, "execution_mode": "ORT_SEQUENTIAL"}}
    runner = OnnxRuntime().open(conv_attention_path, opts, profile_dir=tmp_path)
    with runner:
        for req in requests() * 2:
            runner.infer(req)
    assert runner.profile_path is not None
    events = json.loads(runner.profile_path.read_text())
    spans = sorted(float(e["dur"]) / 1e3 for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    op_sum = profiler_op_sum_ms(runner.profile_path, skip_first=1)
    assert len(spans) == 6 and op_sum is not None
    assert 0 < op_sum <= statistics.median(spans[1:]) * 1.01 + 0.01  # within the median run, 1 % + 10 us slack


def test_profiler_op_sum_assigns_kernels_to_runs_and_skips_the_first(tmp_path: Path) -> None:
    def run(ts: float, dur: float) -> dict:
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}

    def kernel(ts: float, dur: float) -> dict:
        return {"cat": "Node", "name": "/conv/Conv_kernel_time", "ts": ts, "dur": dur}

    events = [run(0, 900), kernel(10, 800),                      # first run: allocation, skipped
              run(1000, 300), kernel(1010, 100), kernel(1120, 50),  # 150 us
              {"cat": "Node", "name": "/conv/Conv_fence_before", "ts": 1200, "dur": 70},  # not a kernel
              run(2000, 300), kernel(2010, 250),                  # 250 us
              run(3000, 300), kernel(3010, 200),                  # 200 us
              kernel(5000, 999)]                                  # outside every run
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(events))
    assert profiler_op_sum_ms(trace, skip_first=1) == pytest.approx(0.2)  # median of 150, 250, 200 us
    assert profiler_op_sum_ms(trace, skip_first=0) == pytest.approx(0.225)
    assert profiler_op_sum_ms(trace, skip_first=4) is None


def test_openvino_estimate(conv_attention_path: Path) -> None:
    est = isolated_estimate(artifact(conv_attention_path, "openvino", {"config": {"NUM_STREAMS": "1"}}),
                            requests(), repeats=5)
    assert est.single_request_ms is not None and est.single_request_ms > 0 and est.profiler_op_sum_ms is None


def test_unavailable_runtime_gives_empty_stats(tmp_path: Path) -> None:
    from gpt_triton.runtimes import TensorRt

    if TensorRt().availability()[0]:
        pytest.skip("TensorRT and a GPU are present here")
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"not an engine")
    assert isolated_estimate(artifact(plan, "tensorrt", {}), requests(), repeats=2) == IsolatedStats()


def test_rank_correlation() -> None:
    def cand(cid: str, iso: float, served: float) -> Candidate:
        return Candidate(id=cid, family="f", route=Route(family="f"), serving=Route(family="s"),
                         isolated=IsolatedStats(single_request_ms=iso),
                         latency=[LatencyStats(load=LoadProfile(), p50_ms=Interval(value=served, low=served, high=served))])

    same = [cand("a", 1, 10), cand("b", 2, 20), cand("c", 3, 30), cand("d", 4, 35)]
    assert rank_correlation(same) == pytest.approx(1.0)
    flipped = [cand("a", 1, 40), cand("b", 2, 30), cand("c", 3, 20), cand("d", 4, 10)]
    assert rank_correlation(flipped) == pytest.approx(-1.0)
    assert np.isnan(rank_correlation(same[:2]))
