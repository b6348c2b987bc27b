"""Server-side figures of a window: Triton's statistics API before and after, and its /metrics.

The statistics are cumulative, so a window's share is the difference of two snapshots; the snapshot
after the window waits until Triton has counted every success the client saw (it counts a request
slightly after the response reaches the client), and then until the counters stand still.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import ServerBreakdown

# How long a snapshot waits for the counters to settle; then it takes what is there.
_SETTLE_TIMEOUT_S = 2.0
_SETTLE_POLL_S = 0.005


def stats_json(stats: dict[str, Any]) -> dict[str, int]:
    """Sum Triton's cumulative statistics over the model's versions (JSON int64s arrive as strings)."""
    total: dict[str, int] = {}
    for model in stats.get("model_stats", []):
        total["execution_count"] = total.get("execution_count", 0) + int(model.get("execution_count", 0))
        for key, value in model.get("inference_stats", {}).items():
            total[f"{key}_count"] = total.get(f"{key}_count", 0) + int(value.get("count", 0))
            total[f"{key}_ns"] = total.get(f"{key}_ns", 0) + int(value.get("ns", 0))
    return total


def scrape_metrics(metrics_url: str, model_name: str) -> dict[str, float]:
    """The model's ``nv_inference_*`` series from Triton's Prometheus endpoint, summed over labels."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError as exc:
        raise GptTritonError(f"cannot scrape Triton metrics at {metrics_url}: {exc}; check the metrics URL") from exc
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("nv_inference_"):
            continue
        for sample in family.samples:
            if sample.labels.get("model") == model_name:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def breakdown(before: dict[str, int], after: dict[str, int]) -> ServerBreakdown:
    """Mean per-request server times (ms) between two :func:`stats_json` snapshots."""

    def delta(key: str) -> int:
        return after.get(key, 0) - before.get(key, 0)

    success = delta("success_count")
    per = 1e6 * max(success, 1)  # ns per request -> ms
    return ServerBreakdown(
        queue_ms=delta("queue_ns") / per,
        compute_input_ms=delta("compute_input_ns") / per,
        compute_infer_ms=delta("compute_infer_ns") / per,
        compute_output_ms=delta("compute_output_ns") / per,
        success_count=success,
        execution_count=delta("execution_count"),
    )


def model_dtypes(grpc_url: str, model_name: str) -> dict[str, str]:
    """Input name -> Triton dtype from the model's metadata (fills in what a replay file leaves out)."""
    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        meta = client.get_model_metadata(model_name, as_json=True)
    except InferenceServerException as exc:
        raise GptTritonError(f"model {model_name!r} is not available at {grpc_url}: {exc}") from exc
    finally:
        client.close()
    return {item["name"]: item["datatype"] for item in meta.get("inputs", [])}


class StatsSnapshots:
    """The "before" and "after" snapshots of one window (statistics API, and /metrics when given).

    A context manager: the gRPC client it holds is closed on exit.
    """

    def __init__(self, grpc_url: str, model_name: str, metrics_url: str | None = None) -> None:
        self.model_name, self.metrics_url = model_name, metrics_url
        self.client = grpcclient.InferenceServerClient(grpc_url)
        self.taken: dict[str, Any] = {}

    def __enter__(self) -> StatsSnapshots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def _read(self) -> dict[str, int]:
        return stats_json(self.client.get_inference_statistics(self.model_name, as_json=True))

    def take(self, tag: str, expect_success: int | None = None) -> None:
        """Snapshot ``tag``. With ``expect_success`` (the end) first poll until the successes since "before"
        cover it; then, at the start and the end alike, until two reads agree (the start's probes are still
        being counted; at the end an execution is counted apart from its requests' successes, and a read
        between the two once found 714 executions for 715 successes). Give up after a deadline and keep the
        last read."""
        deadline = time.monotonic() + _SETTLE_TIMEOUT_S
        current = self._read()
        if expect_success is not None:
            counted = self.taken["before"].get("success_count", 0) + expect_success
            while current.get("success_count", 0) < counted and time.monotonic() < deadline:
                time.sleep(_SETTLE_POLL_S)  # polling a condition with a deadline
                current = self._read()
        while time.monotonic() < deadline:
            time.sleep(_SETTLE_POLL_S)
            again = self._read()
            if again == current:
                break
            current = again
        self.taken[tag] = current
        if self.metrics_url:
            self.taken[tag + "_metrics"] = scrape_metrics(self.metrics_url, self.model_name)

    def server_breakdown(self) -> ServerBreakdown:
        """The window's server figures from the "before" and "after" snapshots."""
        server = breakdown(self.taken["before"], self.taken["after"])
        if "after_metrics" in self.taken:
            before = self.taken.get("before_metrics", {})
            server.metrics_delta = {k: v - before.get(k, 0.0) for k, v in self.taken["after_metrics"].items()}
        return server
