"""The two seams of the runtime layer: a ``Runtime`` opens an artifact as a ``Runner``.

A runner's lifecycle is enforced here, not by convention (Polygraphy's runners)::

    runner = runtime.open(entry, options)   # options validated, nothing loaded yet
    with runner:                            # activate(): the session / compiled model is created
        outputs = runner.infer(feeds)       # {output name: array}, in ``runner.output_names`` order
                                            # deactivate(): resources released

This module and its siblings import nothing from ``gpt_triton``: the python-backend adapter ships
them beside itself into every Triton model version directory, where gpt_triton is not installed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import numpy as np

Feeds = Mapping[str, np.ndarray]
Outputs = dict[str, np.ndarray]
R = TypeVar("R", bound="Runner")


class RuntimeLayerError(Exception):
    """Base of every error the runtime layer raises (callers translate it to their own error type)."""


class RuntimeOptionError(RuntimeLayerError, ValueError):
    """An option a runtime does not know or a value of the wrong kind; names the option and what fits."""

    def __init__(self, runtime: str, option: str, expected: str, got: Any = ...) -> None:
        self.runtime, self.option, self.expected = runtime, option, expected
        shown = "" if got is ... else f" = {got!r}"
        super().__init__(f"{runtime} runtime option {option}{shown} is not valid: expected {expected}")


class RuntimeUnavailableError(RuntimeLayerError, RuntimeError):
    """The runtime's library (or device) is missing here; the message says how to get it."""


class UnknownRuntimeError(RuntimeLayerError, ValueError):
    """No runtime of that name."""


class RunnerStateError(RuntimeLayerError, RuntimeError):
    """A runner used out of order: infer before activate or after deactivate, activate twice, ..."""


class RunnerError(RuntimeLayerError, RuntimeError):
    """The runtime failed to load or run the artifact (the runtime's own message is included)."""


@dataclass(frozen=True)
class NativeBackendConfig:
    """What Triton's native backend needs in config.pbtxt to apply exactly a runtime's options."""

    backend: str  # Triton backend name: "onnxruntime", "openvino", "tensorrt"
    parameters: dict[str, str] = field(default_factory=dict)  # config.pbtxt `parameters` (string values)
    graph_level: int | None = None  # `optimization.graph.level` (ONNX Runtime backend); None: left unset
    platform: str = ""  # set instead of `backend` when the backend is chosen by platform ("tensorrt_plan")
    gpu: bool = False  # instances must be KIND_GPU
    # `optimization.execution_accelerators.gpu_execution_accelerator`, in order: name -> its parameters
    # (ONNX Runtime backend: "tensorrt", "cuda"). Only with ``gpu``.
    gpu_accelerators: dict[str, dict[str, str]] = field(default_factory=dict)


class Runner(ABC):
    """One opened artifact. ``activate`` / ``infer`` / ``deactivate`` are enforced here; subclasses
    implement ``_activate`` (returns the output names), ``_infer`` and ``_deactivate``."""

    def __init__(self, name: str) -> None:
        self.name = name  # e.g. "onnxruntime:/path/model.onnx", used in every error message
        self._active = False
        self._output_names: list[str] = []

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def output_names(self) -> list[str]:
        """The keys ``infer`` returns, in order; known once the runner is active."""
        if not self._active:
            raise RunnerStateError(f"{self.name}: output_names are known only while active; call activate() first")
        return list(self._output_names)

    def activate(self: R) -> R:
        if self._active:
            raise RunnerStateError(f"{self.name} is already active; call deactivate() before activating it again")
        names = list(self._activate())
        self._output_names = names
        self._active = True
        return self

    def infer(self, feeds: Feeds) -> Outputs:
        """Run one request: ``feeds`` maps input names to arrays; returns ``{output name: array}``."""
        if not self._active:
            raise RunnerStateError(f"{self.name} is not active; call activate() (or use it in a with block) before infer()")
        return self._infer(feeds)

    def deactivate(self) -> None:
        if not self._active:
            raise RunnerStateError(f"{self.name} is not active; deactivate() only follows a successful activate()")
        try:
            self._deactivate()
        finally:  # a failing release still leaves the runner unusable, never half-active
            self._active = False

    def __enter__(self: R) -> R:
        return self.activate()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self._active:
            self.deactivate()

    @abstractmethod
    def _activate(self) -> Sequence[str]:
        """Load the artifact (session, compiled model, engine); return the output names infer will return."""

    @abstractmethod
    def _infer(self, feeds: Feeds) -> Outputs:
        """One inference on an active runner."""

    @abstractmethod
    def _deactivate(self) -> None:
        """Release what ``_activate`` acquired."""


class Runtime(ABC):
    """One inference runtime: opens artifacts with their ``runtime_options`` and says how Triton's
    native backend would express those options."""

    name: ClassVar[str]
    backend: ClassVar[str]  # the Triton native backend that serves this runtime's artifacts
    # False when our python-backend adapter must not serve it (it needs its native backend).
    python_backend: ClassVar[bool] = True

    def availability(self) -> tuple[bool, str]:
        """(usable here, why not). Never raises."""
        return True, ""

    @abstractmethod
    def open(
        self, entry: Path, options: Mapping[str, Any], *, output_names: Sequence[str] | None = None,
        reuse_outputs: bool = False,
    ) -> Runner:
        """An inactive runner for the artifact whose entry file is ``entry``.

        ``options`` are the artifact's ``runtime_options``; unknown or ill-typed ones raise
        :class:`RuntimeOptionError` here, before anything is loaded. ``output_names`` picks (and orders)
        the outputs ``infer`` returns (default: every output the model declares). ``reuse_outputs``
        lets ``infer`` return views into buffers the next ``infer`` overwrites (no copy); only for a
        caller that copies or drops the outputs before its next request.
        """

    def native_config(self, options: Mapping[str, Any]) -> NativeBackendConfig | None:
        """Triton's native-backend parameters for exactly these options; None when the native backend
        cannot express them faithfully (the python-backend adapter then serves the artifact)."""
        return None


def check_keys(runtime: str, options: Mapping[str, Any], known: Mapping[str, str], prefix: str = "") -> None:
    """Refuse keys outside ``known`` (name -> what it expects), naming the first stranger and the choices."""
    if not isinstance(options, Mapping):
        raise RuntimeOptionError(runtime, prefix.rstrip(".") or "options", "a mapping of option names to values", options)
    for key in options:
        if key not in known:
            choices = ", ".join(f"{name} ({what})" for name, what in known.items())
            raise RuntimeOptionError(runtime, f"{prefix}{key}", f"one of: {choices}" if choices else "no options at all")


def mapping_option(runtime: str, options: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``options[key]`` as a mapping (absent or None: empty)."""
    value = options.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RuntimeOptionError(runtime, key, "a mapping (JSON object)", value)
    return value


def require_file(runtime: str, entry: Path) -> Path:
    entry = Path(entry)
    if not entry.is_file():
        raise RunnerError(f"{runtime}: artifact entry {entry} does not exist; rebuild the candidate or fix the path")
    return entry
