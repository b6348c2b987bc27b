"""Serving overhead of the python-backend runtime adapter: in-process vs served latency at concurrency 1.

Usage: ``python benchmarks/overhead.py [--model PATH] [--requests 200] [--rounds 4]``

For each model (``--model``, default the ResNet-style CNN built into a temp dir, plus the conv+attention
demo model) the default route (ONNX Runtime defaults) is timed in this process and, in the same run,
served by an embedded Triton through the adapter and timed through one reused tritonclient gRPC client.
Blocks of in-process and served requests alternate (``--rounds``) so drift on this shared machine hits
both sides alike. Triton's statistics API splits each served request into queue, compute input,
compute infer (the adapter's ``execute``: runtime plus tensor wrapping) and compute output; the rest
of the client-side time is gRPC transport, protobuf (de)serialisation and the client library.

Where the remaining overhead goes (2-core EPYC shared with other jobs; default route, 300 requests per
side, load average ~2; numbers move by 10-30% between runs on this box):

    model           in-process  served  ratio  floor  floor-infer  comp.infer  comp.output  outside-server
    resnet_cnn         19.35    21.02   1.09x  0.76      0.14        27.6*        1.09          0.41
    conv_attention      0.65     1.41   2.19x  0.46      0.08         1.07        0.08          0.45
    (* means, inflated by a few slow outliers; the medians are the first columns)

* floor (~0.45-0.75 ms): Triton + python backend + gRPC for the same tensors without any runtime. Of it,
  the stub round trip (shared-memory IPC, "floor infer") is only ~0.1 ms; the rest is gRPC, protobuf and
  the Python client on both ends ("outside server" ~0.4 ms) plus Triton's request handling. It is a
  fixed cost per request, so the 1.10x target holds for models from ~5-10 ms up (the CNN: 1.09x) and
  cannot hold for a sub-millisecond model on any Triton + gRPC path (conv_attention: 2.2x, of which
  0.46 ms is the floor).
* the runtime itself runs ~0.3 ms slower inside the stub for the small model: between two served
  requests ONNX Runtime's pool threads stop spinning and go to sleep, so every parallel section pays a
  wake-up that back-to-back in-process runs never see. ``session.force_spinning_stop=1`` served
  conv_attention in 1.54 instead of 1.72 ms; for the CNN it halved compute output (no spinning threads
  competing with the response) but lengthened compute infer about as much. ``allow_spinning=0`` helps
  only on a loaded box (conv_attention 2.21 -> 2.03 ms at load average 8).
  Both are route knobs, not adapter defaults, so what is measured is what gets promoted.
* compute output (~0.1 ms small, ~1 ms for the CNN with default spinning): copying outputs to shared
  memory while the runtime's threads still spin. Inputs are read in place (``as_numpy`` views).
* under heavy load (load average 8-10) the default 2-thread session collapses in both places alike
  (CNN 19 -> 130-170 ms, ratio stays ~1.0): compare runs only at similar load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from rich.console import Console
from rich.table import Table

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.deploy import write_model
from gpt_triton.runtimes import Runner, RuntimeLayerError, open_runner
from gpt_triton.server import EmbeddedTriton
from gpt_triton.testing.models import build_conv_attention, build_resnet_cnn


def _inputs(model_path: Path) -> dict[str, np.ndarray]:
    info = inspect_model(model_path)
    shapes = resolve_shapes(info, {})
    rng = np.random.default_rng(0)
    return {t.name: rng.standard_normal(shapes[t.name]).astype(t.dtype) for t in info.inputs}


def _time_in_process(runner: Runner, feeds: dict[str, np.ndarray], count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        runner.infer(feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _time_served(client: grpcclient.InferenceServerClient, name: str, feeds: dict[str, np.ndarray], count: int) -> list[float]:
    inputs = []
    for key, value in feeds.items():
        tensor = grpcclient.InferInput(key, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)  # serialised once: the timed loop measures the round trip
        inputs.append(tensor)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        client.infer(name, inputs)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _server_totals(client: grpcclient.InferenceServerClient, name: str) -> dict[str, float]:
    stats = client.get_inference_statistics(name, as_json=True)["model_stats"][0]["inference_stats"]
    return {key: float(stats[key].get("ns", 0)) for key in ("success", "queue", "compute_input", "compute_infer", "compute_output")} | {
        "count": float(stats["success"].get("count", 0))
    }


_NULL_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    # Same interface as the candidate, no runtime: zeros of the output shapes. Its latency is the floor
    # of Triton + python backend + gRPC for these tensor sizes.
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batched = config["max_batch_size"] > 0
        self.first = config["input"][0]["name"]
        self.outputs = [(o["name"], pb_utils.triton_string_to_numpy(o["data_type"]), [max(int(d), 1) for d in o["dims"]])
                        for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, self.first).as_numpy().shape[0]
            lead = [rows] if self.batched else []
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor(name, np.zeros(lead + dims, dtype)) for name, dtype, dims in self.outputs]))
        return responses
"""


def measure(
    server: EmbeddedTriton, model_path: Path, name: str, requests: int, rounds: int, staging: Path,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    options = options or {}
    info = inspect_model(model_path)
    artifact = Artifact(family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"),
                        directory=str(model_path.parent), files=[model_path.name], runtime_options=options)
    write_model(staging, name, info, resolve_shapes(info, {}), artifact, Route(family="serving"), "python")
    server.load(staging / name)
    floor = f"{name}_floor"
    write_model(staging, floor, info, resolve_shapes(info, {}), artifact, Route(family="serving"), "python")
    (staging / floor / "1" / "model.py").write_text(_NULL_MODEL)
    server.load(staging / floor)
    feeds = _inputs(model_path)
    # The same runner the adapter serves with, so both sides run identical session code.
    runner = open_runner("onnxruntime", model_path, options).activate()
    client = server.client()
    try:
        _time_in_process(runner, feeds, 10)
        _time_served(client, name, feeds, 10)
        _time_served(client, floor, feeds, 10)
        before = _server_totals(client, name)
        floor_before = _server_totals(client, floor)
        local: list[float] = []
        served: list[float] = []
        floor_times: list[float] = []
        per_round = max(1, requests // rounds)
        for _ in range(rounds):
            local += _time_in_process(runner, feeds, per_round)
            served += _time_served(client, name, feeds, per_round)
            floor_times += _time_served(client, floor, feeds, per_round)
        after = _server_totals(client, name)
        floor_after = _server_totals(client, floor)
    finally:
        runner.deactivate()
        server.unload(name)
        server.unload(floor)
    count = after["count"] - before["count"]
    breakdown = {k: (after[k] - before[k]) / count / 1e6 for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")}
    result: dict[str, Any] = {"model": name, "in_process_ms": statistics.median(local), "served_ms": statistics.median(served),
              "served_mean_ms": statistics.fmean(served),
                              "floor_ms": statistics.median(floor_times),
                              "floor_infer_ms": (floor_after["compute_infer"] - floor_before["compute_infer"])
                              / max(1.0, floor_after["count"] - floor_before["count"]) / 1e6, **{f"{k}_ms": v for k, v in breakdown.items()}}
    result["ratio"] = result["served_ms"] / result["in_process_ms"]
    result["outside_server_ms"] = result["served_mean_ms"] - breakdown["success"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, help="ONNX model to measure (default: build resnet_cnn)")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per side and model")
    parser.add_argument("--rounds", type=int, default=4, help="alternating in-process/served blocks")
    parser.add_argument("--ort-options", type=json.loads, default={},
                        help='runtime_options for both sides (default: ORT defaults), e.g. '
                             '\'{"config_entries": {"session.intra_op.allow_spinning": "0"}}\'')
    args = parser.parse_args(argv)
    console = Console(width=160)
    with tempfile.TemporaryDirectory(prefix="gpt-triton-overhead-") as tmp:
        root = Path(tmp)
        models = {"conv_attention": build_conv_attention(root / "conv_attention" / "model.onnx")}
        if args.model:
            models = {args.model.stem: args.model.resolve(), **models}
        else:
            models = {"resnet_cnn": build_resnet_cnn(root / "resnet_cnn" / "model.onnx"), **models}
        try:
            with EmbeddedTriton(root / "repository", workdir=root / "work") as server:
                results = [measure(server, path, name, args.requests, args.rounds, root / "staging", args.ort_options)
                           for name, path in models.items()]
        except (GptTritonError, RuntimeLayerError) as exc:  # e.g. a bad --ort-options entry
            console.print(f"error: {exc}")
            return 2
    route = json.dumps(args.ort_options) if args.ort_options else "ONNX Runtime defaults"
    table = Table(title=f"served (Triton gRPC, concurrency 1) vs in-process, {route}; medians in ms")
    for column in ("model", "in-process", "served", "ratio", "floor", "floor infer", "queue", "comp. input", "comp. infer",
                   "comp. output", "outside server"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(r["model"], f"{r['in_process_ms']:.3f}", f"{r['served_ms']:.3f}", f"{r['ratio']:.3f}x", f"{r['floor_ms']:.3f}",
                      f"{r['floor_infer_ms']:.3f}",
                      f"{r['queue_ms']:.3f}", f"{r['compute_input_ms']:.3f}", f"{r['compute_infer_ms']:.3f}",
                      f"{r['compute_output_ms']:.3f}", f"{r['outside_server_ms']:.3f}")
    console.print(table)
    console.print("floor: median of a python model with the same interface that returns zeros (Triton + python "
                  "backend + gRPC, no runtime); floor infer: its mean compute infer (the stub round trip). server columns: per-request means from Triton's statistics API; "
                  "outside server = client mean - server success mean (gRPC transport, protobuf, client library).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
