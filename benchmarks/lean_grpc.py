"""Which concurrency-1 gRPC loop is as lean as perf_analyzer's? (a benchmark script, not a test; issue 16)

One embedded Triton serves the conv_attention variant tunes select (ONNX Runtime, spinning off; p50
about 1.2 ms, where a client's own cost shows most). Every round runs, back to back in an order that
flips each round, one window of each client variant (a fresh process each, ``--requests`` timed calls
after 200 untimed) and one perf_analyzer window over gRPC; each variant's p50 is divided by
perf_analyzer's of the same round. Variants:

* ``frames``: the tuner's loop (``gpt_triton/measure/grpc_lean.py``: HTTP/2 frames on a socket);
* ``grpcio``: grpcio's blocking unary call on a plain channel (the loop before it);
* ``grpcio-nobdp``: the same with ``grpc.http2.bdp_probe`` off;
* ``grpcio-poll``: the same with ``GRPC_POLL_STRATEGY=poll``.

    .venv/bin/python benchmarks/lean_grpc.py [--rounds 8] [--requests 1500] [--variants frames,grpcio,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.perf_analyzer_agreement import BUILDERS, ort_candidate  # noqa: E402
from gpt_triton.core.measurements import LoadProfile  # noqa: E402
from gpt_triton.core.model_info import inspect_model, resolve_shapes  # noqa: E402
from gpt_triton.deploy import write_model  # noqa: E402
from gpt_triton.measure.grpc_lean import MODEL_INFER, GrpcConnection  # noqa: E402
from gpt_triton.measure.perf_analyzer import PerfAnalyzerClient, find_perf_analyzer  # noqa: E402
from gpt_triton.measure.sender import serialised_request  # noqa: E402
from gpt_triton.server import EmbeddedTriton  # noqa: E402

VARIANTS = ("frames", "grpcio", "grpcio-nobdp", "grpcio-poll")


def payloads(shapes: dict[str, list[int]]) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()} for _ in range(8)]


def client(variant: str, url: str, model: str, count: int, shapes: dict[str, list[int]]) -> None:
    """One window of ``variant``: prints the timed latencies (ms) as JSON."""
    wire = [serialised_request(model, p, None) for p in payloads(shapes)]
    if variant == "frames":
        call = GrpcConnection(url).call
    else:
        import grpc

        options = [("grpc.enable_retries", 0), ("grpc.optimization_target", "latency")]
        if variant == "grpcio-nobdp":
            options.append(("grpc.http2.bdp_probe", 0))
        call = grpc.insecure_channel(url, options=options).unary_unary(MODEL_INFER)
    for i in range(200):
        call(wire[i % len(wire)])
    out = []
    for i in range(count):
        start = time.monotonic()
        call(wire[i % len(wire)])
        out.append((time.monotonic() - start) * 1e3)
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--client", nargs=4, metavar=("VARIANT", "URL", "MODEL", "SHAPES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        variant, url, model, shapes = args.client
        client(variant, url, model, args.requests, json.loads(shapes))
        return
    variants = args.variants.split(",")
    tool = find_perf_analyzer(required=True)
    assert tool is not None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_path = BUILDERS["conv_attention"](root / "model" / "model.onnx")
        info = inspect_model(model_path)
        shapes = resolve_shapes(info, {})
        candidate = ort_candidate("nospin", model_path, "ORT_ENABLE_ALL", "0", False)
        assert candidate.artifact is not None
        with EmbeddedTriton(repository=root / "repo", workdir=root / "work") as server:
            deploy = write_model(root / "repo", "lean", info, shapes, candidate.artifact, candidate.serving, "python")
            server.load(root / "repo" / deploy.model_name)
            analyzer = PerfAnalyzerClient(tool, "grpc")
            requests = payloads({k: list(s) for k, s in shapes.items()})
            shape_arg = json.dumps({k: list(s) for k, s in shapes.items()})
            p50: dict[str, list[float]] = {v: [] for v in [*variants, "perf_analyzer"]}
            for r in range(args.rounds):
                order = [*variants, "perf_analyzer"]
                for v in order if r % 2 == 0 else order[::-1]:
                    if v == "perf_analyzer":
                        sample = analyzer.window(server.grpc_url, deploy.model_name, requests,
                                                 LoadProfile(concurrency=1), 1.5, args.requests)
                        p50[v].append(float(np.median(sample.latencies_ms)))
                        continue
                    env = dict(os.environ, **({"GRPC_POLL_STRATEGY": "poll"} if v == "grpcio-poll" else {}))
                    out = subprocess.run([sys.executable, __file__, "--requests", str(args.requests), "--client", v,
                                          server.grpc_url, deploy.model_name, shape_arg],
                                         capture_output=True, text=True, env=env, check=True).stdout
                    p50[v].append(float(np.median(json.loads(out))))
                print(f"round {r + 1}: " + ", ".join(f"{v} {x[-1]:.3f}" for v, x in p50.items()) + " ms p50", flush=True)
    analyzer_p50 = np.array(p50["perf_analyzer"])
    print(f"\nconv_attention (spinning off), {args.rounds} rounds of {args.requests} requests per client; "
          f"perf_analyzer p50 {np.median(analyzer_p50):.3f} ms")
    for v in variants:
        ratio = np.array(p50[v]) / analyzer_p50
        print(f"{v:13s} p50 {np.median(p50[v]):.3f} ms; / perf_analyzer's of the same round: median {np.median(ratio):.3f}, "
              f"range {ratio.min():.3f}-{ratio.max():.3f}")


if __name__ == "__main__":
    main()
