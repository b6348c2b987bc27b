"""In-process estimates of an artifact, reported only beside the served figures.

What the competing tuners rank on (a median of in-process runs, or a profiler's kernel-time sum) is
computed here so the report can show how well it predicts the latency Triton actually serves
(:func:`rank_correlation`). Selection never uses these numbers.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import IsolatedStats
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact
from gpt_triton.runtimes import OnnxRuntime, RuntimeLayerError, get_runtime


def _median_ms(run: Any, requests: Sequence[dict[str, np.ndarray]], repeats: int) -> float:
    for req in requests[: min(3, len(requests))]:  # warm-up
        run(req)
    times = []
    for i in range(repeats):
        req = requests[i % len(requests)]
        start = time.perf_counter()
        run(req)
        times.append((time.perf_counter() - start) * 1e3)
    return float(statistics.median(times))


def profiler_op_sum_ms(trace_file: str | Path, skip_first: int = 1) -> float | None:
    """Median over runs of the summed kernel durations in an ORT profiler trace (Chrome trace JSON).

    Kernel events (``cat == "Node"``, name ``..._kernel_time``) are assigned to the ``model_run`` span
    that contains them; the first ``skip_first`` runs (allocation, first-touch) are left out.
    """
    events = json.loads(Path(trace_file).read_text())
    runs = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    kernels = [(float(e["ts"]), float(e["dur"])) for e in events
               if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    sums = [sum(d for ts, d in kernels if lo <= ts <= hi) for lo, hi in runs[skip_first:]]
    return float(statistics.median(sums)) / 1e3 if sums else None


def isolated_estimate(artifact: Artifact, requests: Sequence[dict[str, np.ndarray]], repeats: int = 20) -> IsolatedStats:
    """Median single-request latency in-process with the artifact's runtime and options (the runners
    the adapter serves with), plus (ONNX Runtime) the profiler's per-op time sum. A runtime that is not
    available here (TensorRT without a GPU) gives empty stats."""
    if not requests:
        raise GptTritonError("isolated_estimate needs at least one request")
    path = Path(artifact.directory) / artifact.files[0]
    if not path.is_file():
        raise GptTritonError(f"artifact file missing: {path}; rebuild the candidate")
    runtime = get_runtime(artifact.runtime)
    if not runtime.availability()[0]:
        return IsolatedStats()
    try:
        # reuse_outputs: the outputs are dropped, as the adapter copies them out before its next run.
        with runtime.open(path, artifact.runtime_options, reuse_outputs=True) as runner:
            single = _median_ms(runner.infer, requests, repeats)
        op_sum = None
        if isinstance(runtime, OnnxRuntime):
            with tempfile.TemporaryDirectory() as tmp:
                profiled = runtime.open(path, artifact.runtime_options, profile_dir=tmp)
                with profiled:
                    for i in range(1 + max(1, min(repeats, 10))):
                        profiled.infer(requests[i % len(requests)])
                assert profiled.profile_path is not None  # written by deactivate()
                op_sum = profiler_op_sum_ms(profiled.profile_path, skip_first=1)
    except RuntimeLayerError as exc:
        raise GptTritonError(f"in-process estimate of {path}: {exc}") from exc
    return IsolatedStats(single_request_ms=single, profiler_op_sum_ms=op_sum)


def rank_correlation(candidates: Sequence[Candidate], load_index: int = 0, metric: str = "p50") -> float:
    """Spearman correlation between the isolated single-request medians and the served ``metric`` at
    ``load_index``, over candidates that have both; NaN with fewer than 3."""
    pairs = []
    for cand in candidates:
        if cand.isolated is None or cand.isolated.single_request_ms is None or len(cand.latency) <= load_index:
            continue
        served = getattr(cand.latency[load_index], f"{metric}_ms")
        if served is not None:
            pairs.append((cand.isolated.single_request_ms, served.value))
    if len(pairs) < 3:
        return float("nan")
    rho = stats.spearmanr([p[0] for p in pairs], [p[1] for p in pairs]).statistic
    return float(rho)
