"""Promotion into the production repository: atomic versions, provenance, signing, verify, lock.

Names are resolved lazily: the runtime adapter inside Triton imports ``gpt_triton.promote.signing`` and
must not pay for protobuf/pydantic imports that ``repository`` needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PromotedVersion": "gpt_triton.promote.repository",
    "next_version": "gpt_triton.promote.repository",
    "promote": "gpt_triton.promote.repository",
    "list_versions": "gpt_triton.promote.repository",
    "load_signing_key": "gpt_triton.promote.signing",
    "sign_version_dir": "gpt_triton.promote.signing",
    "verify_version_dir": "gpt_triton.promote.signing",
    "promotion_lock": "gpt_triton.promote.lock",
    "verify_repository": "gpt_triton.promote.verify",
    "VersionCheck": "gpt_triton.promote.verify",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpt_triton.promote' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
