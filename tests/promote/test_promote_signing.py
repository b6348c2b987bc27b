"""Signing round trip, tamper detection and key loading."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.promote._ed25519 import Ed25519Signer
from gpt_triton.promote._hmac import HmacSigner
from gpt_triton.promote.signing import (
    SIGNATURES_FILE,
    key_id,
    load_signing_key,
    sign_version_dir,
    verify_version_dir,
)
from gpt_triton.testing.conformance.signers import SignerConformance


@pytest.fixture
def signed(tmp_path: Path, key: bytes) -> Path:
    version = tmp_path / "1"
    (version / "artifact").mkdir(parents=True)
    (version / "model.py").write_text("print('adapter')\n")
    (version / "artifact" / "model.onnx").write_bytes(bytes(range(256)) * 64)
    sign_version_dir(version, key)
    return version


def test_round_trip_lists_every_file(signed: Path, key: bytes) -> None:
    verify_version_dir(signed, key)
    document = json.loads((signed / SIGNATURES_FILE).read_text())
    assert sorted(e["path"] for e in document["files"]) == ["artifact/model.onnx", "model.py"]


def test_flipped_byte_is_named(signed: Path, key: bytes) -> None:
    target = signed / "artifact" / "model.onnx"
    data = bytearray(target.read_bytes())
    data[1000] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(GptTritonError, match=r"tampered file .*artifact/model\.onnx"):
        verify_version_dir(signed, key)


def test_added_file_is_named(signed: Path, key: bytes) -> None:
    (signed / "artifact" / "extra.bin").write_bytes(b"payload")
    with pytest.raises(GptTritonError, match=r"unsigned file .*artifact/extra\.bin"):
        verify_version_dir(signed, key)


def test_removed_file_is_named(signed: Path, key: bytes) -> None:
    (signed / "model.py").unlink()
    with pytest.raises(GptTritonError, match=r"missing file .*model\.py"):
        verify_version_dir(signed, key)


def test_removing_file_and_its_entry_breaks_the_manifest(signed: Path, key: bytes) -> None:
    (signed / "model.py").unlink()
    path = signed / SIGNATURES_FILE
    document = json.loads(path.read_text())
    document["files"] = [e for e in document["files"] if e["path"] != "model.py"]
    path.write_text(json.dumps(document))
    with pytest.raises(GptTritonError, match=r"tampered file .*signatures\.json"):
        verify_version_dir(signed, key)


def test_unsigned_dir(tmp_path: Path, key: bytes) -> None:
    (tmp_path / "model.py").write_text("x = 1\n")
    with pytest.raises(GptTritonError, match="unsigned version"):
        verify_version_dir(tmp_path, key)


def test_wrong_key_is_told_apart(signed: Path) -> None:
    with pytest.raises(GptTritonError, match="signed with a different key"):
        verify_version_dir(signed, b"another secret")


def test_symlink_refused(tmp_path: Path, key: bytes) -> None:
    (tmp_path / "target").write_text("outside")
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").symlink_to(tmp_path / "target")
    with pytest.raises(GptTritonError, match="symlink"):
        sign_version_dir(version, key)


def test_no_key_is_an_error_not_a_pass(signed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    with pytest.raises(GptTritonError, match="no signing key: set GPT_TRITON_SIGNING_KEY"):
        verify_version_dir(signed)


def test_key_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: bytes, signed: Path) -> None:
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    assert load_signing_key() is None
    key_file = tmp_path / "key.hex"
    key_file.write_text(key.hex() + "\n")
    assert load_signing_key(str(key_file)) == key
    monkeypatch.setenv("GPT_TRITON_SIGNING_KEY_FILE", str(key_file))
    assert load_signing_key() == key
    verify_version_dir(signed)  # key taken from the environment
    monkeypatch.setenv("GPT_TRITON_SIGNING_KEY", "not hex, raw text")
    assert load_signing_key() == b"not hex, raw text"  # the variable wins over the file
    with pytest.raises(GptTritonError, match="cannot read signing key file"):
        load_signing_key(str(tmp_path / "absent"))
    monkeypatch.setenv("GPT_TRITON_SIGNING_KEY", "  ")
    with pytest.raises(GptTritonError, match="empty"):
        load_signing_key()


def test_signing_import_is_cheap_and_silent() -> None:
    """The runtime adapter imports it inside Triton: no heavy modules, no output."""
    code = (
        "import sys; import gpt_triton.promote.signing as s; "
        "heavy = [m for m in ('numpy', 'pydantic', 'google.protobuf', 'tritonclient', 'rich') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


def _ed25519_pair(tmp_path: Path, name: str) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / f"{name}.pem").write_bytes(private_pem)
    (tmp_path / f"{name}.pub").write_bytes(public_pem)
    return private_pem, public_pem


def test_ed25519_round_trip_and_tamper(tmp_path: Path, key: bytes) -> None:
    private_pem, public_pem = _ed25519_pair(tmp_path, "signer")
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").write_bytes(b"\x01" * 4096)
    sign_version_dir(version, load_signing_key(str(tmp_path / "signer.pem")) or b"")
    document = json.loads((version / SIGNATURES_FILE).read_text())
    assert document["algorithm"] == "ed25519" and "mac" not in document["files"][0]

    verify_version_dir(version, load_signing_key(str(tmp_path / "signer.pub")))  # the public key suffices
    verify_version_dir(version, private_pem)
    with pytest.raises(GptTritonError, match="not an unencrypted private key"):
        sign_version_dir(version, public_pem)  # a server holding only the public key cannot sign
    _, other_public = _ed25519_pair(tmp_path, "other")
    with pytest.raises(GptTritonError, match="signed with a different key"):
        verify_version_dir(version, other_public)
    with pytest.raises(GptTritonError, match="Ed25519-signed: verify with the Ed25519 public key"):
        verify_version_dir(version, key)

    (version / "model.onnx").write_bytes(b"\x01" * 4095 + b"\x02")
    with pytest.raises(GptTritonError, match=r"tampered file .*model\.onnx"):
        verify_version_dir(version, public_pem)
    # Rewriting the recorded sha256 to match is caught by the manifest signature.
    document["files"][0]["sha256"] = hashlib.sha256((version / "model.onnx").read_bytes()).hexdigest()
    (version / SIGNATURES_FILE).write_text(json.dumps(document))
    with pytest.raises(GptTritonError, match=r"tampered file .*signatures\.json: its Ed25519 signature"):
        verify_version_dir(version, public_pem)


def _pem_pair(seed: int) -> tuple[bytes, bytes]:
    """A fixed Ed25519 key pair (private PEM, public PEM): the same bytes on every call."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.from_private_bytes(bytes((seed + i) % 256 for i in range(32)))
    return (
        private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )


class TestHmacSignerConformance(SignerConformance):
    scheme = HmacSigner
    asymmetric = False

    def signing_key(self) -> bytes:
        return bytes.fromhex("8f" * 32)

    def other_key(self) -> bytes:
        return b"another secret"


class TestEd25519SignerConformance(SignerConformance):
    scheme = Ed25519Signer
    asymmetric = True

    def signing_key(self) -> bytes:
        return _pem_pair(0)[0]

    def verification_key(self) -> bytes:
        return _pem_pair(0)[1]

    def other_key(self) -> bytes:
        return _pem_pair(100)[1]  # a public key: verifying needs no private half


# signatures.json written by the signing module before the Signer seam (commit 36bfab3) for the files
# that _write_recorded_version makes: repositories signed then must keep verifying, byte for byte.
RECORDED_PEM = _pem_pair(0)[0]
RECORDED = {
    "hmac-sha256": {
        "algorithm": "hmac-sha256",
        "files": [
            {"mac": "bff9a3e04bb5e507851f3a37c3289181354dce1b53d4f4cf9add91e1060b2dda", "path": "artifact/model.onnx",
             "sha256": "785b0751fc2c53dc14a4ce3d800e69ef9ce1009eb327ccf458afe09c242c26c9"},
            {"mac": "f4bb85bb0c741c882c0d47a9b59c16b896c731808f4669652c1dc67531f35bac", "path": "model.py",
             "sha256": "34dbb493f753c7da72f356eba8d38b6052613065d281a446d7557e014e5dac92"},
        ],
        "format": "gpt-triton-signatures/1",
        "key_id": "7bbddfd964d1878d",
        "manifest_mac": "0d6a7c06a4a0d3c689fd132596a5a0df5a8884733b54add053e5539b91c00141",
    },
    "ed25519": {
        "algorithm": "ed25519",
        "files": [
            {"path": "artifact/model.onnx", "sha256": "785b0751fc2c53dc14a4ce3d800e69ef9ce1009eb327ccf458afe09c242c26c9"},
            {"path": "model.py", "sha256": "34dbb493f753c7da72f356eba8d38b6052613065d281a446d7557e014e5dac92"},
        ],
        "format": "gpt-triton-signatures/1",
        "key_id": "a041ecf190a65bf6",
        "signature": "c8ca4f3e19b50b3887c550c2b805d4c15c494fe80bcfed15515f6e131584057e"
                     "4c2a1845ef27c769a6dbc1c2e51e37481868e572c90c6834488d3db6d48dce07",
    },
}


def _write_recorded_version(version: Path) -> None:
    (version / "artifact").mkdir(parents=True)
    (version / "model.py").write_text("print('adapter')\n")
    (version / "artifact" / "model.onnx").write_bytes(bytes(range(256)) * 4)


@pytest.mark.parametrize("algorithm", sorted(RECORDED))
def test_versions_signed_before_the_seam_still_verify(tmp_path: Path, key: bytes, algorithm: str) -> None:
    signing_key, verification_key = (key, key) if algorithm == "hmac-sha256" else (RECORDED_PEM, _pem_pair(0)[1])
    old = tmp_path / "old" / "1"
    _write_recorded_version(old)
    recorded = json.dumps(RECORDED[algorithm], indent=1, sort_keys=True)
    (old / SIGNATURES_FILE).write_text(recorded)
    verify_version_dir(old, verification_key)
    # Signing the same files today writes the same document, byte for byte.
    new = tmp_path / "new" / "1"
    _write_recorded_version(new)
    sign_version_dir(new, signing_key)
    assert (new / SIGNATURES_FILE).read_text() == recorded
    assert key_id(key) == RECORDED["hmac-sha256"]["key_id"]


# ------------------------------------------------------------------ issue 17: binding and the adapter's policy


def _promoted(tmp_path: Path, key: bytes, names: tuple[str, ...] = ("m",), versions: int = 2) -> Path:
    from tritonclient.grpc import model_config_pb2

    from gpt_triton.promote.repository import promote

    config = model_config_pb2.ModelConfig(backend="python", max_batch_size=8)
    repo = tmp_path / "repo"
    for name in names:
        for n in range(versions):
            def write(version_dir: Path, payload: bytes = f"{name}{n}".encode()) -> None:
                (version_dir / "model.onnx").write_bytes(payload * 100)
            promote(repo, name, config, write, {"runtime": "onnxruntime"}, signing_key=key)
    return repo


def test_recorded_unbound_versions_verify_as_unbound(tmp_path: Path, key: bytes) -> None:
    old = tmp_path / "old" / "1"
    _write_recorded_version(old)
    (old / SIGNATURES_FILE).write_text(json.dumps(RECORDED["hmac-sha256"]))
    assert verify_version_dir(old, key).bound is False


@pytest.mark.parametrize("pem", [False, True])
def test_a_copied_version_does_not_verify(tmp_path: Path, key: bytes, pem: bool) -> None:
    """Fault 2: version 1 copied over version 2, or into another model, verified before binding."""
    import shutil

    signing_key, verification_key = _pem_pair(1) if pem else (key, key)
    repo = _promoted(tmp_path, signing_key, names=("m", "n"))
    assert verify_version_dir(repo / "m" / "2", verification_key).bound
    shutil.rmtree(repo / "m" / "2")
    shutil.copytree(repo / "m" / "1", repo / "m" / "2")
    with pytest.raises(GptTritonError, match=r"copied version .*m/2: it was signed as m version 1, not m version 2"):
        verify_version_dir(repo / "m" / "2", verification_key)
    shutil.rmtree(repo / "n" / "1")
    shutil.copytree(repo / "m" / "1", repo / "n" / "1")
    with pytest.raises(GptTritonError, match=r"copied version .*n/1: it was signed as m version 1, not n version 1"):
        verify_version_dir(repo / "n" / "1", verification_key)


def test_the_binding_is_signed(tmp_path: Path, key: bytes) -> None:
    """Editing the recorded model or version in signatures.json breaks the signature (no relabelling)."""
    import shutil

    repo = _promoted(tmp_path, key)
    shutil.rmtree(repo / "m" / "2")
    shutil.copytree(repo / "m" / "1", repo / "m" / "2")
    path = repo / "m" / "2" / SIGNATURES_FILE
    document = json.loads(path.read_text())
    document["version"] = 2
    path.write_text(json.dumps(document))
    with pytest.raises(GptTritonError, match=r"tampered file .*m/2/signatures\.json: its manifest MAC"):
        verify_version_dir(repo / "m" / "2", key)
    document["format"] = "gpt-triton-signatures/1"  # downgraded to unbound: the signature covered the binding
    path.write_text(json.dumps(document))
    with pytest.raises(GptTritonError, match=r"tampered file .*m/2/signatures\.json"):
        verify_version_dir(repo / "m" / "2", key)


def _server_key(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    if value is None:
        monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    else:
        monkeypatch.setenv("GPT_TRITON_SIGNING_KEY", value)


def test_before_load_refuses_a_missing_or_unreadable_signature_file(
    tmp_path: Path, key: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault 1: with a key set, no signatures.json is a refusal, not a skip."""
    from gpt_triton.promote.signing import verify_before_load

    repo = _promoted(tmp_path, key)
    _server_key(monkeypatch, key.hex())
    assert verify_before_load(repo / "m" / "2").bound
    (repo / "m" / "2" / SIGNATURES_FILE).write_text("{not json")
    with pytest.raises(GptTritonError, match=r"tampered file .*m/2/signatures\.json: not readable JSON"):
        verify_before_load(repo / "m" / "2")
    (repo / "m" / "2" / SIGNATURES_FILE).unlink()
    with pytest.raises(GptTritonError, match=r"unsigned version .*m/2: no signatures\.json"):
        verify_before_load(repo / "m" / "2")
    # A model whose config says it is signed, on a server without a key: refused, naming the key id.
    _server_key(monkeypatch, None)
    with pytest.raises(GptTritonError, match=f"m is signed \\(key id {key_id(key)}\\) but this server has no key"):
        verify_before_load(repo / "m" / "1", key_id(key))


def test_promotion_marks_the_config_as_signed(tmp_path: Path, key: bytes) -> None:
    text = (_promoted(tmp_path, key) / "m" / "config.pbtxt").read_text()
    assert 'key: "gpt_triton_signed"' in text and f'string_value: "{key_id(key)}"' in text


def test_before_load_checks_the_model_config_on_disk(
    tmp_path: Path, key: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault 3: an edited config.pbtxt is refused for every version; a new version_policy is not an edit."""
    from gpt_triton.promote.signing import verify_before_load

    repo = _promoted(tmp_path, key)
    _server_key(monkeypatch, key.hex())
    config = repo / "m" / "config.pbtxt"
    original = config.read_text()
    config.write_text(original.replace("latest {\n    num_versions: 2\n  }", "specific {\n    versions: 1\n  }"))
    verify_before_load(repo / "m" / "1")
    edits = [
        original.replace("max_batch_size: 8", "max_batch_size: 64"),
        original + 'parameters {\n  key: "EXECUTION_ENV_PATH"\n  value {\n    string_value: "/tmp/env.tar.gz"\n  }\n}\n',
        original.replace('string_value: "true"', 'string_value: "false"'),
        # a top-level field hidden inside a version_policy block: not the layout promotion writes
        original.replace("num_versions: 2\n  }\n}", "num_versions: 2\n  }\n} max_batch_size: 64\n"),
    ]
    for edited in edits:
        assert edited != original
        config.write_text(edited)
        for version in ("1", "2"):
            with pytest.raises(GptTritonError, match=r"tampered file .*m/config\.pbtxt: differs from the config signed with version 2"):
                verify_before_load(repo / "m" / version)
    config.unlink()
    with pytest.raises(GptTritonError, match=r"cannot read .*m/config\.pbtxt"):
        verify_before_load(repo / "m" / "2")
