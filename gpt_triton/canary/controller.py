"""The canary controller: serve stable and candidate side by side, shift traffic in steps, gate each
step on Prometheus, then promote or roll back without losing a request.

Order of operations is what makes it lossless: traffic leaves a version (``TrafficShifter.set_weight``
returns only once nothing is in flight to it) *before* the version policy unloads it. Every decision is
a JSON line in the decision log, a line on the console and a metric (pushed when a gateway is given).
"""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import tritonclient.grpc as grpcclient
from google.protobuf import json_format, text_format
from prometheus_client import CollectorRegistry, Counter, Gauge, pushadd_to_gateway
from rich.console import Console
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from gpt_triton.canary.gates import GateResult, PromQLGates, combine
from gpt_triton.canary.router import TrafficShifter
from gpt_triton.core.errors import GptTritonError

Outcome = Literal["promoted", "rolled_back", "halted"]
# The command's exit code per outcome, local or on Kubernetes (2 is a user error, raised before any outcome).
EXIT_CODES: dict[Outcome, int] = {"promoted": 0, "rolled_back": 1, "halted": 3}


class VersionServer(Protocol):
    """Makes exactly ``versions`` of the model servable (locally: Triton's version policy)."""

    def serve(self, versions: Sequence[int]) -> None: ...


class TritonVersions:
    """Serves a set of versions of one model by reloading it with a ``specific`` version policy.

    Triton loads only the versions a policy change adds and unloads only those it removes, so the
    version that keeps serving is never interrupted. The override must be a complete config (Triton
    replaces, not merges), so we start from the repository's config.pbtxt.
    """

    def __init__(self, client: grpcclient.InferenceServerClient, model: str, config: model_config_pb2.ModelConfig,
                 timeout_s: float = 120.0) -> None:
        self.client = client
        self.model = model
        self.config = config
        if not self.config.name:
            self.config.name = model
        self.timeout_s = timeout_s

    @classmethod
    def from_repository(cls, client: grpcclient.InferenceServerClient, repository: Path, model: str) -> TritonVersions:
        path = Path(repository) / model / "config.pbtxt"
        config = model_config_pb2.ModelConfig()
        if path.is_file():
            try:
                text_format.Parse(path.read_text(), config)
            except text_format.ParseError as exc:
                raise GptTritonError(f"{path} is not a valid Triton model config: {exc}") from exc
        else:  # a remote server's repository need not be mounted here: ask the server
            try:
                served = client.get_model_config(model, as_json=True)
            except InferenceServerException as exc:
                raise GptTritonError(f"no {path} and Triton does not know model {model!r}: check --repository/--model") from exc
            json_format.ParseDict(served["config"], config, ignore_unknown_fields=True)
        return cls(client, model, config)

    def ready_versions(self) -> list[int]:
        index = self.client.get_model_repository_index(as_json=True)
        return sorted(int(m["version"]) for m in index.get("models", [])
                      if m.get("name") == self.model and m.get("state") == "READY" and m.get("version"))

    def serve(self, versions: Sequence[int]) -> None:
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(self.config)
        config.version_policy.Clear()
        config.version_policy.specific.versions.extend(int(v) for v in versions)
        try:
            self.client.load_model(self.model, config=json_format.MessageToJson(config, preserving_proto_field_name=True))
        except InferenceServerException as exc:
            raise GptTritonError(f"Triton could not serve versions {list(versions)} of {self.model!r}: {exc.message()}") from exc
        deadline = time.monotonic() + self.timeout_s
        wanted = sorted(int(v) for v in versions)
        while self.ready_versions() != wanted:
            if time.monotonic() > deadline:
                raise GptTritonError(f"{self.model!r} serves versions {self.ready_versions()}, not {wanted}, "
                                     f"{self.timeout_s:.0f} s after the policy change")
            time.sleep(0.05)  # polling interval of a condition with a deadline


class DecisionLog:
    """JSON lines (one object per decision, flushed as written) plus a rich console line."""

    def __init__(self, path: Path | None = None, console: Console | None = None) -> None:
        self.path = path
        self.console = console or Console(stderr=True)
        self.records: list[dict[str, Any]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"time": time.time(), "event": event, **fields}
        self.records.append(entry)
        if self.path is not None:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(entry) + "\n")
        gates = fields.get("gates")
        # The model and versions are named once (first line); later lines show what changed.
        quiet = {"gates"} if not self.records[:-1] else {"gates", "model", "stable", "candidate"}
        summary = " ".join(f"{k}={v}" for k, v in fields.items() if k not in quiet)
        self.console.print(f"[bold]canary[/bold] {event} {summary}", highlight=False)
        for gate in gates or []:
            colour = {"pass": "green", "fail": "red"}.get(gate["verdict"], "yellow")
            value = "no data" if gate["value"] is None else f"{gate['value']:.4g}"
            self.console.print(f"    [{colour}]{gate['verdict']:<12}[/{colour}] {gate['gate']:<14} {value} "
                               f"(threshold {gate['threshold']:g}) {gate['detail']}", highlight=False)
        return entry


class CanaryMetrics:
    """The canary's decisions as Prometheus metrics, optionally pushed (grouped by job, namespace and model).

    Each push replaces the group's series, so ``gpt_triton_canary_decision_info`` names the latest decision
    only: the ``GptTritonCanaryRolledBack`` alert fires on a rollback and clears when the next canary of
    the model starts (or when the operator deletes the group, see docs/canary.md).
    """

    def __init__(self, model: str, stable: str, candidate: str, pushgateway: str | None = None,
                 job: str = "gpt_triton_canary", namespace: str = "") -> None:
        self.model, self.stable, self.candidate = model, str(stable), str(candidate)
        self.pushgateway, self.job = pushgateway, job
        # The Pushgateway adds grouping labels to every series of the group: namespace comes from here.
        self.grouping_key = {"namespace": namespace, "model": model} if namespace else {"model": model}
        self.registry = CollectorRegistry()
        pair = ("model", "stable", "candidate")
        self.weight = Gauge("gpt_triton_canary_weight", "Share of requests sent to the candidate.", pair,
                            registry=self.registry)
        self.checks = Counter("gpt_triton_canary_gate_checks", "Gate evaluations by verdict.",
                              ("model", "gate", "verdict"), registry=self.registry)
        self.value = Gauge("gpt_triton_canary_gate_value", "Last value of each gate (NaN: no data).",
                           ("model", "gate"), registry=self.registry)
        self.failed = Gauge("gpt_triton_canary_failed_checks", "Failed checks so far in this canary.", ("model",),
                            registry=self.registry)
        self.decision = Gauge("gpt_triton_canary_decision_info", "The latest decision (value 1).",
                              (*pair, "decision"), registry=self.registry)
        self.decided = Gauge("gpt_triton_canary_last_decision_timestamp_seconds", "When the latest decision was made.",
                             ("model",), registry=self.registry)

    def observe(self, decision: str, weight: float, failed_checks: int, gates: Sequence[GateResult] = ()) -> None:
        self.weight.labels(self.model, self.stable, self.candidate).set(weight)
        self.failed.labels(self.model).set(failed_checks)
        for gate in gates:
            self.checks.labels(self.model, gate.gate, gate.verdict).inc()
            self.value.labels(self.model, gate.gate).set(float("nan") if gate.value is None else gate.value)
        self.decision.clear()  # one decision at a time: the info series names the current one
        self.decision.labels(self.model, self.stable, self.candidate, decision).set(1)
        self.decided.labels(self.model).set(time.time())

    def push(self) -> None:
        if self.pushgateway is None:
            return
        try:
            pushadd_to_gateway(self.pushgateway, job=self.job, registry=self.registry,
                               grouping_key=self.grouping_key, timeout=5.0)
        except (urllib.error.URLError, OSError) as exc:
            raise GptTritonError(f"cannot push canary metrics to Pushgateway {self.pushgateway}: {exc}") from exc


@dataclass
class CanaryPolicy:
    steps: list[float]  # candidate weights in (0, 1], increasing
    interval_s: float = 10.0
    failure_limit: int = 1  # failed checks (cumulative) that trigger the rollback
    missing_data: Literal["inconclusive", "fail"] = "inconclusive"
    inconclusive_limit: int = 3  # consecutive inconclusive checks that halt the canary

    def __post_init__(self) -> None:
        if not self.steps or any(not 0.0 < s <= 1.0 for s in self.steps) or sorted(self.steps) != self.steps:
            raise GptTritonError(f"canary steps {self.steps} must be increasing percentages in (0, 100], e.g. 10,25,50,100")
        if self.failure_limit < 1 or self.inconclusive_limit < 1:
            raise GptTritonError("--failure-limit and --inconclusive-limit must be at least 1")


@dataclass
class CanaryResult:
    outcome: Outcome
    failed_checks: int
    checks: int
    served_versions: list[int] = field(default_factory=list)


class CanaryController:
    def __init__(
        self, *, model: str, stable: int, candidate: int, shifter: TrafficShifter, versions: VersionServer,
        gates: PromQLGates, policy: CanaryPolicy, log: DecisionLog, metrics: CanaryMetrics | None = None,
        wait: Callable[[float], None] = time.sleep, warmup: Callable[[], None] | None = None,
    ) -> None:
        self.model, self.stable, self.candidate = model, int(stable), int(candidate)
        self.shifter, self.versions, self.gates, self.policy = shifter, versions, gates, policy
        self.log = log
        self.metrics = metrics or CanaryMetrics(model, str(stable), str(candidate))
        self.wait = wait  # the analysis interval: real time for Prometheus to scrape the new traffic mix
        # Sends a few requests to the candidate before it gets traffic, so its cold start (first-run
        # allocations, lazy initialisation) falls before the first gate's window, not inside it.
        self.warmup = warmup
        self.weight = 0.0
        self.failed = 0
        self.checks = 0

    def _decide(self, decision: str, gates: Sequence[GateResult] = (), **fields: Any) -> None:
        self.log.record(decision, model=self.model, stable=self.stable, candidate=self.candidate,
                        weight=self.weight, failed_checks=self.failed, **fields,
                        **({"gates": [g.as_dict() for g in gates]} if gates else {}))
        self.metrics.observe(decision, self.weight, self.failed, gates)
        try:
            self.metrics.push()
        except GptTritonError as exc:  # losing a metric must not strand traffic mid-canary
            self.log.record("push_failed", error=str(exc))

    def _shift(self, weight: float) -> None:
        self.shifter.set_weight(weight)
        self.weight = weight

    def run(self) -> CanaryResult:
        self.metrics.push()  # an unreachable gateway is reported before anything changes
        try:
            self.versions.serve([self.stable, self.candidate])
        except GptTritonError as exc:
            # Triton keeps the stable version serving when a candidate fails to load; make sure of it.
            self._decide("candidate_failed_to_load", error=str(exc))
            self.versions.serve([self.stable])
            raise
        self._decide("serving_both", policy=f"specific {{ versions: [{self.stable}, {self.candidate}] }}")
        try:
            if self.warmup is not None:
                self.warmup()
            return self._analyse()
        except BaseException as exc:
            # Whatever went wrong (Prometheus down, Ctrl-C), leave the stable version serving alone;
            # a query error is not "no data", so it aborts rather than counting as a check.
            try:
                self._decide("aborted", error=str(exc) or type(exc).__name__)
                self._rollback("rolled_back", event="rolled_back_after_abort")
            except Exception as cleanup:  # report the original error, not the cleanup's
                self.log.record("rollback_failed", error=str(cleanup))
            raise

    def _analyse(self) -> CanaryResult:
        stable_reference: float | None = None
        inconclusive_run = 0
        step = 0
        while step < len(self.policy.steps):
            weight = self.policy.steps[step]
            if weight != self.weight:
                self._shift(weight)
                self._decide("shift", step=step + 1)
            self.wait(self.policy.interval_s)
            results, stable_ms = self.gates.evaluate(stable_reference)
            self.checks += 1
            verdict = combine(results)
            if verdict == "inconclusive" and self.policy.missing_data == "fail":
                verdict = "fail"  # Flagger's rule: a query without data is a failed check
            if verdict == "fail":
                self.failed += 1
            self._decide(f"check_{verdict}", results, step=step + 1)
            if verdict == "pass":
                stable_reference = stable_ms if stable_ms is not None else stable_reference
                inconclusive_run = 0
                step += 1
            elif verdict == "fail" and self.failed >= self.policy.failure_limit:
                return self._rollback("rolled_back")
            elif verdict == "inconclusive":
                inconclusive_run += 1
                if inconclusive_run >= self.policy.inconclusive_limit:
                    return self._rollback("halted")
            # a failed or inconclusive check below its limit: stay at this weight and check again
        return self._promote()

    def _promote(self) -> CanaryResult:
        if self.weight != 1.0:
            self._shift(1.0)
        self.versions.serve([self.candidate])  # stable is unloaded only after no request is in flight to it
        self._decide("promoted", policy=f"specific {{ versions: [{self.candidate}] }}")
        return CanaryResult("promoted", self.failed, self.checks, [self.candidate])

    def _rollback(self, outcome: Outcome, event: str | None = None) -> CanaryResult:
        self._shift(0.0)  # traffic back to stable and the candidate drained before it is unloaded
        self.versions.serve([self.stable])
        self._decide(event or ("halted" if outcome == "halted" else "rolled_back"),
                     policy=f"specific {{ versions: [{self.stable}] }}")
        return CanaryResult(outcome, self.failed, self.checks, [self.stable])
