"""Ed25519 with a PEM key: one signature over the manifest of file sha256s.

Asymmetric: promotion signs with the private key, servers verify with the public key (or the private
one) and cannot forge a version. ``cryptography`` is imported only when a key is used, so importing
this module (the runtime adapter does, through ``signing``) stays standard-library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError
from gpt_triton.promote._signer import Entries, Signer, canonical, key_id

_CREATE_HINT = "create one with `openssl genpkey -algorithm ed25519`"


class Ed25519Signer(Signer):
    algorithm = "ed25519"
    label = "Ed25519"
    verify_with = "the Ed25519 public key (PEM), not a secret"

    @cached_property
    def _private(self) -> Any:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        try:
            private = serialization.load_pem_private_key(self.key, password=None)
        except (ValueError, TypeError) as exc:
            raise GptTritonError(
                f"the PEM signing key is not an unencrypted private key: to sign, {_CREATE_HINT}"
            ) from exc
        if not isinstance(private, Ed25519PrivateKey):
            raise GptTritonError(f"the PEM signing key is not an Ed25519 key: {_CREATE_HINT}")
        return private

    @cached_property
    def _public(self) -> Any:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        if b"PRIVATE KEY" in self.key:
            return self._private.public_key()
        try:
            public = serialization.load_pem_public_key(self.key)
        except (ValueError, TypeError) as exc:
            raise GptTritonError(
                "the PEM verification key is not readable: use the Ed25519 public key (`openssl pkey -pubout`)"
            ) from exc
        if not isinstance(public, Ed25519PublicKey):
            raise GptTritonError("the PEM verification key is not an Ed25519 public key")
        return public

    @property
    def key_id(self) -> str:
        from cryptography.hazmat.primitives import serialization

        # Of the raw public key: the private and the public PEM of one pair share the id.
        return key_id(self._public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))

    def check_can_sign(self) -> None:
        self._private  # noqa: B018 - parsing it raises the one-line error for a public or foreign key

    def sign(self, entries: Entries) -> dict[str, str]:
        return {"algorithm": self.algorithm, "key_id": self.key_id,
                "signature": self._private.sign(canonical(entries)).hex()}

    def verify(self, entries: Entries, document: Mapping[str, Any], path: Path) -> None:
        from cryptography.exceptions import InvalidSignature

        try:
            self._public.verify(bytes.fromhex(str(document.get("signature", ""))), canonical(entries))
        except (InvalidSignature, ValueError):
            if document.get("key_id") != self.key_id:
                raise self.wrong_key(path, document.get("key_id")) from None
            raise GptTritonError(f"tampered file {path}: its Ed25519 signature does not match") from None
