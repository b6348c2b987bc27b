"""The conformance suite every :class:`~gpt_triton.promote._signer.Signer` passes.

A test class subclasses :class:`SignerConformance`, sets ``scheme`` (the Signer class the keys select)
and ``asymmetric``, and implements :meth:`signing_key` and :meth:`other_key` (another key of the same
scheme); an asymmetric scheme also implements :meth:`verification_key` (what a server holds). Each
property is checked on a manifest alone and through ``sign_version_dir`` / ``verify_version_dir``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.promote._signer import Entries, Signer
from gpt_triton.promote.signing import SIGNATURES_FILE, sign_version_dir, signer_for, verify_version_dir

ENTRIES: Entries = [
    {"path": "artifact/model.onnx", "sha256": "ab" * 32},
    {"path": "model.py", "sha256": "cd" * 32},
]
WHERE = Path("/repository/model/3") / SIGNATURES_FILE


def _flip_hex(text: str, at: int) -> str:
    """``text`` with the hex digit at ``at`` changed (one flipped bit, still valid hex)."""
    return text[:at] + format(int(text[at], 16) ^ 1, "x") + text[at + 1:]


class SignerConformance:
    """Contract: what a key signs, the same key (or its public half) verifies; one changed byte in a
    file, a recorded sha256 or the signature fails; another key fails with a message naming both key
    ids; an asymmetric scheme verifies with the public key, which cannot sign."""

    scheme: ClassVar[type[Signer]]
    asymmetric: ClassVar[bool]  # the verification key is public and cannot sign

    def signing_key(self) -> bytes:
        raise NotImplementedError

    def verification_key(self) -> bytes:
        """What a server holds to verify; a symmetric scheme's is the signing key itself."""
        return self.signing_key()

    def other_key(self) -> bytes:
        raise NotImplementedError

    def _signed(self) -> tuple[Signer, dict[str, Any]]:
        signer = signer_for(self.signing_key())
        return signer, {"format": "gpt-triton-signatures/1", "files": ENTRIES, **signer.sign(ENTRIES)}

    def _version(self, root: Path) -> Path:
        version = root / "3"
        (version / "artifact").mkdir(parents=True)
        (version / "model.py").write_text("print('adapter')\n")
        (version / "artifact" / "model.onnx").write_bytes(bytes(range(256)) * 16)
        sign_version_dir(version, self.signing_key())
        return version

    def test_the_keys_select_this_scheme(self) -> None:
        for key in (self.signing_key(), self.verification_key(), self.other_key()):
            assert isinstance(signer_for(key), self.scheme)

    def test_key_ids_are_short_public_and_per_key(self) -> None:
        signer, verifier, other = (signer_for(k) for k in (self.signing_key(), self.verification_key(), self.other_key()))
        assert len(signer.key_id) == 16 and all(c in "0123456789abcdef" for c in signer.key_id)
        assert signer.key_id == verifier.key_id  # both halves of a pair, or the one secret
        assert signer.key_id != other.key_id

    def test_sign_then_verify_passes(self, tmp_path: Path) -> None:
        signer, document = self._signed()
        assert document["algorithm"] == self.scheme.algorithm and document["key_id"] == signer.key_id
        signer_for(self.verification_key()).verify(ENTRIES, document, WHERE)
        version = self._version(tmp_path)
        verify_version_dir(version, self.verification_key())
        recorded = json.loads((version / SIGNATURES_FILE).read_text())
        assert sorted(e["path"] for e in recorded["files"]) == ["artifact/model.onnx", "model.py"]

    def test_a_flipped_byte_fails(self, tmp_path: Path) -> None:
        _, document = self._signed()
        verifier = signer_for(self.verification_key())
        changed = [dict(ENTRIES[0], sha256=_flip_hex(ENTRIES[0]["sha256"], 5)), ENTRIES[1]]
        with pytest.raises(GptTritonError, match="tampered file"):
            verifier.verify(changed, document, WHERE)
        for field in ("signature", "manifest_mac"):
            if field in document:
                forged = dict(document, **{field: _flip_hex(document[field], 7)})
                with pytest.raises(GptTritonError, match="tampered file"):
                    verifier.verify(ENTRIES, forged, WHERE)
        version = self._version(tmp_path)
        target = version / "artifact" / "model.onnx"
        data = bytearray(target.read_bytes())
        data[1000] ^= 0x01
        target.write_bytes(bytes(data))
        with pytest.raises(GptTritonError, match=r"tampered file .*artifact/model\.onnx"):
            verify_version_dir(version, self.verification_key())

    def test_a_wrong_key_fails_naming_the_key_ids(self, tmp_path: Path) -> None:
        signer, document = self._signed()
        other = signer_for(self.other_key())
        with pytest.raises(GptTritonError, match="signed with a different key") as caught:
            other.verify(ENTRIES, document, WHERE)
        assert signer.key_id in str(caught.value) and other.key_id in str(caught.value)
        version = self._version(tmp_path)
        with pytest.raises(GptTritonError, match=f"key id {signer.key_id}, this key {other.key_id}"):
            verify_version_dir(version, self.other_key())

    def test_verify_without_the_private_key_where_the_scheme_allows_it(self, tmp_path: Path) -> None:
        version = self._version(tmp_path)
        verify_version_dir(version, self.verification_key())
        if not self.asymmetric:
            assert self.verification_key() == self.signing_key()  # one shared secret signs and verifies
            return
        assert self.verification_key() != self.signing_key()
        with pytest.raises(GptTritonError):
            signer_for(self.verification_key()).check_can_sign()
        with pytest.raises(GptTritonError):
            sign_version_dir(version, self.verification_key())  # a server holding it cannot forge a version
        verify_version_dir(version, self.verification_key())  # the failed attempt left the signature alone
