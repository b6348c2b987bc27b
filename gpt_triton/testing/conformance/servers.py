"""The conformance suite every :class:`~gpt_triton.server.TritonServer` passes (embedded and remote
subclass :class:`ServerConformance`), and the helpers those tests share: artifacts for a plain ONNX file,
deploying one, inferring through gRPC, and the reference outputs.

A subclass provides the ``server`` fixture (a started TritonServer) and may override ``staging`` (a
directory the models are written to before ``server.load``). The tests also use the session fixtures
``tiny_model_path`` and ``conv_attention_path`` (the builders in :mod:`gpt_triton.testing.models`).
Every test starts or uses a real Triton: all are slow.
"""

from __future__ import annotations

import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.routes import Artifact, Route, Runtime
from gpt_triton.deploy import write_model
from gpt_triton.runtimes import run_once
from gpt_triton.server import ModelLoadError, TritonServer

ORT_OPTIONS: dict[str, Any] = {
    "session_options": {"graph_optimization_level": "ORT_ENABLE_BASIC", "intra_op_num_threads": 1},
    "config_entries": {"session.intra_op.allow_spinning": "0"},
}
OV_F32_OPTIONS: dict[str, Any] = {
    "device": "CPU",
    "config": {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"},
}


def artifact_for(model_path: Path, runtime: Runtime, options: dict[str, Any]) -> Artifact:
    return Artifact(
        family=runtime, runtime=runtime, route=Route(family=runtime), directory=str(model_path.parent),
        files=[model_path.name], runtime_options=options,
    )


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def deploy(
    server: TritonServer, staging: Path, name: str, model_path: Path, artifact: Artifact, serving: Route | None = None
) -> None:
    info = inspect_model(model_path)
    write_model(staging, name, info, resolve_shapes(info, {}), artifact, serving or Route(family="serving"), "python")
    server.load(staging / name)


def infer(client: grpcclient.InferenceServerClient, name: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    tensors = []
    for key, value in inputs.items():
        tensor = grpcclient.InferInput(key, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    result = client.infer(name, tensors, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


def reference(model_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs from ONNX Runtime at its defaults (fp32 on CPU): what a route must reproduce."""
    return run_once("onnxruntime", model_path, {}, inputs)


def _counts(client: grpcclient.InferenceServerClient, name: str) -> tuple[int, int]:
    stats = client.get_inference_statistics(name, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


@pytest.mark.slow
class ServerConformance:
    @pytest.fixture
    def server(self) -> TritonServer:
        raise NotImplementedError("subclasses provide a started server")

    @pytest.fixture
    def staging(self, tmp_path: Path) -> Path:
        return tmp_path / "staging"

    def test_identity(self, server: TritonServer) -> None:
        assert server.mode in ("embedded", "remote")
        assert re.fullmatch(r"[\w.\-]+:\d+", server.grpc_url)
        assert re.fullmatch(r"\d+\.\d+\.\d+", server.version())
        assert server.client().is_server_live()
        assert "python" not in server.native_backends

    def test_onnxruntime_route_serves_reference_outputs(self, server: TritonServer, staging: Path, tiny_model_path: Path) -> None:
        name = unique("ort")
        deploy(server, staging, name, tiny_model_path, artifact_for(tiny_model_path, "onnxruntime", ORT_OPTIONS))
        try:
            x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
            served = infer(server.client(), name, {"x": x}, ["y"])
            # Same runtime and fp32 on both sides; the graph optimisation level and threads differ (basic and
            # one thread here), so fused kernels may reorder sums: a few float32 ulps, below 1e-5 of outputs ~1.
            np.testing.assert_allclose(served["y"], reference(tiny_model_path, {"x": x})["y"], rtol=1e-5, atol=1e-6)
        finally:
            server.unload(name)
        assert not server.client().is_model_ready(name)

    def test_unload_many_releases_every_model(self, server: TritonServer, staging: Path, tiny_model_path: Path) -> None:
        names = [unique("many"), unique("many")]
        for name in names:
            deploy(server, staging, name, tiny_model_path, artifact_for(tiny_model_path, "onnxruntime", ORT_OPTIONS))
        assert all(server.client().is_model_ready(n) for n in names)
        server.unload_many(names)
        assert not any(server.client().is_model_ready(n) for n in names)
        assert all(server.model_state(n)[0] not in ("READY", "LOADING", "UNLOADING") for n in names)

    def test_loads_from_several_threads_at_once_all_serve(self, server: TritonServer, staging: Path, tiny_model_path: Path) -> None:
        """deploy_candidates keeps ``server.parallel_loads`` loads in flight: load() is called from that many
        threads at once, and each model must end up served, one of them broken failing alone."""
        assert server.parallel_loads >= 1
        names = [unique("par") for _ in range(max(2, server.parallel_loads))]
        info = inspect_model(tiny_model_path)
        for name in names:
            write_model(staging, name, info, resolve_shapes(info, {}),
                        artifact_for(tiny_model_path, "onnxruntime", ORT_OPTIONS), Route(family="serving"), "python")
        broken = names[-1]
        (staging / broken / "1" / tiny_model_path.name).write_bytes(b"not an onnx model")
        with ThreadPoolExecutor(len(names)) as pool:
            loads = {name: pool.submit(server.load, staging / name) for name in names}
        try:
            with pytest.raises(ModelLoadError):
                loads[broken].result()
            x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
            for name in names[:-1]:
                loads[name].result()
                np.testing.assert_allclose(infer(server.client(), name, {"x": x}, ["y"])["y"],
                                           reference(tiny_model_path, {"x": x})["y"], rtol=1e-5, atol=1e-6)
        finally:
            server.unload_many([name for name in names[:-1] if server.client().is_model_ready(name)])

    def test_openvino_route_serves_reference_outputs(self, server: TritonServer, staging: Path, conv_attention_path: Path) -> None:
        name = unique("ov")
        deploy(server, staging, name, conv_attention_path, artifact_for(conv_attention_path, "openvino", OV_F32_OPTIONS))
        try:
            images = np.random.default_rng(2).standard_normal((2, 3, 64, 64)).astype(np.float32)
            served = infer(server.client(), name, {"images": images}, ["logits", "embedding"])
            expected = reference(conv_attention_path, {"images": images})
            # OpenVINO f32 against ONNX Runtime f32 on outputs of order 1: different kernels sum in another
            # order, tens of float32 ulps apart (measured 3e-6), so 1e-4 holds. A silent reduced-precision
            # fallback (bf16, OpenVINO's own default on bf16 CPUs: 3.9e-3 per rounding) lands far above it.
            for output in ("logits", "embedding"):
                np.testing.assert_allclose(served[output], expected[output], rtol=1e-4, atol=1e-5)
        finally:
            server.unload(name)

    def test_corrupt_artifact_raises_model_load_error(self, server: TritonServer, staging: Path, tmp_path: Path, tiny_model_path: Path) -> None:
        corrupt = tmp_path / "corrupt" / "model.onnx"
        corrupt.parent.mkdir()
        corrupt.write_bytes(tiny_model_path.read_bytes()[: 200] + b"\x00garbage")
        name = unique("corrupt")
        info = inspect_model(tiny_model_path)
        write_model(staging, name, info, resolve_shapes(info, {}), artifact_for(corrupt, "onnxruntime", {}),
                    Route(family="serving"), "python")
        with pytest.raises(ModelLoadError) as caught:
            server.load(staging / name)
        assert caught.value.model_name == name
        assert "\n" not in str(caught.value)
        assert "protobuf" in caught.value.reason.lower()  # ONNX Runtime's own reason reaches the caller
        assert server.client().is_server_live() and server.client().is_server_ready()
        # The server still loads a good model afterwards.
        good = unique("good")
        deploy(server, staging, good, tiny_model_path, artifact_for(tiny_model_path, "onnxruntime", {}))
        server.unload(good)

    def test_dynamic_batching_with_concurrent_requests(self, server: TritonServer, staging: Path, tiny_model_path: Path) -> None:
        name = unique("batched")
        serving = Route(family="serving", knobs={
            "dynamic_batching": True, "max_queue_delay_us": 200_000, "preferred_batch_sizes": [8], "max_batch_size": 8,
        })
        deploy(server, staging, name, tiny_model_path, artifact_for(tiny_model_path, "onnxruntime", ORT_OPTIONS), serving)
        try:
            rows = np.random.default_rng(3).standard_normal((8, 1, 16)).astype(np.float32)
            client = server.client()  # one channel shared by the threads, as the load generator does
            before = _counts(client, name)  # the load-time warmup request is in the statistics too
            with ThreadPoolExecutor(max_workers=8) as pool:
                served = list(pool.map(lambda x: infer(client, name, {"x": x}, ["y"])["y"], rows))
            for x, y in zip(rows, served, strict=True):
                np.testing.assert_allclose(y, reference(tiny_model_path, {"x": x})["y"], rtol=1e-5, atol=1e-6)
            after = _counts(client, name)
            assert after[0] - before[0] == 8
            # The 200 ms queue delay lets the batcher merge requests: fewer executions than requests.
            assert after[1] - before[1] < 8
        finally:
            server.unload(name)
