"""Push the outcome of a tuning run to a Prometheus Pushgateway.

A tuning run is a service-level batch job: its results are pushed once, grouped by ``job`` and
``model`` (no ``instance`` label, so a rerun on another host replaces rather than duplicates the
series). We use *pushadd* (HTTP POST): only the metric families pushed now are replaced, so a failed
run records ``gpt_triton_last_failure_timestamp_seconds`` while the last success timestamp and the
results of the last good run stay visible.

In a cluster the group also carries ``namespace`` and ``gpu_product`` (from the pod's ``POD_NAMESPACE`` and
``GPT_TRITON_GPU_PRODUCT``): the same model tuned for an A100 and an L4, or in two namespaces, keeps two
groups instead of overwriting one. After a promotion the push is best effort (:func:`push_best_effort`):
an unreachable Pushgateway is a warning, never a failed run.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
from collections import Counter
from typing import get_args

from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.records import CandidateStatus, RunReport

PREFIX = "gpt_triton"
# Grouping labels from the pod's environment (the chart and gpt_triton.k8s.render set them).
GROUPING_ENV = {"namespace": "POD_NAMESPACE", "gpu_product": "GPT_TRITON_GPU_PRODUCT"}
_log = logging.getLogger(__name__)
STATUSES: tuple[str, ...] = get_args(CandidateStatus)  # every status, so a gauge of 0 is pushed too


def _winner_accuracy(report: RunReport) -> AccuracyResult | None:
    """The held-out verdict of the winner when there is one, else its screening result."""
    if report.heldout is not None:
        return report.heldout
    if report.winner_id:
        try:
            return report.candidate(report.winner_id).accuracy
        except KeyError:
            return None
    return None


def run_registry(report: RunReport, *, failed: bool = False, now: float | None = None) -> CollectorRegistry:
    """The metrics of one run in a fresh registry (separate from pushing so it can be inspected)."""
    now = time.time() if now is None else now
    failed = failed or report.status == "failed"
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"{PREFIX}_{name}", doc, labels, registry=registry)

    counts: Counter[str] = Counter(candidate.status for candidate in report.candidates)
    by_status = gauge("candidates", "Candidates of the last run by final status.", ("status",))
    for status in STATUSES:
        by_status.labels(status=status).set(counts.get(status, 0))
    gauge("build_seconds", "Total build time of the last run's candidates (cache hits cost 0).").set(
        sum(c.build.seconds for c in report.candidates)
    )
    gauge("tuning_duration_seconds", "Wall time of the last tuning run.").set(report.tuning_seconds)
    winner = report.candidate(report.winner_id) if report.winner_id else None
    gauge("run_info", "The last run; labels identify it and its winner.", (
        "run_id", "tool_version", "triton_version", "winner", "route", "status",
    )).labels(
        run_id=report.run_id, tool_version=report.tool_version, triton_version=report.triton_version,
        winner=report.winner_id or "", route=winner.route_text() if winner else "",
        status="failed" if failed else report.status,
    ).set(1)

    if not failed:
        # Results describe what was promoted; a failed run leaves the last good run's values in place.
        if report.gain is not None:
            gain = report.gain
            metric = ("metric",)
            gauge("winner_latency_seconds", "Re-measured latency of the winner (objective metric).", metric).labels(
                metric=gain.metric).set(gain.winner_ms / 1e3)
            gauge("baseline_latency_seconds", "Re-measured latency of the baseline (objective metric).", metric).labels(
                metric=gain.metric).set(gain.baseline_ms / 1e3)
            gauge("gain_ratio", "Re-measured baseline/winner ratio (>1: the winner is faster).").set(gain.ratio.value)
            gauge("gain_ratio_lower", "Lower bound of the gain's confidence interval.").set(gain.ratio.low)
            gauge("gain_ratio_upper", "Upper bound of the gain's confidence interval.").set(gain.ratio.high)
            gauge("gain_significant", "1 when the gain's interval excludes 1.0.").set(1 if gain.significant else 0)
        accuracy = _winner_accuracy(report)
        if accuracy is not None:
            gauge("accuracy_margin_ratio", "Smallest relative margin of the winner's outputs to their tolerance.").set(
                accuracy.min_margin)
            gauge("accuracy_exceedance_bound_ratio", "Upper confidence bound on the winner's exceedance rate.").set(
                accuracy.exceedance_upper_bound)
        gauge("last_success_timestamp_seconds", "When a tuning run last succeeded.").set(now)
    else:
        gauge("last_failure_timestamp_seconds", "When a tuning run last failed.").set(now)
    return registry


def push_run_metrics(
    gateway: str, report: RunReport, *, job: str = "gpt_triton_tune", failed: bool = False,
    model: str | None = None, timeout_s: float = 10.0,
) -> None:
    """Push ``report``'s metrics to ``gateway`` (HOST:PORT or URL), grouped by job and model.

    ``model`` defaults to the ONNX model's name. An unreachable or refusing gateway raises
    :class:`GptTritonError`.
    """
    registry = run_registry(report, failed=failed)
    grouping = {"model": model or report.model.name}
    grouping.update({label: os.environ[env] for label, env in GROUPING_ENV.items() if os.environ.get(env)})
    try:
        pushadd_to_gateway(gateway, job=job, registry=registry, grouping_key=grouping, timeout=timeout_s)
    except (urllib.error.URLError, OSError) as exc:
        raise GptTritonError(f"cannot push metrics to Pushgateway {gateway}: {exc}; check the --pushgateway address") from exc


def push_best_effort(gateway: str, report: RunReport, *, failed: bool = False) -> bool:
    """Push, and on failure log a warning instead of raising: the run's outcome (a promoted version) stands
    whatever the Pushgateway says. True when pushed."""
    try:
        push_run_metrics(gateway, report, failed=failed)
    except GptTritonError as exc:
        _log.warning("metrics not pushed (the run's result stands): %s", exc)
        return False
    return True
