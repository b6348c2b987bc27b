"""The :class:`Signer` base: authenticates the manifest (the list of files and their sha256) of a version.

Standard library only, like every module the runtime adapter imports inside Triton. Implementations
live in ``_hmac`` and ``_ed25519``; ``signing.signer_for`` picks one from the key bytes, and every one
passes ``gpt_triton.testing.conformance.signers.SignerConformance``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from gpt_triton.core.errors import GptTritonError

Entries = list[dict[str, str]]


def key_id(key: bytes) -> str:
    """A short public fingerprint of the key, so a wrong key is told apart from a tampered manifest."""
    return hashlib.sha256(b"gpt-triton-key-id\0" + key).hexdigest()[:16]


def canonical(entries: Entries) -> bytes:
    """The bytes a signature covers: the sorted-key, compact JSON of the entries behind a fixed prefix
    (so a signature over a manifest cannot be replayed as a signature over anything else)."""
    return b"gpt-triton-manifest\0" + json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()


class Signer(ABC):
    """One key of one signature scheme. ``sign`` and ``verify`` work on a manifest, never on files; the
    hooks default to "the manifest signature alone authenticates each sha256"."""

    algorithm: ClassVar[str]  # the document's "algorithm"
    label: ClassVar[str]  # in messages: "<label>-signed"
    verify_with: ClassVar[str]  # in messages: which key verifies a document of this scheme

    def __init__(self, key: bytes) -> None:
        if not key:
            raise GptTritonError("empty signing key: set GPT_TRITON_SIGNING_KEY to a secret")
        self.key = key

    @property
    @abstractmethod
    def key_id(self) -> str:
        """The public fingerprint recorded in ``signatures.json`` (the same for a key pair's two halves)."""

    @abstractmethod
    def sign(self, entries: Entries) -> dict[str, str]:
        """The document fields that authenticate ``entries``: ``algorithm``, ``key_id`` and a signature or MAC."""

    @abstractmethod
    def verify(self, entries: Entries, document: Mapping[str, Any], path: Path) -> None:
        """Raise GptTritonError unless ``document`` authenticates ``entries`` under this key: a document of
        another key names both key ids (:meth:`wrong_key`), anything else is a tampered ``path``."""

    # ------------------------------------------------------------- hooks with defaults

    def check_can_sign(self) -> None:
        """Raise GptTritonError when this key cannot sign (e.g. a public key), before any file is read.
        The default: any key that verifies can sign (a shared secret)."""
        return None

    def file_mac(self) -> hmac.HMAC | None:
        """A fresh MAC fed each file's bytes next to its sha256 (recorded per entry as "mac"), or None:
        the manifest signature alone authenticates each sha256."""
        return None

    def wrong_key(self, path: Path, recorded: Any) -> GptTritonError:
        return GptTritonError(
            f"{path} was signed with a different key (key id {recorded}, this key {self.key_id}): "
            "use the key the version was promoted with"
        )
