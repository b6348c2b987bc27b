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
from gpt_triton.promote.signing import (
    SIGNATURES_FILE,
    load_signing_key,
    sign_version_dir,
    verify_version_dir,
)


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
