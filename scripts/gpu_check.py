"""`make gpu-check`: the production path on a GPU node, end to end, once, by hand. Not run in CI.

On a machine with an NVIDIA GPU, TensorRT (the `tensorrt` wheel whose version the serving image ships) and the
NGC Triton reachable at --triton-url (explicit model control mode), this script:

1. builds the example CNN (gpt_triton.testing.models.build_resnet_cnn), no download;
2. tunes it on that Triton with the tensorrt family (plus the ONNX Runtime baseline every run measures):
   builds plans, deploys them with the tensorrt backend, screens and measures them;
3. promotes the best measured TensorRT candidate (whatever the run's own winner) into a scratch
   repository, signed, with the backend it was measured with, and loads that version on the Triton;
4. verifies the repository against this node's TensorRT and GPU (`gpt-triton verify` semantics);

and prints what it saw at each step. Where a prerequisite is missing (no GPU, no TensorRT, the fake
TensorRT, no Triton, a Triton without the tensorrt backend, a builder TensorRT the image does not ship) it
exits 2 with one line saying which. Exit 1: it ran, and a step did not do what it should.

    python scripts/gpu_check.py --triton-url localhost:8001 [--image nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3]
                                [--tensorrt-version 10.13.3.9] [--out runs/gpu-check]
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np


def _stop(message: str) -> NoReturn:
    print(f"gpu-check: {message}", file=sys.stderr)
    raise SystemExit(2)


def preflight(args: argparse.Namespace) -> str:
    """The builder's TensorRT version, or exit 2 naming the first missing prerequisite."""
    from gpt_triton.core.errors import GptTritonError
    from gpt_triton.environment import device_fingerprint
    from gpt_triton.routes import TensorRtFamily
    from gpt_triton.server import RemoteTriton
    from gpt_triton.tensorrt_support import builder_version, check_builder

    gpus = device_fingerprint()["gpus"]
    if not gpus:
        _stop("no NVIDIA GPU here (nvidia-smi lists none); run this on the GPU node")
    builder = builder_version()
    if builder is None:
        _stop("TensorRT is not installed: pip install 'gpt-triton[tensorrt]' with the TensorRT the serving image ships")
    if "gpt_triton.testing.fake_tensorrt" in type(sys.modules["tensorrt"]).__module__:
        _stop("the fake TensorRT is installed as `tensorrt`: this check needs NVIDIA's")
    available, why = TensorRtFamily().availability()
    if not available:
        _stop(f"the tensorrt family is unavailable: {why}")
    server = RemoteTriton(args.triton_url)
    try:
        server.start()
    except GptTritonError as exc:
        _stop(f"{exc} (start the NGC Triton with --model-control-mode=explicit)")
    try:
        if "tensorrt" not in server.native_backends:
            _stop(f"the Triton at {args.triton_url} has no tensorrt backend (it has {sorted(server.native_backends)})")
        print(f"Triton {server.version()} at {args.triton_url}: backends {sorted(server.native_backends)}")
    finally:
        server.stop()
    problem = check_builder(builder, args.image, args.tensorrt_version)
    if problem:
        _stop(problem)
    print(f"GPU {gpus[0]['name']} (compute capability {gpus[0]['compute_capability']}, driver {gpus[0]['driver']}); "
          f"builder TensorRT {builder}; serving image {args.image}")
    return builder


def spec_for(args: argparse.Namespace) -> Any:
    from gpt_triton.core.spec import TuneSpec

    return TuneSpec.model_validate({
        "search": {"mode": "fast", "max_builds": args.max_builds, "build_timeout_s": 900},
        "families": {
            "onnxruntime": {"knobs": {"precision": "fp32", "intra_op_threads": 0, "graph_optimization_level": "all"}},
            "openvino": {"enabled": False}, "graph": {"enabled": False}, "onnxruntime_gpu": {"enabled": False},
            "serving": {"knobs": {"instance_count": 1, "dynamic_batching": True, "max_queue_delay_us": 0,
                                  "preferred_batch_sizes": {"value": []}, "max_batch_size": {"value": None},
                                  "cuda_graphs": [False, True]}},
        },
        "measure": {"window_s": 1.0, "min_windows": 3, "max_windows": 6, "remeasure_windows": 6},
        "promotion": {"require_gain": False},
        "server": {"triton_url": args.triton_url, "image": args.image, "tensorrt_version": args.tensorrt_version},
    })


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton-url", required=True, help="HOST:PORT (gRPC) of the NGC Triton, explicit model control")
    parser.add_argument("--image", default=None, help="the Triton image serving there (default: the chart's)")
    parser.add_argument("--tensorrt-version", help="the TensorRT that image ships, when the support table lacks it")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-check"))
    parser.add_argument("--max-builds", type=int, default=8)
    args = parser.parse_args(argv)

    from gpt_triton.core.spec import DEFAULT_TRITON_IMAGE

    args.image = args.image or DEFAULT_TRITON_IMAGE
    builder = preflight(args)

    from gpt_triton.core.objective import measured_value
    from gpt_triton.pipeline import TuneOptions, tune
    from gpt_triton.promote.candidate import promote_candidate
    from gpt_triton.promote.verify import verify_repository
    from gpt_triton.server import RemoteTriton
    from gpt_triton.tensorrt_support import serving_tensorrt
    from gpt_triton.testing.models import build_resnet_cnn

    out = args.out.resolve()
    model = build_resnet_cnn(out / "resnet_cnn.onnx")
    print(f"1. model {model} ({model.stat().st_size / 1e6:.1f} MB)")
    report = tune(TuneOptions(model=model, spec=spec_for(args), out=out / "run", repository=out / "repository",
                              triton_url=args.triton_url, promote=False))
    print(f"2. tuned on Triton {report.triton_version}: {len(report.candidates)} candidates; decisions:")
    for line in report.decisions:
        if line.startswith("search:") or "unavailable" in line:
            print(f"   {line}")
    objective = report.spec.objective
    for c in report.candidates:
        value = measured_value(c, objective)
        p99 = f"{value:.2f} ms" if value is not None else "-"
        backend = c.deploy.backend if c.deploy else "-"
        notes = "; ".join(c.deploy.notes) if c.deploy else ""
        print(f"   {c.id} {c.family:12} {c.status:10} backend={backend:11} {objective.metric}={p99:10} {c.route_text()}"
              + (f"  [{c.reason}]" if c.reason else "") + (f"  ({notes})" if notes else ""))
    plans = [c for c in report.candidates if c.family == "tensorrt" and measured_value(c, objective) is not None]
    if not plans:
        print("gpu-check: FAILED: no TensorRT candidate was measured (see the reasons above)", file=sys.stderr)
        return 1
    best = min(plans, key=lambda c: measured_value(c, objective) or float("inf"))
    key = secrets.token_bytes(32)
    repository = out / "promoted"
    promoted = promote_candidate(repository, "resnet_cnn", report, best, keep_versions=3, signing_key=key)
    provenance = json.loads((promoted.path / "provenance.json").read_text())
    print(f"3. promoted {best.id} as {promoted.path} with backend {provenance['backend']}; tensorrt provenance:")
    print(f"   {json.dumps(provenance.get('tensorrt'))}")
    server = RemoteTriton(args.triton_url)
    with server:
        server.load(repository / "resnet_cnn")
        try:
            import tritonclient.grpc as grpcclient

            shape = report.shapes["images"]
            request = grpcclient.InferInput("images", shape, "FP32")
            request.set_data_from_numpy(np.zeros(shape, np.float32))
            result = server.client().infer("resnet_cnn", [request], model_version=str(promoted.version))
            print(f"   served version {promoted.version}: outputs {[o.name for o in result.get_response().outputs]}")
        finally:
            server.unload("resnet_cnn")
    serving = serving_tensorrt(args.image, args.tensorrt_version) or builder
    checks = verify_repository(repository, "resnet_cnn", key, serving)
    for check in checks:
        print(f"4. verify {check.model}/{check.version}: signatures {'ok' if check.signed_ok else check.signature_error}; "
              f"{check.verdict.status} {'; '.join(check.verdict.reasons)}")
    if not all(c.signed_ok and c.verdict.status == "valid" for c in checks):
        print("gpu-check: FAILED: the promoted plan does not verify on this node", file=sys.stderr)
        return 1
    print("gpu-check: OK: a TensorRT candidate was built, served, measured, promoted, loaded and verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
