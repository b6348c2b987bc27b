"""The route-family abstraction: enumerate knobs, build a route into an artifact, describe it.

A *knob* is one option of a compiler family; a *route* is one value per knob; the *default route* keeps
every knob at its default. Families are small classes (like optuna's samplers), one private module each,
re-exported from :mod:`gpt_triton.routes`, all checked by the shared conformance suite in
:mod:`gpt_triton.testing.conformance.families`.

Three methods are abstract (``availability``, ``knobs``, ``build``). The hooks are optional and have
defaults that are always safe, so callers read them directly and never probe with ``getattr``:
``file_knobs``, ``batch_in_build``, ``device`` and ``runtime_options`` (read by the build), ``conditional``
(the search) and ``knobs_by_version`` (``gpt-triton routes``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from gpt_triton.core.model_info import ModelInfo
from gpt_triton.core.routes import Artifact, BuildContext, Knob, Route, Runtime


class RouteFamily(ABC):
    """A compiler family. Subclasses set ``name`` and implement the three methods."""

    name: str = ""
    # "compiler": ONNX -> engine artifact; "graph": ONNX -> ONNX rewrite that composes before a compiler;
    # "serving": Triton settings only (build returns the source artifact unchanged, no files written).
    kind: Literal["compiler", "graph", "serving"] = "compiler"
    runtime: Runtime = "onnxruntime"

    file_knobs: ClassVar[tuple[str, ...] | None] = None
    """Knobs whose values change the built files; the others only change ``runtime_options``.

    Read by :mod:`gpt_triton.build`: routes that agree on these knobs share one build. ``None`` (the
    default) means every knob may change the files, so no two distinct routes share a build; ``()``
    means no knob does (the serving family writes nothing)."""

    conditional: ClassVar[Mapping[str, tuple[str, tuple[Any, ...]]]] = MappingProxyType({})  # shared: read-only
    """knob -> (parent knob, parent values under which the knob applies), e.g. the fp16 block list only
    under ``precision=fp16``.

    Read by :mod:`gpt_triton.search`: a knob whose parent has another value is reset to its default, so
    no two planned routes differ only in a knob that cannot matter. Default: every knob always applies."""

    batch_in_build: ClassVar[bool] = False
    """Whether the built files depend on the serving route's batch (a TensorRT engine's optimization profile).

    Read by :mod:`gpt_triton.build`: when True, each candidate's build gets a context whose
    ``max_batch_size`` is its serving route's resolved max batch (what deploy writes to config.pbtxt) and whose
    ``opt_batch_size`` is the batch the server will mostly run, and both are part of the build key, so one
    compiler route is built once per distinct serving batch. Default False: the files serve any batch."""

    device: ClassVar[Literal["cpu", "gpu"]] = "cpu"
    """Where the family's builds run. Read by :mod:`gpt_triton.build` to limit a build child's memory:
    "cpu" caps its address space (RLIMIT_AS); "gpu" builds start CUDA, which reserves far more virtual
    address space than any such cap allows, so their resident memory is watched instead. Default "cpu"."""

    @abstractmethod
    def availability(self) -> tuple[bool, str]:
        """(available on this machine, why not). Must not raise."""

    @abstractmethod
    def knobs(self, model: ModelInfo) -> list[Knob]:
        """The knobs this family offers for this model, with allowed values and defaults."""

    @abstractmethod
    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        """Build ``route`` into files under ``out_dir``. Runs in a child process; may crash."""

    def runtime_options(self, route: Route, model: ModelInfo) -> dict[str, Any] | None:
        """The options a runtime applies when it opens this route's files, known without building.

        Read by :mod:`gpt_triton.build`: a route that shares another route's files (see ``file_knobs``)
        gets its own options from here. ``None`` (the default): the family cannot say before building,
        so the built artifact's own ``runtime_options`` are used."""
        return None

    def knobs_by_version(self, model: ModelInfo) -> dict[str, list[Knob]]:
        """The knobs the family offers with each supported version of its library, answerable without that
        library installed: label of a version range -> knobs.

        Read by ``gpt-triton routes`` to show what a machine with the library would sweep. Default ``{}``: the
        family's knobs do not depend on a library version (``knobs`` says it all)."""
        return {}

    def default_route(self, model: ModelInfo) -> Route:
        return Route(family=self.name, knobs={k.name: k.default for k in self.knobs(model)})
