"""Signing of a promoted model version, and its verification.

``signatures.json`` lists every file of a version directory (relative path, sha256) and authenticates
that list as a whole, so removing a file *and* its entry is caught too. The key picks the scheme
(:func:`signer_for`): a raw/hex secret gives HMAC-SHA256 (``_hmac``: a MAC per file and one over the
manifest); a PEM key gives Ed25519 (``_ed25519``: one signature over the list of sha256s; servers then
hold only the public key and cannot forge a version). This module walks and hashes the directory; the
:class:`~gpt_triton.promote._signer.Signer` authenticates the manifest.

A version promoted with its model name and number (``gpt-triton-signatures/2``) signs them with the
file list, so a version copied to another number or model no longer verifies; ``/1`` documents (older
promotions) still verify, reported as unbound. :func:`verify_before_load` is the adapter's policy inside
Triton: with a key set, an unsigned version, a copied one, or an edited model-level ``config.pbtxt`` is
refused.

This module is imported by the python-backend runtime adapter inside Triton before it loads anything:
it must stay cheap to import (standard library only; ``cryptography`` only when an Ed25519 key is used)
and must never print.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.promote._ed25519 import Ed25519Signer
from gpt_triton.promote._hmac import HmacSigner
from gpt_triton.promote._signer import Signer, key_id

SIGNATURES_FILE = "signatures.json"
FORMAT = "gpt-triton-signatures/1"  # unbound: the file list alone (older promotions)
BOUND_FORMAT = "gpt-triton-signatures/2"  # the file list plus the model name and version number
CONFIG_FILE = "config.pbtxt"
PROMOTED_CONFIG_FILE = "promoted_config.pbtxt"
# Model-config parameters written at promotion: the model expects signed versions, by this key.
SIGNED_PARAMETER = "gpt_triton_signed"
KEY_ID_PARAMETER = "gpt_triton_signing_key_id"
ALGORITHM = HmacSigner.algorithm
ED25519 = Ed25519Signer.algorithm
KEY_ENV = "GPT_TRITON_SIGNING_KEY"
KEY_FILE_ENV = "GPT_TRITON_SIGNING_KEY_FILE"
_CHUNK = 1 << 20

__all__ = [
    "ALGORITHM", "BOUND_FORMAT", "ED25519", "FORMAT", "KEY_ENV", "KEY_FILE_ENV", "KEY_ID_PARAMETER",
    "SIGNATURES_FILE", "SIGNED_PARAMETER", "SIGNERS", "Signer", "Verified", "is_ed25519_key", "key_id",
    "load_signing_key", "operational_config", "sign_version_dir", "signer_for", "verify_before_load",
    "verify_model_config", "verify_version_dir",
]


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


def is_ed25519_key(key: bytes) -> bool:
    """A PEM key selects Ed25519 (asymmetric: servers verify with the public key and cannot sign)."""
    return key.lstrip().startswith(b"-----BEGIN")


# The scheme of a document, by its "algorithm" (a plain table: two schemes, both listed here).
SIGNERS: dict[str, type[Signer]] = {ALGORITHM: HmacSigner, ED25519: Ed25519Signer}


def signer_for(key: bytes) -> Signer:
    """The signer a key selects: Ed25519 for a PEM key (private to sign, public or private to verify),
    HMAC-SHA256 for any other secret."""
    return Ed25519Signer(key) if is_ed25519_key(key) else HmacSigner(key)


def _digest_file(path: Path, mac: hmac.HMAC | None) -> tuple[str, str | None]:
    """(sha256, hex of ``mac`` fed the same bytes, or None without one) of a file, read once in chunks."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            sha.update(block)
            if mac is not None:
                mac.update(block)
    return sha.hexdigest(), mac.hexdigest() if mac is not None else None


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


def _binding(model: str, version: int) -> dict[str, str]:
    """The entry a bound manifest signs beside its files (it has no "path", so no file entry is one)."""
    return {"binding": BOUND_FORMAT, "model": model, "version": str(version)}


def _signed_entries(document: dict[str, Any]) -> list[dict[str, str]]:
    """What the document's signature covers: its files, plus the binding in a bound document."""
    entries: list[dict[str, str]] = list(document["files"])
    if document.get("format") == BOUND_FORMAT:
        entries.append(_binding(str(document.get("model")), int(document.get("version", -1))))
    return entries


def sign_version_dir(version_dir: Path, key: bytes, *, model: str | None = None, version: int | None = None) -> None:
    """Write ``signatures.json`` covering every file in ``version_dir`` (written via a temp file).

    A raw/hex secret gives HMAC-SHA256 (a MAC per file and over the manifest); an Ed25519 private key
    in PEM gives one Ed25519 signature over the manifest of file sha256s. With ``model`` and ``version``
    they are signed too (``gpt-triton-signatures/2``): the version verifies only as that model's version.
    """
    if not key:
        raise GptTritonError("empty signing key: set GPT_TRITON_SIGNING_KEY to a secret")
    version_dir = Path(version_dir)
    signer = signer_for(key)
    signer.check_can_sign()  # a public key fails here, before any file is read
    entries = []
    for rel in _version_files(version_dir):
        sha, mac = _digest_file(version_dir / rel, signer.file_mac())
        entries.append({"path": rel, "sha256": sha} if mac is None else {"path": rel, "sha256": sha, "mac": mac})
    document: dict[str, Any] = {"format": FORMAT, "files": entries}
    if model is not None and version is not None:
        document.update(format=BOUND_FORMAT, model=model, version=int(version))
    document.update(signer.sign(_signed_entries(document)))
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
    if (not isinstance(document, dict) or document.get("format") not in (FORMAT, BOUND_FORMAT)
            or not isinstance(document.get("files"), list)):
        raise GptTritonError(f"tampered file {path}: not a {BOUND_FORMAT} (or {FORMAT}) document")
    if document["format"] == BOUND_FORMAT and not (
        isinstance(document.get("model"), str) and isinstance(document.get("version"), int)
    ):
        raise GptTritonError(f"tampered file {path}: its model name or version is missing")
    return document


def _check_manifest(version_dir: Path, document: dict[str, Any], signer: Signer) -> None:
    """Authenticate the file list with ``signer``, after checking it is the document's scheme."""
    path = version_dir / SIGNATURES_FILE
    algorithm = document.get("algorithm")
    scheme = SIGNERS.get(algorithm) if isinstance(algorithm, str) else None
    if scheme is None:
        raise GptTritonError(f"tampered file {path}: unknown algorithm {algorithm!r}")
    if not isinstance(signer, scheme):
        raise GptTritonError(f"{path} is {scheme.label}-signed: verify with {scheme.verify_with}")
    signer.verify(_signed_entries(document), document, path)


def _check_binding(version_dir: Path, document: dict[str, Any]) -> bool:
    """True when the (authenticated) document is bound to this folder's model and version; False for
    an unbound /1 document; raises when it is bound to another model or version."""
    if document.get("format") != BOUND_FORMAT:
        return False
    model, number = version_dir.resolve().parent.name, version_dir.name
    if document["model"] != model or str(document["version"]) != number:
        raise GptTritonError(
            f"copied version {version_dir}: it was signed as {document['model']} version {document['version']}, "
            f"not {model} version {number}; promote it again instead of copying a version"
        )
    return True


@dataclass(frozen=True)
class Verified:
    """What :func:`verify_version_dir` established: every file matches; ``bound`` when the signature
    also names this model and version (False: an older, unbound gpt-triton-signatures/1 version)."""

    key_id: str
    bound: bool


def verify_version_dir(version_dir: Path, key: bytes | None = None) -> Verified:
    """Raise GptTritonError naming the first tampered, missing or unsigned file of ``version_dir``, or a
    version signed for another model or version number (the folder's name and its parent's).

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
    signer = signer_for(key)
    _check_manifest(version_dir, document, signer)
    bound = _check_binding(version_dir, document)
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
        _check_file(version_dir, rel, signed[rel], signer)
    return Verified(key_id=signer.key_id, bound=bound)


def _check_file(version_dir: Path, rel: str, entry: dict[str, str], signer: Signer) -> None:
    sha, mac = _digest_file(version_dir / rel, signer.file_mac())
    # The manifest check authenticated each recorded sha256; a scheme with per-file MACs checks those too.
    mac_ok = mac is None or hmac.compare_digest(mac, str(entry.get("mac", "")))
    if not (mac_ok and hmac.compare_digest(sha, str(entry.get("sha256", "")))):
        raise GptTritonError(f"tampered file {version_dir / rel}: its bytes do not match the signature")


# The one part of config.pbtxt that may change after promotion: the version_policy a promotion or a
# canary writes (text_format's layout, exactly). Anything else differing from the signed copy is an edit.
_VERSION_POLICY = re.compile(
    r"^version_policy \{\n(?:  latest \{\n    num_versions: \d+\n  \}\n"
    r"|  specific \{\n(?:    versions: \d+\n)+  \}\n|  all \{\n  \}\n)\}\n",
    re.MULTILINE,
)


def operational_config(text: str) -> str:
    """A model config's text without its version_policy block, as promotion and canaries write it.

    Text, not protobuf: this runs inside Triton before anything is loaded. A block in another layout is
    kept, so such a config differs from the signed one and is refused (fail closed)."""
    return _VERSION_POLICY.sub("", text, count=1)


def _numeric_versions(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0)


def verify_model_config(model_dir: Path, key: bytes) -> None:
    """Raise unless ``model_dir/config.pbtxt`` is, beyond its version_policy, the config signed with the
    newest version (its ``promoted_config.pbtxt``, authenticated by that version's manifest). An older
    unbound (/1) version signed without that copy is not checked: there is nothing signed to compare."""
    model_dir = Path(model_dir)
    versions = _numeric_versions(model_dir)
    if not versions:
        raise GptTritonError(f"no versions in {model_dir}: nothing signed to check {CONFIG_FILE} against")
    newest = model_dir / str(versions[-1])
    document = _load_signatures(newest)
    signer = signer_for(key)
    _check_manifest(newest, document, signer)
    _check_binding(newest, document)
    entry = next((e for e in document["files"] if e.get("path") == PROMOTED_CONFIG_FILE), None)
    if entry is None:
        if document["format"] == FORMAT:
            return  # an older, unbound version signed outside a promotion: no signed config to compare with
        raise GptTritonError(
            f"{newest} has no signed {PROMOTED_CONFIG_FILE}, so {model_dir / CONFIG_FILE} cannot be checked: re-promote it"
        )
    _check_file(newest, PROMOTED_CONFIG_FILE, entry, signer)
    live = model_dir / CONFIG_FILE
    try:
        live_text = live.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise GptTritonError(f"cannot read {live}: {exc}; restore it from {newest / PROMOTED_CONFIG_FILE}") from exc
    if operational_config(live_text) != operational_config((newest / PROMOTED_CONFIG_FILE).read_text()):
        raise GptTritonError(
            f"tampered file {live}: differs from the config signed with version {versions[-1]} (beyond "
            f"version_policy); restore {newest / PROMOTED_CONFIG_FILE} as {CONFIG_FILE} or re-promote"
        )


def verify_before_load(version_dir: Path, declared_key_id: str | None = None) -> Verified:
    """The adapter's check inside Triton, with the server's key (:func:`load_signing_key`): the version's
    files, its model and version, and the model-level config.pbtxt. ``declared_key_id``: the key id the
    model config says its versions are signed with (promotion writes it), or None.

    Refuses (raises) a version without (readable) signatures, and a model whose config declares a key
    when the server has none: a deleted signatures.json never turns verification off.
    """
    version_dir = Path(version_dir)
    key = load_signing_key()
    if not key:
        raise GptTritonError(
            f"{version_dir.parent.name} is signed (key id {declared_key_id or 'in signatures.json'}) but this server "
            f"has no key: set {KEY_ENV} (or {KEY_FILE_ENV}) in Triton's environment"
        )
    verified = verify_version_dir(version_dir, key)
    verify_model_config(version_dir.parent, key)
    return verified
