"""The route-family abstraction: enumerate knobs, build a route into an artifact, describe it.

A *knob* is one option of a compiler family; a *route* is one value per knob; the *default route* keeps
every knob at its default. Families are small classes (like optuna's samplers), one private module each,
re-exported from :mod:`gpt_triton.routes`, all checked by the shared conformance suite in
``tests/routes/conformance.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Literal

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.routes import Artifact, BuildContext, Knob, Route, Runtime


class RouteFamily(ABC):
    """A compiler family. Subclasses set ``name`` and implement the three methods."""

    name: str = ""
    # "compiler": ONNX -> engine artifact; "graph": ONNX -> ONNX rewrite that composes before a compiler;
    # "serving": Triton settings only (build returns the source artifact unchanged, no files written).
    kind: Literal["compiler", "graph", "serving"] = "compiler"
    runtime: Runtime = "onnxruntime"

    @abstractmethod
    def availability(self) -> tuple[bool, str]:
        """(available on this machine, why not). Must not raise."""

    @abstractmethod
    def knobs(self, model: ModelInfo) -> list[Knob]:
        """The knobs this family offers for this model, with allowed values and defaults."""

    @abstractmethod
    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        """Build ``route`` into files under ``out_dir``. Runs in a child process; may crash."""

    def default_route(self, model: ModelInfo) -> Route:
        return Route(family=self.name, knobs={k.name: k.default for k in self.knobs(model)})
