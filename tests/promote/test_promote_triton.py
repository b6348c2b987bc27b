"""End to end: promote signed versions into a repository and have a real embedded Triton serve them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.deploy import model_config, write_version_files
from gpt_triton.promote.repository import promote
from gpt_triton.promote.verify import verify_repository
from gpt_triton.server import EmbeddedTriton, TritonServer
from gpt_triton.testing.models import build_tiny_mlp

pytestmark = pytest.mark.slow


def _infer(server: TritonServer, version: str, x: np.ndarray, model: str = "mlp") -> np.ndarray:
    tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = server.client().infer(model, [tensor], model_version=version)
    output = result.as_numpy("y")
    assert output is not None
    return output


def _ed25519_pair(tmp_path: Path) -> tuple[bytes, Path]:
    """(private PEM for promoting, path of the public PEM the server verifies with)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    public_path = tmp_path / "verify.pub"
    public_path.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), public_path


@pytest.mark.parametrize("scheme", ["hmac", "ed25519"])
def test_signed_versions_load_and_tampering_is_refused(
    tmp_path: Path, key: bytes, monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    # The adapter inside Triton reads the key from the server's environment, inherited from ours.
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    if scheme == "hmac":
        monkeypatch.setenv("GPT_TRITON_SIGNING_KEY", key.hex())
        verify_key = key
    else:  # the server holds only the public key
        key, public_path = _ed25519_pair(tmp_path)
        monkeypatch.setenv("GPT_TRITON_SIGNING_KEY_FILE", str(public_path))
        verify_key = public_path.read_bytes()
    source = build_tiny_mlp(tmp_path / "src" / "model.onnx")
    info = inspect_model(source)
    artifact = Artifact(
        family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"),
        directory=str(source.parent), files=["model.onnx"],
        runtime_options={"session_options": {"graph_optimization_level": "ORT_ENABLE_ALL"}},
    )
    config = model_config("mlp", info, {"x": [1, 16]}, artifact, Route(family="serving"), "python")
    repo = tmp_path / "production"
    provenance = {"run_id": "e2e", "runtime": "onnxruntime", "model_sha256": info.sha256}
    for _ in range(2):
        promote(repo, "mlp", config, lambda d: write_version_files(d, artifact, "python"), provenance, signing_key=key)
    assert all(c.signed_ok and c.verdict.status == "valid" for c in verify_repository(repo, None, verify_key))

    x = np.random.default_rng(0).standard_normal((1, 16), dtype=np.float32)
    expected = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with EmbeddedTriton(repo, workdir=tmp_path / "server") as server:
        server.load(repo / "mlp")
        # latest {num_versions: 2}: the previous version stays loadable next to the new one.
        for version in ("1", "2"):
            np.testing.assert_allclose(_infer(server, version, x), expected, rtol=1e-5, atol=1e-6)
        server.unload("mlp")

        # Loading read nothing into the signed folder (no __pycache__): verify still passes afterwards.
        assert all(c.signed_ok for c in verify_repository(repo, None, verify_key))

        target = repo / "mlp" / "2" / "model.onnx"
        data = bytearray(target.read_bytes())
        data[-8] ^= 0xFF
        target.write_bytes(bytes(data))
        with pytest.raises(GptTritonError, match=r"tampered file .*mlp/2/model\.onnx"):
            server.load(repo / "mlp")


def _promote_twice(repo: Path, name: str, tmp_path: Path, key: bytes) -> Path:
    """Two signed versions of ``name`` (a tiny MLP) in ``repo``; returns the ONNX they were built from."""
    source = build_tiny_mlp(tmp_path / name / "model.onnx")
    info = inspect_model(source)
    artifact = Artifact(
        family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"),
        directory=str(source.parent), files=["model.onnx"], runtime_options={},
    )
    config = model_config(name, info, {"x": [1, 16]}, artifact, Route(family="serving"), "python")
    for _ in range(2):
        promote(repo, name, config, lambda d: write_version_files(d, artifact, "python"),
                {"run_id": "tamper", "runtime": "onnxruntime", "model_sha256": info.sha256}, signing_key=key)
    return source


def test_tampered_versions_are_refused_by_triton(tmp_path: Path, key: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17 faults 1-3, each on a real Triton with the key in its environment: every one of these
    tampered models loaded and served before the adapter checked them."""
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    monkeypatch.setenv("GPT_TRITON_SIGNING_KEY", key.hex())
    repo = tmp_path / "production"
    names = ("unsigned", "copied", "edited", "policy")
    for name in names:
        _promote_twice(repo, name, tmp_path, key)
    # 1. signatures.json deleted and the weights swapped for other (valid) ones.
    (repo / "unsigned" / "2" / "signatures.json").unlink()
    build_tiny_mlp(repo / "unsigned" / "2" / "model.onnx", seed=7)
    # 2. version 1 copied over version 2 (a rollback nobody signed).
    shutil.rmtree(repo / "copied" / "2")
    shutil.copytree(repo / "copied" / "1", repo / "copied" / "2")
    # 3. the model-level config edited: another instance count.
    config = repo / "edited" / "config.pbtxt"
    assert "count: 1\n" in config.read_text()
    config.write_text(config.read_text().replace("count: 1\n", "count: 2\n"))
    # Not tampering: a canary pinning versions rewrites only version_policy.
    policy = repo / "policy" / "config.pbtxt"
    policy.write_text(policy.read_text().replace(
        "latest {\n    num_versions: 2\n  }", "specific {\n    versions: 1\n    versions: 2\n  }"))

    with EmbeddedTriton(repo, workdir=tmp_path / "server") as server:
        with pytest.raises(GptTritonError, match=r"unsigned version .*unsigned/2: no signatures\.json"):
            server.load(repo / "unsigned")
        with pytest.raises(GptTritonError, match=r"copied version .*copied/2: it was signed as copied version 1"):
            server.load(repo / "copied")
        with pytest.raises(GptTritonError, match=r"tampered file .*edited/config\.pbtxt: differs from the config"):
            server.load(repo / "edited")
        server.load(repo / "policy")
        x = np.ones((1, 16), np.float32)
        assert _infer(server, "2", x, "policy").shape == (1, 4)
        assert server.client().is_server_live()
