"""Canary gates: PromQL over Triton's per-version metrics, evaluated through Prometheus's HTTP API.

Triton 2.51 has counters only (no histograms), so every gate is a ratio of rates over a window:
mean latency = rate(duration_us) / rate(success). A query without data (an empty vector, or 0/0 when
a version got no requests in the window) is *inconclusive*, never a pass: the controller decides
whether that pauses the canary or counts as a failed check.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpt_triton.metrics.prometheus import PrometheusClient

Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class GateResult:
    gate: str
    query: str
    value: float | None  # None: no data
    threshold: float
    verdict: Verdict
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GateConfig:
    """Thresholds; None disables a gate. Ratios are candidate / stable."""

    max_latency_ratio: float | None = 1.05
    max_latency_ms: float | None = None
    max_failure_rate: float | None = 0.01
    max_queue_ratio: float | None = None  # candidate queue time / compute time


def combine(results: list[GateResult]) -> Verdict:
    """One failing gate fails the check; otherwise one without data makes it inconclusive."""
    verdicts = {r.verdict for r in results}
    if "fail" in verdicts:
        return "fail"
    return "inconclusive" if "inconclusive" in verdicts else "pass"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class PromQLGates:
    """The gates of one canary: ``model``'s ``candidate`` version against its ``stable`` version.

    ``selector`` adds label matchers to every series (e.g. ``job="triton"`` or a namespace) when one
    Prometheus scrapes several Tritons. Series are summed over instances, so several pods of one version
    count as one.
    """

    def __init__(
        self, prometheus: PrometheusClient, *, model: str, stable: str, candidate: str, window_s: float,
        config: GateConfig, selector: str = "",
    ) -> None:
        self.prometheus = prometheus
        self.model = model
        self.stable = str(stable)
        self.candidate = str(candidate)
        # PromQL durations are integers with a unit: milliseconds keep sub-second windows exact.
        self.window = f"{max(1, round(window_s * 1000))}ms"
        self.config = config
        self.selector = selector.strip().strip(",")

    def _series(self, metric: str, version: str) -> str:
        matchers = [f'model="{_escape(self.model)}"', f'version="{_escape(version)}"']
        if self.selector:
            matchers.append(self.selector)
        return f"sum(rate({metric}{{{', '.join(matchers)}}}[{self.window}]))"

    def mean_latency_ms_query(self, version: str) -> str:
        duration = self._series("nv_inference_request_duration_us", version)
        success = self._series("nv_inference_request_success", version)
        return f"{duration} / {success} / 1000"

    def failure_rate_query(self, version: str) -> str:
        failure = self._series("nv_inference_request_failure", version)
        success = self._series("nv_inference_request_success", version)
        return f"{failure} / ({success} + {failure})"

    def queue_ratio_query(self, version: str) -> str:
        queue = self._series("nv_inference_queue_duration_us", version)
        compute = self._series("nv_inference_compute_infer_duration_us", version)
        return f"{queue} / {compute}"

    @staticmethod
    def _upper(gate: str, query: str, value: float | None, threshold: float, detail: str = "") -> GateResult:
        if value is None:
            return GateResult(gate, query, None, threshold, "inconclusive", detail or "no data in the window")
        return GateResult(gate, query, value, threshold, "pass" if value <= threshold else "fail", detail)

    def evaluate(self, stable_reference_ms: float | None = None) -> tuple[list[GateResult], float | None]:
        """Run every enabled gate now. Returns the results and the stable mean latency (ms) measured.

        When the stable version received no traffic in the window (at 100 % weight), the latency ratio
        is taken against ``stable_reference_ms``, the stable latency of the last step that measured it.
        """
        cfg = self.config
        results: list[GateResult] = []
        candidate_q = self.mean_latency_ms_query(self.candidate)
        candidate_ms = self.prometheus.query_value(candidate_q)
        stable_ms: float | None = None
        if cfg.max_latency_ratio is not None:
            stable_q = self.mean_latency_ms_query(self.stable)
            stable_ms = self.prometheus.query_value(stable_q)
            reference, detail = stable_ms, ""
            if reference is None and stable_reference_ms is not None:
                reference, detail = stable_reference_ms, f"stable {stable_reference_ms:.3f} ms from an earlier step"
            ratio = None if candidate_ms is None or not reference else candidate_ms / reference
            if ratio is not None and not detail:
                detail = f"candidate {candidate_ms:.3f} ms / stable {reference:.3f} ms"
            results.append(self._upper("latency_ratio", f"({candidate_q}) / ({stable_q})", ratio, cfg.max_latency_ratio,
                                       detail if ratio is not None else ""))
        if cfg.max_latency_ms is not None:
            results.append(self._upper("latency_ms", candidate_q, candidate_ms, cfg.max_latency_ms))
        if cfg.max_failure_rate is not None:
            query = self.failure_rate_query(self.candidate)
            results.append(self._upper("failure_rate", query, self.prometheus.query_value(query), cfg.max_failure_rate))
        if cfg.max_queue_ratio is not None:
            query = self.queue_ratio_query(self.candidate)
            results.append(self._upper("queue_ratio", query, self.prometheus.query_value(query), cfg.max_queue_ratio))
        return results, stable_ms
