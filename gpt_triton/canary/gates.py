"""Canary gates: PromQL over Triton's per-version metrics, evaluated through Prometheus's HTTP API.

Latency is gated on p99 by default, read from Triton 2.51's latency summaries
(``nv_inference_request_summary_us{quantile="0.99"}``, exported only with
``--metrics-config summary_latencies=true``: the chart and the embedded server pass it, and Triton's
default ``summary_quantiles`` include p99). A summary's
quantiles cannot be aggregated across pods, so the gate takes the *worst* pod's p99 (``max``): a
conservative bound, never an average of percentiles. Quantiles come from Triton's own sliding window,
not from the PromQL window. ``latency="mean"`` gates on rate(duration_us) / rate(success) instead.

Every series is selected by ``namespace`` and ``model`` (``namespace=""`` matches series without the
label: a Prometheus that scrapes one Triton directly, as ``gpt_triton/monitoring/prometheus.yml`` does).
A query without data (an empty vector, NaN, or 0/0 when a version got no requests) is *no data*, never
a pass: the controller counts it as inconclusive (halting after a limit) or as a failed check.

:class:`GateQueries` only builds PromQL, so the same text feeds the controller and the Argo Rollouts /
Flagger objects of ``gpt-triton canary --emit`` (where labels are template placeholders).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.spec import parse_duration
from gpt_triton.metrics.prometheus import PrometheusClient

Verdict = Literal["pass", "fail", "inconclusive"]
LatencyStat = Literal["p99", "mean"]
P99 = "0.99"
# rate() needs two samples inside its window; four scrape intervals survive a late or failed scrape.
MIN_SCRAPES_PER_WINDOW = 4
SUMMARY_HINT = ("no Triton latency summary: start tritonserver with --metrics-config summary_latencies=true "
                "(the chart and the embedded server do) or gate on --latency-stat mean")
NO_P99_HINT = (f'Triton exports latency summaries but no quantile="{P99}": add {P99} to its '
               f"--metrics-config summary_quantiles (e.g. ...,{P99}:0.001; Triton's default set, which the chart "
               "and the embedded server keep, has it) or gate on --latency-stat mean")


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
    """Thresholds; None disables a gate. Ratios are candidate / stable; latency is p99 unless ``latency="mean"``."""

    max_latency_ratio: float | None = 1.1
    max_latency_ms: float | None = None
    max_failure_rate: float | None = 0.01
    max_queue_ratio: float | None = None  # candidate queue time / compute time
    latency: LatencyStat = "p99"


def combine(results: list[GateResult]) -> Verdict:
    """One failing gate fails the check; otherwise one without data makes it inconclusive."""
    verdicts = {r.verdict for r in results}
    if "fail" in verdicts:
        return "fail"
    return "inconclusive" if "inconclusive" in verdicts else "pass"


def promql_duration(seconds: float) -> str:
    """A PromQL (and Flagger-compatible) duration: whole minutes as ``1m``, whole seconds as ``15s``, else ms."""
    millis = max(1, round(seconds * 1000))
    if millis % 60000 == 0:
        return f"{millis // 60000}m"
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def default_window(scrape_interval_s: float, analysis_interval_s: float | None = None) -> float:
    """The rate window: at least four scrape intervals (1m at Prometheus's usual 15 s)."""
    window = MIN_SCRAPES_PER_WINDOW * scrape_interval_s
    return window if analysis_interval_s is None else max(window, analysis_interval_s)


def check_window(window_s: float, scrape_interval_s: float) -> None:
    """A window under four scrapes returns no data whenever one scrape is late: refuse it up front."""
    if scrape_interval_s <= 0:
        raise GptTritonError(f"--scrape-interval must be positive, got {scrape_interval_s} s")
    if window_s < MIN_SCRAPES_PER_WINDOW * scrape_interval_s:
        raise GptTritonError(
            f"--window {promql_duration(window_s)} spans fewer than {MIN_SCRAPES_PER_WINDOW} scrape intervals "
            f"(--scrape-interval {promql_duration(scrape_interval_s)}): rate() would return no data; use at "
            f"least {promql_duration(MIN_SCRAPES_PER_WINDOW * scrape_interval_s)} or omit --window")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class GateQueries:
    """The PromQL of each gate for one model. ``window`` is a PromQL duration (or a template placeholder)."""

    def __init__(self, *, model: str, namespace: str, window: str, selector: str = "",
                 latency: LatencyStat = "p99") -> None:
        self.model, self.namespace, self.window = model, namespace, window
        self.selector = selector.strip().strip(",")
        self.latency = latency

    def matchers(self, version: str) -> str:
        parts = [f'namespace="{_escape(self.namespace)}"', f'model="{_escape(self.model)}"',
                 f'version="{_escape(str(version))}"']
        if self.selector:
            parts.append(self.selector)
        return ", ".join(parts)

    def _rate(self, metric: str, version: str) -> str:
        # Summed over pods: counters are aggregatable.
        return f"sum(rate({metric}{{{self.matchers(version)}}}[{self.window}]))"

    def latency_ms(self, version: str) -> str:
        if self.latency == "p99":
            # Summaries are not aggregatable: the worst pod's p99 (max ignores pods whose window is empty).
            return f'max(nv_inference_request_summary_us{{{self.matchers(version)}, quantile="{P99}"}}) / 1000'
        duration = self._rate("nv_inference_request_duration_us", version)
        return f"{duration} / {self._rate('nv_inference_request_success', version)} / 1000"

    def latency_ratio(self, candidate: str, stable: str) -> str:
        return f"({self.latency_ms(candidate)}) / ({self.latency_ms(stable)})"

    def failure_rate(self, version: str) -> str:
        failure = self._rate("nv_inference_request_failure", version)
        success = self._rate("nv_inference_request_success", version)
        return f"{failure} / ({success} + {failure})"

    def queue_ratio(self, version: str) -> str:
        queue = self._rate("nv_inference_queue_duration_us", version)
        compute = self._rate("nv_inference_compute_infer_duration_us", version)
        return f"{queue} / {compute}"


@dataclass(frozen=True)
class GateSpec:
    """One enabled gate as the emitted objects need it: name, PromQL, upper bound."""

    gate: str
    query: str
    threshold: float


def gate_specs(queries: GateQueries, config: GateConfig, *, stable: str, candidate: str) -> list[GateSpec]:
    """The enabled gates, in the order the controller evaluates them."""
    specs = []
    if config.max_latency_ratio is not None:
        specs.append(GateSpec("latency_ratio", queries.latency_ratio(candidate, stable), config.max_latency_ratio))
    if config.max_latency_ms is not None:
        specs.append(GateSpec("latency_ms", queries.latency_ms(candidate), config.max_latency_ms))
    if config.max_failure_rate is not None:
        specs.append(GateSpec("failure_rate", queries.failure_rate(candidate), config.max_failure_rate))
    if config.max_queue_ratio is not None:
        specs.append(GateSpec("queue_ratio", queries.queue_ratio(candidate), config.max_queue_ratio))
    return specs


class PromQLGates:
    """The gates of one canary: ``model``'s ``candidate`` version against its ``stable`` version.

    ``selector`` adds label matchers to every series (e.g. ``job="triton"``) when one Prometheus
    scrapes several Tritons of one namespace.
    """

    def __init__(
        self, prometheus: PrometheusClient, *, model: str, stable: str, candidate: str, window_s: float,
        config: GateConfig, selector: str = "", namespace: str = "",
    ) -> None:
        self.prometheus = prometheus
        self.model = model
        self.stable = str(stable)
        self.candidate = str(candidate)
        self.window = promql_duration(window_s)
        self.config = config
        self.queries = GateQueries(model=model, namespace=namespace, window=self.window, selector=selector,
                                   latency=config.latency)

    def mean_latency_ms_query(self, version: str) -> str:
        return GateQueries(model=self.model, namespace=self.queries.namespace, window=self.window,
                           selector=self.queries.selector, latency="mean").latency_ms(version)

    def latency_ms_query(self, version: str) -> str:
        return self.queries.latency_ms(version)

    def failure_rate_query(self, version: str) -> str:
        return self.queries.failure_rate(version)

    def queue_ratio_query(self, version: str) -> str:
        return self.queries.queue_ratio(version)

    def _no_data(self) -> str:
        where = f'namespace="{self.queries.namespace}", model="{self.model}"'
        hint = self._summary_hint() if self.config.latency == "p99" else ""
        return f"no data in the window for {where} (check --namespace, --scrape-interval){'; ' + hint if hint else ''}"

    def _summary_hint(self) -> str:
        """Why a p99 gate may have no data: no summaries at all, or summaries without the p99 quantile
        (a Triton started with its own ``summary_quantiles``)."""
        selector = f'namespace="{_escape(self.queries.namespace)}", model="{_escape(self.model)}"'
        if not self.prometheus.query(f"count(nv_inference_request_summary_us{{{selector}}})"):
            return SUMMARY_HINT
        if not self.prometheus.query(f'count(nv_inference_request_summary_us{{{selector}, quantile="{P99}"}})'):
            return NO_P99_HINT
        return ""

    def _upper(self, gate: str, query: str, value: float | None, threshold: float, detail: str = "") -> GateResult:
        if value is None:
            return GateResult(gate, query, None, threshold, "inconclusive", detail or self._no_data())
        return GateResult(gate, query, value, threshold, "pass" if value <= threshold else "fail", detail)

    def evaluate(self, stable_reference_ms: float | None = None) -> tuple[list[GateResult], float | None]:
        """Run every enabled gate now. Returns the results and the stable latency (ms) measured.

        When the stable version received no traffic in the window (at 100 % weight), the latency ratio
        is taken against ``stable_reference_ms``, the stable latency of the last step that measured it.
        """
        cfg = self.config
        results: list[GateResult] = []
        candidate_q = self.latency_ms_query(self.candidate)
        candidate_ms = self.prometheus.query_value(candidate_q)
        stable_ms: float | None = None
        if cfg.max_latency_ratio is not None:
            stable_q = self.latency_ms_query(self.stable)
            stable_ms = self.prometheus.query_value(stable_q)
            reference, detail = stable_ms, ""
            if reference is None and stable_reference_ms is not None:
                reference, detail = stable_reference_ms, f"stable {stable_reference_ms:.3f} ms from an earlier step"
            ratio = None if candidate_ms is None or not reference else candidate_ms / reference
            if ratio is not None and not detail:
                detail = f"candidate {candidate_ms:.3f} ms / stable {reference:.3f} ms ({cfg.latency})"
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


def gate_config_from_args(args: Any) -> GateConfig:
    """The thresholds of ``gpt-triton canary`` (argparse namespace); ``--max-latency-ratio 0`` disables the ratio."""
    return GateConfig(max_latency_ratio=args.max_latency_ratio or None, max_latency_ms=args.max_latency_ms,
                      max_failure_rate=args.max_failure_rate, max_queue_ratio=args.max_queue_ratio,
                      latency=args.latency_stat)


def window_from_args(args: Any, interval_s: float) -> float:
    """``--window``, checked against ``--scrape-interval``; by default four scrapes (or the interval, if longer)."""
    scrape_s = parse_duration(args.scrape_interval)
    window_s = parse_duration(args.window) if args.window else default_window(scrape_s, interval_s)
    check_window(window_s, scrape_s)
    return window_s
