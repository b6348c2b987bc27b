"""The conformance suite every :class:`~gpt_triton.routes.RouteFamily` passes. A family's test class
subclasses :class:`FamilyConformance`.

Subclasses set ``family`` (an instance), ``model_builder`` (one of gpt_triton.testing.models' builders)
and ``non_default`` (knob changes for a second, non-default route). Builds run in-process here: the
contract is the family's; isolation is the build stage's (tests/test_build.py). Built artifacts are run
through :func:`gpt_triton.runtimes.open_runner`, as the measure and deploy stages open them, unless the
subclass overrides the ``check_artifact_outputs`` hook (artifacts that cannot run here, e.g. TensorRT plans
built by gpt_triton.testing.fake_tensorrt).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.routes import Artifact, BuildContext, Route, RouteFamily
from gpt_triton.routes._common import files_sha256
from gpt_triton.runtimes import get_runtime, open_runner
from gpt_triton.testing.models import build_tiny_mlp


def make_inputs(model: ModelInfo, shapes: dict[str, list[int]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.random(shapes[t.name], dtype=np.float32).astype(t.dtype) for t in model.inputs}


def write_calibration(model: ModelInfo, shapes: dict[str, list[int]], path: Path, count: int = 8) -> Path:
    """Tuning-split inputs stacked on a new leading axis, as the accuracy stage saves them."""
    feeds = [make_inputs(model, shapes, seed=i) for i in range(count)]
    np.savez(path, **{t.name: np.stack([f[t.name] for f in feeds]) for t in model.inputs})
    return path


def run_artifact(artifact: Artifact, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Open an artifact the way deploy does (files + runtime_options, through the runtime layer) and run
    one request. Skips where the artifact's runtime is unavailable (TensorRT without a GPU)."""
    available, why = get_runtime(artifact.runtime).availability()
    if not available:
        pytest.skip(f"no {artifact.runtime} runtime here: {why}")
    with open_runner(artifact.runtime, Path(artifact.directory) / artifact.files[0], artifact.runtime_options) as runner:
        return runner.infer(feeds)


class FamilyConformance:
    family: ClassVar[RouteFamily]
    model_builder: ClassVar[Callable[..., Path]] = staticmethod(build_tiny_mlp)
    non_default: ClassVar[dict[str, Any]] = {}

    @pytest.fixture(scope="class")
    def model(self, tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
        path = type(self).model_builder(tmp_path_factory.mktemp("model") / "model.onnx")
        return inspect_model(path)

    @pytest.fixture(scope="class")
    def context(self, model: ModelInfo, tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
        shapes = resolve_shapes(model, {})
        calib = write_calibration(model, shapes, tmp_path_factory.mktemp("calib") / "tuning.npz")
        return BuildContext(model=model, shapes=shapes, max_batch_size=8 if model.batch_dynamic else 0, calibration_npz=str(calib))

    def _require_available(self) -> None:
        available, why = self.family.availability()
        if not available:
            pytest.skip(why)

    def test_availability_never_raises(self) -> None:
        available, why = self.family.availability()
        assert isinstance(available, bool)
        assert available or why, "an unavailable family must say why"

    def test_knobs_have_defaults_among_values(self, model: ModelInfo) -> None:
        knobs = self.family.knobs(model)
        assert knobs
        assert len({k.name for k in knobs}) == len(knobs)
        for knob in knobs:
            assert knob.values, knob.name
            assert knob.default in knob.values, f"{knob.name}: default {knob.default!r} not in {knob.values}"

    def _check_artifact(self, artifact: Artifact, route: Route, context: BuildContext) -> None:
        directory = Path(artifact.directory)
        assert artifact.files
        for name in artifact.files:
            assert (directory / name).is_file(), name
        assert artifact.sha256 == files_sha256(directory, artifact.files)
        assert artifact.size_bytes == sum((directory / f).stat().st_size for f in artifact.files)
        assert artifact.family == self.family.name
        assert artifact.route == route
        assert not list(directory.glob("*.part*")), "a temp file was left behind"
        self.check_artifact_outputs(artifact, route, context)

    def check_artifact_outputs(self, artifact: Artifact, route: Route, context: BuildContext) -> None:
        """Hook: check what the artifact computes. Default: run one request through the runtime layer (as deploy
        and measure open it) and check every output's name, shape and finiteness. A family whose artifacts cannot
        run here (a TensorRT plan without a GPU) overrides it to check the artifact's recorded contents instead."""
        outputs = run_artifact(artifact, make_inputs(context.model, context.shapes))
        batch = next(iter(context.shapes.values()))[0]
        for tensor in context.model.outputs:
            assert tensor.name in outputs, f"output {tensor.name} missing from {sorted(outputs)}"
            want = [batch if (isinstance(d, str) or d < 0) else d for d in tensor.dims]
            assert list(outputs[tensor.name].shape) == want
            assert np.isfinite(outputs[tensor.name]).all()

    def test_default_route_builds_and_runs(self, context: BuildContext, tmp_path: Path) -> None:
        self._require_available()
        route = self.family.default_route(context.model)
        artifact = self.family.build(route, context, tmp_path / "out")
        self._check_artifact(artifact, route, context)

    def test_non_default_route_builds_and_runs(self, context: BuildContext, tmp_path: Path) -> None:
        self._require_available()
        route = self.family.default_route(context.model)
        assert self.non_default, "the subclass must name a non-default route"
        route = Route(family=self.family.name, knobs={**route.knobs, **self.non_default})
        artifact = self.family.build(route, context, tmp_path / "out")
        self._check_artifact(artifact, route, context)
