"""``gpt-triton canary``: roll a candidate version out next to the stable one, gated on Prometheus.

Locally the command itself is the traffic: it sends a steady stream (``--traffic`` npz of inputs, or
synthetic inputs shaped from the model config) through the weighted router. Exit codes: 0 promoted,
1 rolled back, 3 halted on missing data (also rolled back), 2 user error.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from gpt_triton.canary.controller import (
    EXIT_CODES,
    CanaryController,
    CanaryMetrics,
    CanaryPolicy,
    CanaryResult,
    DecisionLog,
    TritonVersions,
)
from gpt_triton.canary.gates import PromQLGates, gate_config_from_args, window_from_args
from gpt_triton.canary.router import LocalRouterShifter, TrafficLoop, WeightedRouter, make_inputs
from gpt_triton.core.errors import GptTritonError, TransientError
from gpt_triton.core.spec import parse_duration
from gpt_triton.metrics.prometheus import PrometheusClient


def parse_steps(text: str) -> list[float]:
    """``10,25,50,100`` (percent) -> [0.1, 0.25, 0.5, 1.0]."""
    try:
        return [float(part) / 100.0 for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise GptTritonError(f"bad --steps {text!r}: use comma-separated percentages such as 10,25,50,100") from exc


def _input_dtype(tensor: model_config_pb2.ModelInput) -> np.dtype:
    name = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    dtype = triton_to_np_dtype("BYTES" if name == "STRING" else name)
    if dtype is None or dtype == np.object_:
        raise GptTritonError(f"input {tensor.name!r} is {name}: synthetic traffic supports numeric inputs; pass --traffic")
    return np.dtype(dtype)


def synthetic_requests(config: model_config_pb2.ModelConfig, count: int = 16, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random requests shaped like the model's inputs (dynamic dims -> 1, batch of 1 when batching)."""
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(count):
        request = {}
        for tensor in config.input:
            shape = [1] * (config.max_batch_size > 0) + [d if d > 0 else 1 for d in tensor.dims]
            dtype = _input_dtype(tensor)
            if np.issubdtype(dtype, np.floating):
                request[tensor.name] = rng.standard_normal(shape).astype(dtype)
            elif dtype == np.bool_:
                request[tensor.name] = rng.integers(0, 2, shape).astype(dtype)
            else:
                request[tensor.name] = rng.integers(0, 10, shape).astype(dtype)
        requests.append(request)
    return requests


def npz_requests(path: Path, config: model_config_pb2.ModelConfig) -> list[dict[str, np.ndarray]]:
    """Requests from an npz of input name -> stacked array (axis 0 = request)."""
    if not path.is_file():
        raise GptTritonError(f"--traffic file not found: {path}")
    try:
        data = dict(np.load(path))
    except (OSError, ValueError) as exc:
        raise GptTritonError(f"--traffic {path} is not an npz of input arrays: {exc}") from exc
    names = [t.name for t in config.input]
    missing = [n for n in names if n not in data]
    if missing:
        raise GptTritonError(f"--traffic {path} lacks inputs {missing}; it has {sorted(data)}")
    count = min(len(data[n]) for n in names)
    batched = config.max_batch_size > 0
    return [{n: data[n][i:i + 1] if batched else data[n][i] for n in names} for i in range(count)]


def _infer(client: grpcclient.InferenceServerClient, model: str, version: str, request: dict[str, np.ndarray]) -> None:
    try:
        client.infer(model, make_inputs(request), model_version=version)
    except InferenceServerException as exc:
        raise GptTritonError(f"version {version} of {model!r} fails a warm-up request: {exc.message()}") from exc


def _pick_stable(versions: TritonVersions, candidate: int) -> int:
    ready = [v for v in versions.ready_versions() if v != candidate]
    if not ready:
        raise GptTritonError(f"no version of {versions.model!r} other than {candidate} is serving: pass --stable-version")
    return max(ready)


def _run_canary(
    args: argparse.Namespace, client: grpcclient.InferenceServerClient, prometheus: PrometheusClient,
    policy: CanaryPolicy, interval: float,
) -> tuple[DecisionLog, CanaryResult, TrafficLoop]:
    try:
        if not client.is_server_live():
            raise TransientError(f"Triton at {args.triton_url} is not live")
    except InferenceServerException as exc:
        raise TransientError(f"Triton at {args.triton_url} is unreachable ({exc.message()}); check --triton-url") from exc
    versions = TritonVersions.from_repository(client, Path(args.repository), args.model)
    candidate = int(args.candidate_version)
    stable = int(args.stable_version) if args.stable_version is not None else _pick_stable(versions, candidate)
    if stable not in versions.ready_versions():
        versions.serve([stable])  # traffic starts on stable, so it must be serving first
    requests = npz_requests(Path(args.traffic), versions.config) if args.traffic else synthetic_requests(versions.config)
    router = WeightedRouter(str(stable), str(candidate), seed=args.seed)
    gates = PromQLGates(
        prometheus, model=args.model, stable=str(stable), candidate=str(candidate),
        window_s=window_from_args(args, interval), selector=args.selector, namespace=args.namespace or "",
        config=gate_config_from_args(args),
    )
    log_path = Path(args.log) if args.log else Path("runs/canary") / f"{args.model}-v{candidate}-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
    log = DecisionLog(log_path)
    metrics = CanaryMetrics(args.model, str(stable), str(candidate), pushgateway=args.pushgateway,
                            namespace=args.namespace or "")

    def warmup() -> None:
        for request in (requests * args.warmup)[:args.warmup]:
            _infer(client, args.model, str(candidate), request)

    controller = CanaryController(
        model=args.model, stable=stable, candidate=candidate, shifter=LocalRouterShifter(router), versions=versions,
        gates=gates, policy=policy, log=log, metrics=metrics, warmup=warmup if args.warmup > 0 else None,
    )
    traffic = TrafficLoop(args.triton_url, args.model, router, requests, rate=args.rate, concurrency=args.concurrency)
    with traffic:
        result = controller.run()
    return log, result, traffic


def run(args: argparse.Namespace) -> int:
    steps = parse_steps(args.steps)
    interval = parse_duration(args.interval)
    policy = CanaryPolicy(steps=steps, interval_s=interval, failure_limit=args.failure_limit,
                          missing_data=args.missing_data, inconclusive_limit=args.inconclusive_limit)
    window_from_args(args, interval)  # a window too short for the scrape interval is bad input, before anything runs
    if args.emit:  # the same gates for Argo Rollouts / Flagger: nothing is contacted
        from gpt_triton.canary.emit import emit

        return emit(args, policy, interval)
    if args.candidate_version is None:
        raise GptTritonError("--candidate-version is required (except with --emit)")
    if args.k8s_deployments:  # Kubernetes: the chart's Deployments pin the versions, real clients are the traffic
        from gpt_triton.canary.k8s_mode import run_k8s

        return run_k8s(args, policy, interval)
    if not args.repository:
        raise GptTritonError("--repository is required (or --k8s-deployments STABLE,CANARY to canary on Kubernetes)")
    repository = Path(args.repository)
    if (repository / args.model).is_dir() and not (repository / args.model / str(args.candidate_version)).is_dir():
        raise GptTritonError(f"{repository / args.model} has no version directory {args.candidate_version}: "
                             "promote the candidate into the repository first")
    prometheus = PrometheusClient(args.prometheus)
    if not prometheus.ready():
        raise GptTritonError(f"Prometheus at {prometheus.url} is not ready; check --prometheus")
    client = grpcclient.InferenceServerClient(args.triton_url)
    try:
        log, result, traffic = _run_canary(args, client, prometheus, policy, interval)
    finally:
        client.close()
    log.record("traffic", ok=traffic.ok, failed=traffic.failed, errors=traffic.errors)
    log.console.print(f"[bold]canary {result.outcome}[/bold]: {args.model} now serves version(s) "
                      f"{result.served_versions}; {result.failed_checks} failed of {result.checks} checks; "
                      f"{traffic.total_failed} failed requests; log {log.path}")
    return EXIT_CODES[result.outcome]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("canary", help="roll out a candidate version with Prometheus-gated traffic steps")
    p.add_argument("--repository", help="Triton model repository holding the model (not with --k8s-deployments)")
    p.add_argument("--model", required=True, help="model name in the repository")
    p.add_argument("--candidate-version", type=int, default=None, help="the version to roll out (required unless --emit)")
    p.add_argument("--stable-version", type=int, default=None, help="default: the newest other version serving")
    p.add_argument("--prometheus", required=True, help="Prometheus URL that scrapes this Triton's metrics")
    p.add_argument("--triton-url", default="127.0.0.1:8001", help="Triton gRPC HOST:PORT")
    p.add_argument("--steps", default="10,25,50,100", help="candidate traffic percentages")
    p.add_argument("--interval", default="1m", help="analysis interval: wait this long at each step before a check")
    p.add_argument("--scrape-interval", default="15s", help="Prometheus's scrape interval for Triton (sets the default window)")
    p.add_argument("--window", default=None,
                   help="PromQL rate window (default: 4 scrape intervals, or --interval if longer; at least 4 scrapes)")
    p.add_argument("--failure-limit", type=int, default=1, help="failed checks that trigger a rollback")
    p.add_argument("--inconclusive-limit", type=int, default=3, help="consecutive checks without data that halt")
    p.add_argument("--latency-stat", choices=["p99", "mean"], default="p99",
                   help="latency gated: p99 from Triton's summaries (worst pod) or the mean from its counters")
    p.add_argument("--max-latency-ratio", type=float, default=1.1, help="candidate/stable latency at most (0 disables)")
    p.add_argument("--max-latency-ms", type=float, default=None, help="candidate latency at most (ms)")
    p.add_argument("--max-failure-rate", type=float, default=0.01)
    p.add_argument("--max-queue-ratio", type=float, default=None, help="candidate queue/compute time at most")
    p.add_argument("--missing-data", choices=["inconclusive", "fail"], default="inconclusive")
    p.add_argument("--selector", default="", help='extra PromQL label matchers, e.g. job="triton"')
    p.add_argument("--namespace", default=None,
                   help='namespace label every query selects (default: "gpt-triton" with --k8s-deployments or --emit, '
                        'else series without the label, as a Prometheus scraping Triton directly has them)')
    p.add_argument("--emit", choices=["argo", "flagger"], default=None,
                   help="print the same gates as an Argo Rollouts AnalysisTemplate or Flagger MetricTemplates + "
                        "Canary analysis, and exit (GitOps teams: use these instead of the replica shifter)")
    p.add_argument("--out", default=None, help="with --emit: write the YAML here instead of stdout")
    p.add_argument("--traffic", default=None, help="npz of inputs (name -> stacked array); default synthetic")
    p.add_argument("--rate", type=float, default=20.0, help="requests per second sent during the canary")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--warmup", type=int, default=5, help="requests sent to the candidate before it gets traffic")
    p.add_argument("--seed", type=int, default=None, help="seed of the router's version choice")
    p.add_argument("--pushgateway", default=None, help="push decision metrics to this Pushgateway")
    p.add_argument("--log", default=None, help="decision log (JSON lines); default runs/canary/<model>-v<V>-<time>.jsonl")
    k8s = p.add_argument_group("Kubernetes (charts/gpt-triton Deployments; no traffic is sent, clients hit the Service)")
    k8s.add_argument("--k8s-deployments", metavar="STABLE,CANARY", default=None,
                     help="shift replicas between these Deployments instead of routing locally")
    k8s.add_argument("--kube-server", default=None, help="API server URL (default: KUBECONFIG, then in-cluster)")
    k8s.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k8s.add_argument("--kube-context", default=None, help="kubeconfig context")
    k8s.add_argument("--total-replicas", type=int, default=None, help="pods shared by stable+canary (default: their sum)")
    k8s.add_argument("--rollout-timeout", default="10m", help="wait this long for each scale or rollout")
    k8s.add_argument("--kube-poll", type=float, default=2.0, help=argparse.SUPPRESS)  # Deployment status poll (s)
    p.set_defaults(func=run)
