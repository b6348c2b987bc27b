"""The python-backend runtime adapter on a real Triton: signatures, per-version runtimes, batching."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.routes import Route
from gpt_triton.deploy import config_text, parse_config, write_model, write_version_files
from gpt_triton.promote.signing import KEY_ENV, sign_version_dir
from gpt_triton.server import EmbeddedTriton, ModelLoadError
from gpt_triton.testing.conformance.servers import (
    ORT_OPTIONS,
    OV_F32_OPTIONS,
    artifact_for,
    reference,
    unique,
)

KEY = bytes(range(32))


def _infer(client: grpcclient.InferenceServerClient, name: str, key: str, value: np.ndarray, output: str,
           version: str = "") -> np.ndarray:
    tensor = grpcclient.InferInput(key, list(value.shape), "FP32")
    tensor.set_data_from_numpy(value)
    result = client.infer(name, [tensor], model_version=version)
    out = result.as_numpy(output)
    assert out is not None
    return out


@pytest.mark.slow
def test_signed_version_loads_and_tampered_version_is_refused(
    tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stub inherits the server's environment: that is where the adapter finds the key.
    monkeypatch.setenv(KEY_ENV, KEY.hex())
    info = inspect_model(tiny_model_path)
    repository = tmp_path / "repo"
    with EmbeddedTriton(repository) as server:
        write_model(repository, "signed", info, resolve_shapes(info, {}),
                    artifact_for(tiny_model_path, "onnxruntime", ORT_OPTIONS), Route(family="serving"), "python")
        sign_version_dir(repository / "signed" / "1", KEY)
        signed_files = sorted(p for p in (repository / "signed" / "1").rglob("*"))
        server.load(repository / "signed")
        x = np.ones((1, 16), np.float32)
        np.testing.assert_allclose(_infer(server.client(), "signed", "x", x, "y"),
                                   reference(tiny_model_path, {"x": x})["y"], rtol=1e-5, atol=1e-6)
        server.unload("signed")
        # Serving added nothing unsigned (the stub would write __pycache__ unless it was shipped).
        assert sorted(p for p in (repository / "signed" / "1").rglob("*")) == signed_files

        model = repository / "signed" / "1" / "model.onnx"
        model.write_bytes(model.read_bytes()[:-1] + b"\x01")  # one byte changed after signing
        with pytest.raises(ModelLoadError, match="signature verification failed.*model.onnx"):
            server.load(repository / "signed")
        assert server.client().is_server_live()


@pytest.mark.slow
def test_versions_of_one_model_may_use_different_runtimes(
    triton_server: EmbeddedTriton, tmp_path: Path, conv_attention_path: Path
) -> None:
    info = inspect_model(conv_attention_path)
    name = unique("mixed")
    staging = tmp_path / "staging"
    write_model(staging, name, info, resolve_shapes(info, {}),
                artifact_for(conv_attention_path, "onnxruntime", ORT_OPTIONS), Route(family="serving"), "python")
    write_version_files(staging / name / "2", artifact_for(conv_attention_path, "openvino", OV_F32_OPTIONS), "python")
    config = parse_config((staging / name / "config.pbtxt").read_text())
    config.version_policy.all.SetInParent()  # serve both versions
    (staging / name / "config.pbtxt").write_text(config_text(config))
    triton_server.load(staging / name)
    try:
        images = np.random.default_rng(4).standard_normal((1, 3, 64, 64)).astype(np.float32)
        expected = reference(conv_attention_path, {"images": images})["logits"]
        for version in ("1", "2"):
            served = _infer(triton_server.client(), name, "images", images, "logits", version)
            np.testing.assert_allclose(served, expected, rtol=1e-3, atol=1e-4)
    finally:
        triton_server.unload(name)


@pytest.mark.slow
def test_openvino_adapter_merges_batched_requests(
    triton_server: EmbeddedTriton, tmp_path: Path, conv_attention_path: Path
) -> None:
    info = inspect_model(conv_attention_path)
    name = unique("ovbatch")
    serving = Route(family="serving", knobs={"dynamic_batching": True, "max_queue_delay_us": 200_000,
                                             "preferred_batch_sizes": [4]})
    write_model(tmp_path, name, info, resolve_shapes(info, {}),
                artifact_for(conv_attention_path, "openvino", OV_F32_OPTIONS), serving, "python")
    triton_server.load(tmp_path / name)
    try:
        # Requests of different batch sizes: the adapter must split the merged outputs back correctly.
        rng = np.random.default_rng(5)
        requests = [rng.standard_normal((n, 3, 64, 64)).astype(np.float32) for n in (1, 2, 1)]
        client = triton_server.client()
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            served = list(pool.map(lambda x: _infer(client, name, "images", x, "embedding"), requests))
        for images, embedding in zip(requests, served, strict=True):
            expected = reference(conv_attention_path, {"images": images})["embedding"]
            np.testing.assert_allclose(embedding, expected, rtol=1e-3, atol=1e-4)
        stats = client.get_inference_statistics(name, as_json=True)["model_stats"][0]
        assert any(int(b["batch_size"]) > 2 for b in stats["batch_stats"])  # at least one merged execution
    finally:
        triton_server.unload(name)


@pytest.mark.slow
def test_bad_runtime_option_is_the_load_error_and_names_it(
    triton_server: EmbeddedTriton, tmp_path: Path, tiny_model_path: Path
) -> None:
    # The adapter opens the artifact through the shipped runtime layer: its option check is the load error.
    info = inspect_model(tiny_model_path)
    name = unique("badopt")
    artifact = artifact_for(tiny_model_path, "onnxruntime", {"session_options": {"intra_op_threads": 1}})
    write_model(tmp_path, name, info, resolve_shapes(info, {}), artifact, Route(family="serving"), "python")
    with pytest.raises(ModelLoadError, match=r"session_options\.intra_op_threads"):
        triton_server.load(tmp_path / name)
    assert triton_server.client().is_server_live()


@pytest.mark.slow
def test_a_key_or_a_signed_config_makes_signatures_required(
    tmp_path: Path, tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17 fault 1: a version without signatures.json was served unverified whatever the server's key;
    now a key on the server, or a model config marked signed at promotion, makes it a refusal."""
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    monkeypatch.setenv(KEY_ENV, KEY.hex())
    info = inspect_model(tiny_model_path)
    repository = tmp_path / "repo"
    artifact = artifact_for(tiny_model_path, "onnxruntime", ORT_OPTIONS)
    with EmbeddedTriton(repository) as server:
        write_model(repository, "plain", info, resolve_shapes(info, {}), artifact, Route(family="serving"), "python")
        with pytest.raises(ModelLoadError, match=r"signature verification failed: unsigned version .*plain/1"):
            server.load(repository / "plain")
        assert server.client().is_server_live()
    # A tuning run's staging server serves unsigned candidates: it is started without the key, so the same
    # unsigned version loads there while the key stays set in the tuner's own environment.
    with EmbeddedTriton(repository, signing_key=False) as staging:
        staging.load(repository / "plain")
        assert staging.client().is_model_ready("plain")
    # No key on the server, but the config says the model is signed: refused, naming the key id.
    monkeypatch.delenv(KEY_ENV)
    with EmbeddedTriton(repository) as server:
        config = parse_config((repository / "plain" / "config.pbtxt").read_text())
        config.parameters["gpt_triton_signing_key_id"].string_value = "0123456789abcdef"
        (repository / "plain" / "config.pbtxt").write_text(config_text(config))
        with pytest.raises(ModelLoadError, match=r"plain is signed \(key id 0123456789abcdef\) but this server has no key"):
            server.load(repository / "plain")
