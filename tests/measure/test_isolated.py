"""In-process estimates with the artifact's runtime options, and the isolated-vs-served rank correlation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import Interval, IsolatedStats, LatencyStats, LoadProfile
from gpt_triton.core.model_info import sha256_file
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.measure.isolated import isolated_estimate, rank_correlation


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
    assert est.profiler_op_sum_ms is not None
    # The kernels run inside the request, so their sum cannot exceed it by much (timer granularity).
    assert 0 < est.profiler_op_sum_ms < est.single_request_ms * 1.5
    with pytest.raises(GptTritonError, match="not_an_option"):
        isolated_estimate(artifact(conv_attention_path, "onnxruntime", {"session_options": {"not_an_option": 1}}),
                          requests(), repeats=2)


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
