"""HMAC-SHA256 with a shared secret: a MAC per file and one over the manifest.

Symmetric: whoever verifies can also sign, so a server holding the secret could forge a version. Use
Ed25519 (``_ed25519``) when servers should hold only a public key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.promote._signer import Entries, Signer, canonical, key_id


class HmacSigner(Signer):
    algorithm = "hmac-sha256"
    label = "HMAC"
    verify_with = "the shared secret, not a PEM key"

    @property
    def key_id(self) -> str:
        return key_id(self.key)

    def _manifest_mac(self, entries: Entries) -> str:
        return hmac.new(self.key, canonical(entries), hashlib.sha256).hexdigest()

    def sign(self, entries: Entries) -> dict[str, str]:
        return {"algorithm": self.algorithm, "key_id": self.key_id, "manifest_mac": self._manifest_mac(entries)}

    def verify(self, entries: Entries, document: Mapping[str, Any], path: Path) -> None:
        if not hmac.compare_digest(self._manifest_mac(entries), str(document.get("manifest_mac", ""))):
            if document.get("key_id") != self.key_id:
                raise self.wrong_key(path, document.get("key_id"))
            raise GptTritonError(f"tampered file {path}: its manifest MAC does not match")

    def file_mac(self) -> hmac.HMAC:
        # gpt-triton-signatures/1 records a MAC per file for HMAC versions; kept so signed repositories verify.
        return hmac.new(self.key, digestmod=hashlib.sha256)
