"""Triton launchers: one interface (:class:`TritonServer`), an embedded and a remote implementation."""

from gpt_triton.server._base import ModelLoadError, TritonServer
from gpt_triton.server._embedded import (
    SUMMARY_METRICS_ARGS,
    EmbeddedTriton,
    last_error_line,
    python_backend_dir,
    triton_binary,
)
from gpt_triton.server._remote import RemoteTriton

__all__ = [
    "SUMMARY_METRICS_ARGS",
    "EmbeddedTriton",
    "ModelLoadError",
    "RemoteTriton",
    "TritonServer",
    "last_error_line",
    "python_backend_dir",
    "triton_binary",
]
