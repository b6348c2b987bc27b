"""``gpt-triton canary --emit argo|flagger``: the canary's gates for the controllers GitOps teams already run.

The PromQL is :class:`~gpt_triton.canary.gates.GateQueries`' own, with each controller's template
placeholders where the controller fills in values, so the emitted gates are the ones ``gpt-triton canary``
evaluates:

* Argo Rollouts: one ``AnalysisTemplate`` (argoproj.io/v1alpha1, prometheus provider). Args ``namespace``,
  ``model``, ``stable-version``, ``candidate-version``. "No data" (an empty vector, NaN, Inf) matches
  neither ``successCondition`` nor ``failureCondition``, which Argo counts as *inconclusive* (with
  ``--missing-data fail`` there is no ``failureCondition``, so it counts as a failure).
* Flagger: one ``MetricTemplate`` (flagger.app/v1beta1) per gate, plus the Canary ``analysis`` block that
  references them (``thresholdRange.max``), printed as a comment to paste under the Canary's ``spec``.
  Flagger always treats a query without data as a failed check that halts advancement.

Teams on Helm or Argo CD should use these objects rather than ``--k8s-deployments``: the replica shifter
changes ``spec.replicas`` through the scale subresource, which a GitOps controller may revert.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gpt_triton.canary.controller import CanaryPolicy
from gpt_triton.canary.gates import (
    GateConfig,
    GateQueries,
    gate_config_from_args,
    gate_specs,
    promql_duration,
    window_from_args,
)
from gpt_triton.core.errors import GptTritonError

DEFAULT_NAMESPACE = "gpt-triton"
ARGO_API = "argoproj.io/v1alpha1"
FLAGGER_API = "flagger.app/v1beta1"


def _dns_name(text: str) -> str:
    """A DNS-1123 object name from a model name and a gate."""
    name = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in name:
        name = name.replace("--", "-")
    if not name:
        raise GptTritonError(f"cannot make a Kubernetes name from {text!r}: pass --model with letters or digits")
    return name[:63].rstrip("-")


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _percent(weight: float) -> int | float:
    return _number(round(weight * 100.0, 6))


def argo_analysis_template(
    *, model: str, namespace: str, prometheus: str, config: GateConfig, policy: CanaryPolicy, window_s: float,
    selector: str = "", stable: str | None = None, candidate: str | None = None, name: str | None = None,
) -> dict[str, Any]:
    """The gates as an Argo Rollouts AnalysisTemplate (one measurement per ``policy.interval_s``, one per step)."""
    queries = GateQueries(model="{{args.model}}", namespace="{{args.namespace}}", window=promql_duration(window_s),
                          selector=selector, latency=config.latency)
    metrics = []
    for spec in gate_specs(queries, config, stable="{{args.stable-version}}", candidate="{{args.candidate-version}}"):
        has_value = "len(result) > 0 && !isNaN(result[0]) && !isInf(result[0])"
        metric: dict[str, Any] = {
            "name": spec.gate.replace("_", "-"),
            "interval": promql_duration(policy.interval_s),
            "count": len(policy.steps),
            # Argo fails a metric when failures *exceed* failureLimit; gpt-triton rolls back when they reach it.
            "failureLimit": policy.failure_limit - 1,
            "inconclusiveLimit": policy.inconclusive_limit - 1,
            "successCondition": f"{has_value} && result[0] <= {_number(spec.threshold)}",
            "provider": {"prometheus": {"address": prometheus, "query": spec.query}},
        }
        if policy.missing_data == "inconclusive":  # no data matches neither condition: inconclusive
            metric["failureCondition"] = f"{has_value} && result[0] > {_number(spec.threshold)}"
        metrics.append(metric)
    if not metrics:
        raise GptTritonError("every gate is disabled: set at least one of --max-latency-ratio, --max-latency-ms, "
                             "--max-failure-rate, --max-queue-ratio")
    args: list[dict[str, str]] = [{"name": "namespace", "value": namespace}, {"name": "model", "value": model}]
    for arg, value in (("stable-version", stable), ("candidate-version", candidate)):
        args.append({"name": arg, "value": value} if value is not None else {"name": arg})
    return {
        "apiVersion": ARGO_API, "kind": "AnalysisTemplate",
        "metadata": {"name": name or _dns_name(f"gpt-triton-{model}"), "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "gpt-triton"}},
        "spec": {"args": args, "metrics": metrics},
    }


def flagger_objects(
    *, model: str, namespace: str, prometheus: str, config: GateConfig, policy: CanaryPolicy, window_s: float,
    stable: str, candidate: str, selector: str = "",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(MetricTemplates, the Canary's ``analysis`` block referencing them)."""
    for what, seconds in (("--window", window_s), ("--interval", policy.interval_s)):
        if not float(seconds).is_integer():
            raise GptTritonError(f"{what} {promql_duration(seconds)} is not whole seconds: Flagger takes only s or m")
    queries = GateQueries(model="{{ variables.model }}", namespace="{{ namespace }}", window="{{ interval }}",
                          selector=selector, latency=config.latency)
    templates, metrics = [], []
    specs = gate_specs(queries, config, stable="{{ variables.stable_version }}",
                       candidate="{{ variables.candidate_version }}")
    if not specs:
        raise GptTritonError("every gate is disabled: set at least one of --max-latency-ratio, --max-latency-ms, "
                             "--max-failure-rate, --max-queue-ratio")
    for spec in specs:
        name = _dns_name(f"gpt-triton-{model}-{spec.gate}")
        templates.append({
            "apiVersion": FLAGGER_API, "kind": "MetricTemplate",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "gpt-triton"}},
            "spec": {"provider": {"type": "prometheus", "address": prometheus}, "query": spec.query},
        })
        metrics.append({
            "name": spec.gate.replace("_", "-"),
            "templateRef": {"name": name, "namespace": namespace},
            "thresholdRange": {"max": _number(spec.threshold)},
            "interval": promql_duration(window_s),  # Flagger's metric interval is the query's {{ interval }}
            "templateVariables": {"model": model, "stable_version": stable, "candidate_version": candidate},
        })
    analysis = {
        "interval": promql_duration(policy.interval_s),
        "threshold": policy.failure_limit,  # Flagger rolls back when failed checks reach it
        "stepWeights": [_percent(w) for w in policy.steps],
        "metrics": metrics,
    }
    return templates, analysis


def _argo_usage(template: dict[str, Any], policy: CanaryPolicy) -> str:
    steps = "\n".join(f"#       - setWeight: {_percent(w)}\n#       - pause: {{duration: {promql_duration(policy.interval_s)}}}"
                      for w in policy.steps)
    name = template["metadata"]["name"]
    given = {a["name"]: a.get("value") for a in template["spec"]["args"]}
    stable, candidate = given.get("stable-version") or "<stable>", given.get("candidate-version") or "<candidate>"
    return (f"# Argo Rollouts AnalysisTemplate written by `gpt-triton canary --emit argo` (same gates and limits).\n"
            f"# Run it as a background analysis of the Rollout; pass the Triton model versions each revision pins:\n"
            f"#   strategy:\n#     canary:\n#       analysis:\n#         templates: [{{templateName: {name}}}]\n"
            f"#         args:\n#           - {{name: stable-version, value: \"{stable}\"}}\n"
            f"#           - {{name: candidate-version, value: \"{candidate}\"}}\n#       steps:\n{steps}\n")


def _flagger_usage(analysis: dict[str, Any], policy: CanaryPolicy) -> str:
    snippet = yaml.safe_dump({"analysis": analysis}, sort_keys=False, width=1000)
    note = ("# Flagger counts a query without data as a failed check (gpt-triton's --missing-data inconclusive "
            "halts instead).\n" if policy.missing_data == "inconclusive" else "")
    return ("# Flagger MetricTemplates written by `gpt-triton canary --emit flagger` (same gates and limits).\n"
            + note + "# Paste this under the Canary's spec (update the versions with each release):\n"
            + "".join(f"#   {line}\n" for line in snippet.splitlines()))


def render(args: argparse.Namespace, policy: CanaryPolicy, interval_s: float) -> str:
    """The YAML ``--emit`` prints: kubectl-appliable documents, usage as comments."""
    namespace = args.namespace or DEFAULT_NAMESPACE
    window_s = window_from_args(args, interval_s)
    config = gate_config_from_args(args)
    stable = None if args.stable_version is None else str(args.stable_version)
    candidate = None if args.candidate_version is None else str(args.candidate_version)
    common = {"model": args.model, "namespace": namespace, "prometheus": args.prometheus, "config": config,
              "policy": policy, "window_s": window_s, "selector": args.selector}
    if args.emit == "argo":
        template = argo_analysis_template(**common, stable=stable, candidate=candidate)
        return _argo_usage(template, policy) + yaml.safe_dump(template, sort_keys=False, width=1000)
    if stable is None or candidate is None:
        raise GptTritonError("--emit flagger needs --stable-version and --candidate-version (the Canary's "
                             "templateVariables; Argo takes them as AnalysisTemplate args instead)")
    templates, analysis = flagger_objects(**common, stable=stable, candidate=candidate)
    return _flagger_usage(analysis, policy) + yaml.safe_dump_all(templates, sort_keys=False, width=1000)


def _write_atomically(path: Path, text: str) -> None:
    if not path.parent.is_dir():
        raise GptTritonError(f"--out {path}: directory {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def emit(args: argparse.Namespace, policy: CanaryPolicy, interval_s: float) -> int:
    text = render(args, policy, interval_s)
    if args.out:
        _write_atomically(Path(args.out), text)
        print(f"wrote {args.emit} objects to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
