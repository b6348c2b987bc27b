"""The conformance suite every :class:`~gpt_triton.runtimes.Runtime` passes.

A test class subclasses :class:`RuntimeConformance` and sets ``runtime`` (an instance), ``options`` (a
non-default ``runtime_options`` the runtime must apply), ``bad_options`` (options it must refuse, with
the option name the error must mention) and ``native_cases`` (options whose native-backend translation
is checked against what deploy writes). ``prepare`` turns the ONNX model into the runtime's entry file
(default: the ONNX file itself). Tests that need the runtime skip with its availability reason.

Two optional hooks let a runtime that cannot run here still be checked as far as it can: ``inspect_entry``
(the entry's declared inputs and outputs, read without activating a runner) and ``offline_availability``
(whether ``prepare`` and ``inspect_entry`` work here; default: the runtime's availability). TensorRT uses
them against gpt_triton.testing.fake_tensorrt, where plans deserialize but nothing can execute.

The reference is ONNX's own numpy evaluator (``onnx.reference``), independent of every runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes
from gpt_triton.core.routes import Artifact, Route
from gpt_triton.runtimes import (
    RUNTIMES,
    Runner,
    RunnerError,
    RunnerStateError,
    Runtime,
    RuntimeOptionError,
    get_runtime,
)
from gpt_triton.testing.models import build_tiny_mlp

ALL_NATIVE = frozenset({"onnxruntime", "openvino", "tensorrt"})


def make_feeds(model: ModelInfo, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the model's declared dtypes, batch axis set to ``batch`` when it is dynamic."""
    rng = np.random.default_rng(seed)
    shapes = resolve_shapes(model, {})
    if model.batch_dynamic:
        shapes = {name: [batch, *shape[1:]] for name, shape in shapes.items()}
    return {t.name: rng.standard_normal(shapes[t.name]).astype(t.dtype) for t in model.inputs}


def reference_outputs(model: ModelInfo, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs from ONNX's reference evaluator (pure numpy: no runtime under test)."""
    from onnx.reference import ReferenceEvaluator

    names = [t.name for t in model.outputs]
    return dict(zip(names, ReferenceEvaluator(model.path).run(names, feeds), strict=True))


class RuntimeConformance:
    """Contract: availability never raises; the lifecycle is enforced (infer only while active, no
    double activate or deactivate); outputs carry the model's declared names, shapes and dtypes and
    agree with the reference, at batch 1 and at a larger batch; owned outputs survive the next request;
    unknown or ill-typed options raise :class:`RuntimeOptionError` naming the option, unknown top-level
    ones before the file or the library is touched; ``native_config`` is what deploy writes and what
    choose_backend decides on."""

    runtime: ClassVar[Runtime]
    model_builder: ClassVar[Callable[..., Path]] = staticmethod(build_tiny_mlp)
    options: ClassVar[dict[str, Any]] = {}
    bad_options: ClassVar[list[tuple[dict[str, Any], str]]] = []
    native_cases: ClassVar[list[dict[str, Any]]] = [{}]
    rtol: ClassVar[float] = 1e-4
    atol: ClassVar[float] = 1e-5

    def prepare(self, onnx_path: Path, directory: Path) -> Path:
        """The runtime's entry file for the model (an IR, an engine, ...); default: the ONNX file."""
        return onnx_path

    def offline_availability(self) -> tuple[bool, str]:
        """Hook: whether ``prepare`` and ``inspect_entry`` work here even where the runtime cannot run.
        Default: the runtime's own availability."""
        return self.runtime.availability()

    def inspect_entry(self, entry: Path) -> dict[str, Any] | None:
        """Hook: ``{"inputs": {name: {"dtype": "float32", ...}}, "outputs": {...}}`` as the runtime reads them from
        ``entry`` without activating a runner (in the model's order). Default None: the runtime reads its entry
        only by activating it, which the lifecycle tests cover."""
        return None

    # ------------------------------------------------------------------------------------------ fixtures

    def _require_available(self) -> None:
        available, why = self.runtime.availability()
        if not available:
            pytest.skip(why)

    @pytest.fixture(scope="class")
    def model(self, tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
        return inspect_model(type(self).model_builder(tmp_path_factory.mktemp("model") / "model.onnx"))

    @pytest.fixture(scope="class")
    def entry(self, model: ModelInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
        self._require_available()
        return self.prepare(Path(model.path), tmp_path_factory.mktemp("entry"))

    @pytest.fixture(scope="class")
    def offline_entry(self, model: ModelInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
        available, why = self.offline_availability()
        if not available:
            pytest.skip(why)
        return self.prepare(Path(model.path), tmp_path_factory.mktemp("offline_entry"))

    def _open(self, entry: Path, **kwargs: Any) -> Runner:
        return self.runtime.open(entry, self.options, **kwargs)

    # ------------------------------------------------------------------------------------------ identity

    def test_availability_never_raises(self) -> None:
        available, why = self.runtime.availability()
        assert isinstance(available, bool) and isinstance(why, str)
        assert available or why, "an unavailable runtime must say why"

    def test_registered_under_its_name(self) -> None:
        assert RUNTIMES[self.runtime.name] is get_runtime(self.runtime.name)
        assert type(get_runtime(self.runtime.name)) is type(self.runtime)
        assert self.runtime.backend in ALL_NATIVE

    # ------------------------------------------------------------------------------------------ lifecycle

    def test_lifecycle_is_enforced(self, entry: Path, model: ModelInfo) -> None:
        runner = self._open(entry)
        feeds = make_feeds(model)
        assert not runner.is_active
        with pytest.raises(RunnerStateError, match="activate"):
            runner.infer(feeds)
        with pytest.raises(RunnerStateError):
            _ = runner.output_names
        with pytest.raises(RunnerStateError):
            runner.deactivate()
        assert runner.activate() is runner and runner.is_active
        with pytest.raises(RunnerStateError, match="already active"):
            runner.activate()
        assert runner.is_active, "a refused second activate must leave the runner usable"
        runner.infer(feeds)
        runner.deactivate()
        assert not runner.is_active
        with pytest.raises(RunnerStateError):
            runner.infer(feeds)
        with runner as active:  # activate again after deactivate, as a context manager
            assert active is runner and runner.is_active
            runner.infer(feeds)
        assert not runner.is_active

    def test_context_manager_deactivates_on_error(self, entry: Path, model: ModelInfo) -> None:
        runner = self._open(entry)
        with pytest.raises(KeyError), runner:
            raise KeyError("boom")
        assert not runner.is_active

    # ------------------------------------------------------------------------------------------ outputs

    def _check_outputs(self, model: ModelInfo, outputs: dict[str, np.ndarray], batch: int) -> None:
        assert list(outputs) == [t.name for t in model.outputs]
        for tensor in model.outputs:
            want = [batch if (isinstance(d, str) or d < 0) else d for d in tensor.dims]
            value = outputs[tensor.name]
            assert list(value.shape) == want, tensor.name
            assert value.dtype == np.dtype(tensor.dtype), tensor.name

    @pytest.mark.parametrize("batch", [1, 3])
    def test_outputs_match_declared_outputs_and_reference(self, entry: Path, model: ModelInfo, batch: int) -> None:
        if batch > 1 and not model.batch_dynamic:
            pytest.skip("the model has no dynamic batch axis")
        feeds = make_feeds(model, batch=batch, seed=batch)
        with self._open(entry) as runner:
            assert runner.output_names == [t.name for t in model.outputs]
            outputs = runner.infer(feeds)
        self._check_outputs(model, outputs, batch)
        expected = reference_outputs(model, feeds)
        for name, value in outputs.items():
            np.testing.assert_allclose(value, expected[name], rtol=self.rtol, atol=self.atol, err_msg=name)

    def test_owned_outputs_survive_the_next_request(self, entry: Path, model: ModelInfo) -> None:
        first_feeds, second_feeds = make_feeds(model, seed=1), make_feeds(model, seed=2)
        with self._open(entry) as runner:
            first = runner.infer(first_feeds)
            kept = {name: value.copy() for name, value in first.items()}
            second = runner.infer(second_feeds)
        for name in kept:
            np.testing.assert_array_equal(first[name], kept[name], err_msg=f"{name} was overwritten by the next infer")
            assert not np.array_equal(first[name], second[name]), "different inputs gave identical outputs"

    def test_output_names_pick_and_order(self, entry: Path, model: ModelInfo) -> None:
        names = [t.name for t in reversed(model.outputs)]
        with self._open(entry, output_names=names) as runner:
            assert runner.output_names == names
            assert list(runner.infer(make_feeds(model))) == names
        with pytest.raises(RunnerError, match="no_such_output"):
            self._open(entry, output_names=["no_such_output"]).activate()

    def test_entry_declares_the_model_io(self, model: ModelInfo, request: pytest.FixtureRequest) -> None:
        if type(self).inspect_entry is RuntimeConformance.inspect_entry:
            pytest.skip("this runtime reads its entry only by activating it (the lifecycle tests cover that)")
        described = self.inspect_entry(request.getfixturevalue("offline_entry"))
        assert described is not None
        for side, tensors in (("inputs", model.inputs), ("outputs", model.outputs)):
            assert list(described[side]) == [t.name for t in tensors], side
            for tensor in tensors:
                assert described[side][tensor.name]["dtype"] == np.dtype(tensor.dtype).name, tensor.name

    def test_missing_entry_is_a_clear_error(self, tmp_path: Path) -> None:
        self._require_available()
        with pytest.raises(RunnerError, match="does not exist"):
            self.runtime.open(tmp_path / "missing.file", {})

    # ------------------------------------------------------------------------------------------ options

    def test_unknown_option_is_refused_before_anything_is_loaded(self, tmp_path: Path) -> None:
        # Works without the runtime library and without the file: options are checked first.
        with pytest.raises(RuntimeOptionError, match="not_an_option") as caught:
            self.runtime.open(tmp_path / "never-read", {**self.options, "not_an_option": 1})
        assert isinstance(caught.value, ValueError)
        assert caught.value.option == "not_an_option" and caught.value.expected

    def test_bad_options_name_the_option(self, entry: Path) -> None:
        assert self.bad_options, "the subclass must list options its runtime refuses"
        for options, option in self.bad_options:
            with pytest.raises(RuntimeOptionError) as caught:
                self.runtime.open(entry, options).activate()
            assert caught.value.option == option and option in str(caught.value), str(caught.value)

    # ------------------------------------------------------------------------------------------ native

    def test_native_config_round_trips_deploy(self, model: ModelInfo) -> None:
        from tritonclient.grpc import model_config_pb2 as mc

        from gpt_triton.deploy import choose_backend, config_text, model_config, parse_config

        for options in [*self.native_cases, self.options]:
            artifact = Artifact(family=self.runtime.name, runtime=self.runtime.name,  # type: ignore[arg-type]
                                route=Route(family=self.runtime.name), directory="/nowhere", files=["entry"],
                                runtime_options=options)
            native = self.runtime.native_config(options)
            if native is None:
                if self.runtime.python_backend:
                    assert choose_backend(artifact, ALL_NATIVE) == "python", options
                else:
                    with pytest.raises(GptTritonError):
                        choose_backend(artifact, ALL_NATIVE)
                continue
            assert native.backend == self.runtime.backend
            assert choose_backend(artifact, ALL_NATIVE) == native.backend, options
            if self.runtime.python_backend:  # no native backend on the server: the adapter serves it
                assert choose_backend(artifact, ALL_NATIVE - {native.backend}) == "python", options
            else:
                with pytest.raises(GptTritonError, match=native.backend):
                    choose_backend(artifact, ALL_NATIVE - {native.backend})
            shapes = resolve_shapes(model, {})
            config = parse_config(config_text(model_config("m", model, shapes, artifact, Route(family="serving"),
                                                           native.backend)))
            assert {k: v.string_value for k, v in config.parameters.items()} == native.parameters, options
            assert (config.platform, config.backend) == ((native.platform, "") if native.platform else ("", native.backend))
            assert config.default_model_filename == "entry"
            level = config.optimization.graph.level if config.HasField("optimization") else None
            assert level == native.graph_level, options
            kind = mc.ModelInstanceGroup.KIND_GPU if native.gpu else mc.ModelInstanceGroup.KIND_CPU
            assert [g.kind for g in config.instance_group] == [kind]
