"""The runtime layer: the one place that turns an artifact's ``runtime_options`` into a live session.

    from gpt_triton.runtimes import open_runner
    with open_runner(artifact.runtime, Path(artifact.directory) / artifact.files[0], artifact.runtime_options) as runner:
        outputs = runner.infer({"x": x})

``RUNTIMES`` maps a runtime name (``Artifact.runtime``) to its :class:`Runtime`; each runtime also says
how Triton's native backend would express the same options (:meth:`Runtime.native_config`), which is
how deploy chooses between the native backend and the python-backend adapter.

Self-contained on purpose: these modules import only the standard library, numpy and the runtime
libraries (lazily), and each other by relative import, because deploy copies this package next to the
python-backend adapter into every model version directory (production Triton has no gpt_triton).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._base import (
    Feeds,
    NativeBackendConfig,
    Outputs,
    Runner,
    RunnerError,
    RunnerStateError,
    Runtime,
    RuntimeLayerError,
    RuntimeOptionError,
    RuntimeUnavailableError,
    UnknownRuntimeError,
)
from ._onnxruntime import OnnxRuntime, OnnxRuntimeRunner
from ._openvino import OpenVino, OpenVinoRunner
from ._tensorrt import TensorRt, TensorRtRunner

RUNTIMES: dict[str, Runtime] = {runtime.name: runtime for runtime in (OnnxRuntime(), OpenVino(), TensorRt())}


def get_runtime(name: str) -> Runtime:
    try:
        return RUNTIMES[name]
    except KeyError:
        raise UnknownRuntimeError(f"unknown runtime {name!r}; known runtimes: {sorted(RUNTIMES)}") from None


def open_runner(
    runtime: str, entry: str | Path, options: Mapping[str, Any] | None = None, *,
    output_names: Sequence[str] | None = None, reuse_outputs: bool = False,
) -> Runner:
    """An inactive runner for ``entry`` (an artifact's ``files[0]``) with its ``runtime_options``."""
    return get_runtime(runtime).open(Path(entry), options or {}, output_names=output_names, reuse_outputs=reuse_outputs)


def run_once(runtime: str, entry: str | Path, options: Mapping[str, Any] | None, feeds: Feeds) -> Outputs:
    """Open, activate, run one request, deactivate: the outputs (owned arrays)."""
    with open_runner(runtime, entry, options) as runner:
        return runner.infer(feeds)


__all__ = [
    "RUNTIMES",
    "Feeds",
    "NativeBackendConfig",
    "OnnxRuntime",
    "OnnxRuntimeRunner",
    "OpenVino",
    "OpenVinoRunner",
    "Outputs",
    "Runner",
    "RunnerError",
    "RunnerStateError",
    "Runtime",
    "RuntimeLayerError",
    "RuntimeOptionError",
    "RuntimeUnavailableError",
    "TensorRt",
    "TensorRtRunner",
    "UnknownRuntimeError",
    "get_runtime",
    "open_runner",
    "run_once",
]
