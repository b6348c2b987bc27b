"""HMAC-SHA256 signing of a promoted model version, and its verification.

``signatures.json`` lists every file of a version directory (relative path, sha256, HMAC-SHA256 of the
file's bytes) plus one ``manifest_mac`` over that list, so removing a file *and* its entry is caught too.
Optionally (a PEM key) Ed25519: one signature over the list of sha256s; servers then hold only the
public key and cannot forge a version.

This module is imported by the python-backend runtime adapter inside Triton before it loads anything:
it must stay cheap to import (standard library only; ``cryptography`` only when an Ed25519 key is used)
and must never print.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from gpt_triton.core.errors import GptTritonError

SIGNATURES_FILE = "signatures.json"
FORMAT = "gpt-triton-signatures/1"
ALGORITHM = "hmac-sha256"
ED25519 = "ed25519"
KEY_ENV = "GPT_TRITON_SIGNING_KEY"
KEY_FILE_ENV = "GPT_TRITON_SIGNING_KEY_FILE"
_CHUNK = 1 << 20


def _decode_key(text: bytes, source: str) -> bytes:
    """Hex when the whole value is hex (the usual ``openssl rand -hex 32``), else the raw bytes."""
    value = text.strip()
    if not value:
        raise GptTritonError(f"signing key from {source} is empty: put a secret (e.g. `openssl rand -hex 32`) there")
    try:
        if len(value) % 2 == 0:
            return bytes.fromhex(value.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        pass
    return value


def _read_key_file(path: str, source: str) -> bytes:
    try:
        return _decode_key(Path(path).read_bytes(), f"{source} {path}")
    except OSError as exc:
        raise GptTritonError(f"cannot read signing key file {path} ({source}): {exc.strerror or exc}") from exc


def load_signing_key(key_file: str | None = None) -> bytes | None:
    """The signing key: ``key_file``, else $GPT_TRITON_SIGNING_KEY, else the file named by
    $GPT_TRITON_SIGNING_KEY_FILE; None when none is set. Hex values are decoded, others used raw."""
    if key_file:
        return _read_key_file(key_file, "--signing-key-file")
    env_value = os.environ.get(KEY_ENV)
    if env_value is not None:
        return _decode_key(env_value.encode(), f"${KEY_ENV}")
    env_file = os.environ.get(KEY_FILE_ENV)
    if env_file:
        return _read_key_file(env_file, f"${KEY_FILE_ENV}")
    return None


def key_id(key: bytes) -> str:
    """A short public fingerprint of the key, so a wrong key is told apart from a tampered manifest."""
    return hashlib.sha256(b"gpt-triton-key-id\0" + key).hexdigest()[:16]


def _digest_file(path: Path, key: bytes | None) -> tuple[str, str]:
    """(sha256, HMAC-SHA256 with ``key``; "" without a key) of a file, read once in chunks."""
    sha = hashlib.sha256()
    mac = hmac.new(key, digestmod=hashlib.sha256) if key is not None else None
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            sha.update(block)
            if mac is not None:
                mac.update(block)
    return sha.hexdigest(), mac.hexdigest() if mac is not None else ""


def _version_files(version_dir: Path) -> list[str]:
    """Every entry below ``version_dir`` except signatures.json, as sorted posix relative paths.

    Symlinks are refused: one could point outside the signed directory and change under it.
    """
    found: list[str] = []
    for root, dirs, files in os.walk(version_dir):
        for name in sorted(dirs + files):
            full = Path(root) / name
            rel = full.relative_to(version_dir).as_posix()
            if full.is_symlink():
                raise GptTritonError(f"{version_dir}: {rel} is a symlink; signed versions hold regular files only")
        for name in files:
            rel = (Path(root) / name).relative_to(version_dir).as_posix()
            if rel != SIGNATURES_FILE:
                found.append(rel)
    return sorted(found)


def _canonical(entries: list[dict[str, str]]) -> bytes:
    return b"gpt-triton-manifest\0" + json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()


def _manifest_mac(key: bytes, entries: list[dict[str, str]]) -> str:
    return hmac.new(key, _canonical(entries), hashlib.sha256).hexdigest()


def is_ed25519_key(key: bytes) -> bool:
    """A PEM key selects Ed25519 (asymmetric: servers verify with the public key and cannot sign)."""
    return key.lstrip().startswith(b"-----BEGIN")


def _ed25519_private(key: bytes) -> Any:
    # cryptography is imported only for Ed25519 keys, keeping this module's import standard-library only.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        raise GptTritonError(
            "the PEM signing key is not an unencrypted private key: to sign, create one with "
            "`openssl genpkey -algorithm ed25519`"
        ) from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise GptTritonError("the PEM signing key is not an Ed25519 key: create one with `openssl genpkey -algorithm ed25519`")
    return private


def _ed25519_public(key: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if b"PRIVATE KEY" in key:
        return _ed25519_private(key).public_key()
    try:
        public = serialization.load_pem_public_key(key)
    except (ValueError, TypeError) as exc:
        raise GptTritonError("the PEM verification key is not readable: use the Ed25519 public key (`openssl pkey -pubout`)") from exc
    if not isinstance(public, Ed25519PublicKey):
        raise GptTritonError("the PEM verification key is not an Ed25519 public key")
    return public


def _public_key_id(public: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key_id(raw)


def sign_version_dir(version_dir: Path, key: bytes) -> None:
    """Write ``signatures.json`` covering every file in ``version_dir`` (written via a temp file).

    A raw/hex secret gives HMAC-SHA256 (a MAC per file and over the manifest); an Ed25519 private key
    in PEM gives one Ed25519 signature over the manifest of file sha256s.
    """
    if not key:
        raise GptTritonError("empty signing key: set GPT_TRITON_SIGNING_KEY to a secret")
    version_dir = Path(version_dir)
    ed25519 = is_ed25519_key(key)
    private = _ed25519_private(key) if ed25519 else None
    entries = []
    for rel in _version_files(version_dir):
        sha, mac = _digest_file(version_dir / rel, None if ed25519 else key)
        entries.append({"path": rel, "sha256": sha} if ed25519 else {"path": rel, "sha256": sha, "mac": mac})
    document: dict[str, Any] = {"format": FORMAT, "files": entries}
    if private is not None:
        document.update(
            algorithm=ED25519,
            key_id=_public_key_id(private.public_key()),
            signature=private.sign(_canonical(entries)).hex(),
        )
    else:
        document.update(algorithm=ALGORITHM, key_id=key_id(key), manifest_mac=_manifest_mac(key, entries))
    target = version_dir / SIGNATURES_FILE
    tmp = version_dir / f".{SIGNATURES_FILE}.tmp"
    with open(tmp, "w") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)


def _load_signatures(version_dir: Path) -> dict[str, Any]:
    path = version_dir / SIGNATURES_FILE
    if not path.is_file():
        raise GptTritonError(f"unsigned version {version_dir}: no {SIGNATURES_FILE}; promote it again with a signing key")
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GptTritonError(f"tampered file {path}: not readable JSON ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT or not isinstance(document.get("files"), list):
        raise GptTritonError(f"tampered file {path}: not a {FORMAT} document")
    return document


def _wrong_key(version_dir: Path, recorded: Any, this: str) -> GptTritonError:
    return GptTritonError(
        f"{version_dir / SIGNATURES_FILE} was signed with a different key (key id {recorded}, this key {this}): "
        "use the key the version was promoted with"
    )


def _check_manifest(version_dir: Path, document: dict[str, Any], key: bytes) -> bool:
    """Authenticate the file list; returns True for an Ed25519 manifest, False for HMAC."""
    entries: list[dict[str, str]] = document["files"]
    algorithm = document.get("algorithm")
    path = version_dir / SIGNATURES_FILE
    if algorithm == ED25519:
        if not is_ed25519_key(key):
            raise GptTritonError(f"{path} is Ed25519-signed: verify with the Ed25519 public key (PEM), not a secret")
        from cryptography.exceptions import InvalidSignature

        public = _ed25519_public(key)
        try:
            public.verify(bytes.fromhex(str(document.get("signature", ""))), _canonical(entries))
        except (InvalidSignature, ValueError):
            if document.get("key_id") != _public_key_id(public):
                raise _wrong_key(version_dir, document.get("key_id"), _public_key_id(public)) from None
            raise GptTritonError(f"tampered file {path}: its Ed25519 signature does not match") from None
        return True
    if algorithm != ALGORITHM:
        raise GptTritonError(f"tampered file {path}: unknown algorithm {algorithm!r}")
    if is_ed25519_key(key):
        raise GptTritonError(f"{path} is HMAC-signed: verify with the shared secret, not a PEM key")
    if not hmac.compare_digest(_manifest_mac(key, entries), str(document.get("manifest_mac", ""))):
        if document.get("key_id") != key_id(key):
            raise _wrong_key(version_dir, document.get("key_id"), key_id(key))
        raise GptTritonError(f"tampered file {path}: its manifest MAC does not match")
    return False


def verify_version_dir(version_dir: Path, key: bytes | None = None) -> None:
    """Raise GptTritonError naming the first tampered, missing or unsigned file of ``version_dir``.

    ``key`` None loads it with :func:`load_signing_key`; no key at all is an error, never a pass.
    """
    version_dir = Path(version_dir)
    if key is None:
        key = load_signing_key()
    if not key:
        raise GptTritonError(
            f"no signing key: set GPT_TRITON_SIGNING_KEY (or GPT_TRITON_SIGNING_KEY_FILE) to verify {version_dir}"
        )
    if not version_dir.is_dir():
        raise GptTritonError(f"version directory {version_dir} does not exist")
    document = _load_signatures(version_dir)
    entries: list[dict[str, str]] = document["files"]
    ed25519 = _check_manifest(version_dir, document, key)
    signed: dict[str, dict[str, str]] = {}
    for entry in entries:
        rel = str(entry.get("path", ""))
        pure = PurePosixPath(rel)
        if not rel or pure.is_absolute() or ".." in pure.parts:
            raise GptTritonError(f"tampered file {version_dir / SIGNATURES_FILE}: bad path {rel!r}")
        signed[rel] = entry
    present = set(_version_files(version_dir))
    # Walk the union in sorted order so "the first" problem is the same on every run.
    for rel in sorted(present | set(signed)):
        if rel not in signed:
            hint = "remove it or re-promote"
            if "__pycache__/" in rel:  # written by an import, not by an attacker, most likely
                hint = ("python wrote it at import: promote with the Python version Triton's stub runs "
                        "(its pycs are signed) or set PYTHONDONTWRITEBYTECODE=1 for the server")
            raise GptTritonError(f"unsigned file {version_dir / rel}: it was added after signing; {hint}")
        if rel not in present:
            raise GptTritonError(f"missing file {version_dir / rel}: it was signed but is gone; re-promote the version")
        sha, mac = _digest_file(version_dir / rel, None if ed25519 else key)
        entry = signed[rel]
        # With Ed25519 the manifest signature authenticates each sha256; with HMAC each file has a MAC too.
        mac_ok = ed25519 or hmac.compare_digest(mac, str(entry.get("mac", "")))
        if not (mac_ok and hmac.compare_digest(sha, str(entry.get("sha256", "")))):
            raise GptTritonError(f"tampered file {version_dir / rel}: its bytes do not match the signature")
