"""``gpt-triton tune --model-repository REPO --model NAME``: what a tuning run of a served model starts from.

Reading the repository is :mod:`gpt_triton.deploy.existing`'s; mapping its production config onto route
knobs is :mod:`gpt_triton.routes.baseline`'s. This module joins them for the tune command: the ONNX file
to tune, request shapes from the config's dims (``--shape`` still wins, and still must give dynamic dims
the config leaves open), and the baseline route, after checking that the config and the model file agree
on their inputs, so a mismatch is one line before anything is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, inspect_model
from gpt_triton.deploy.existing import ExistingModel, read_existing
from gpt_triton.promote.signing import (
    KEY_ENV,
    KEY_ID_PARAMETER,
    SIGNATURES_FILE,
    load_signing_key,
    verify_model_config,
    verify_version_dir,
)
from gpt_triton.routes.baseline import BaselineRoute, production_baseline


@dataclass(frozen=True)
class ExistingTune:
    model: Path  # the ONNX file the families build from
    shapes: dict[str, list[int]]  # --shape hints with the config's concrete dims filled in
    baseline: BaselineRoute
    existing: ExistingModel


def config_shapes(existing: ExistingModel, info: ModelInfo) -> dict[str, list[int]]:
    """Per-request shapes the config fixes: its dims (with a batch of 1 when it batches) wherever every dim is
    concrete; inputs whose config dims are open (-1) are left to the model's own dims and ``--shape``."""
    config = existing.config
    batched = config.max_batch_size > 0
    by_name = {t.name: t for t in info.inputs}
    shapes: dict[str, list[int]] = {}
    for tensor in config.input:
        dims = list(tensor.dims)
        if tensor.name not in by_name or any(d < 0 for d in dims):
            continue
        shape = [1, *dims] if batched else dims
        if len(shape) == len(by_name[tensor.name].dims):
            shapes[tensor.name] = shape
    return shapes


def _check_io(existing: ExistingModel, info: ModelInfo) -> None:
    config_inputs = {t.name for t in existing.config.input}
    model_inputs = {t.name for t in info.inputs}
    if config_inputs and config_inputs != model_inputs:
        raise GptTritonError(
            f"{existing.repository / existing.name}/config.pbtxt declares inputs {sorted(config_inputs)} but "
            f"{existing.model_path} has {sorted(model_inputs)}; fix the config or the model file")


def verify_signed(existing: ExistingModel, key_file: str | None = None) -> None:
    """A signed gpt-triton version is verified (files, model and version, model config) before it is tuned:
    re-tuning a tampered file would promote it again, signed anew. Unsigned versions pass unchecked."""
    if existing.layout != "gpt-triton":
        return
    version_dir = existing.repository / existing.name / str(existing.version)
    if not ((version_dir / SIGNATURES_FILE).exists() or KEY_ID_PARAMETER in existing.config.parameters):
        return
    key = load_signing_key(key_file)
    if not key:
        raise GptTritonError(
            f"version {existing.version} of {existing.name} is signed: set {KEY_ENV} or --signing-key-file so it is "
            "verified before it is re-tuned (a tampered file would otherwise be promoted and signed again)")
    verify_version_dir(version_dir, key)
    verify_model_config(version_dir.parent, key)


def prepare_existing(repository: Path, name: str, hints: dict[str, list[int]],
                     version: int | None = None, key_file: str | None = None) -> ExistingTune:
    """Read ``repository/name`` (verifying a signed version) and return the model, shapes and production
    baseline to tune with."""
    existing = read_existing(repository, name, version)
    verify_signed(existing, key_file)
    info = inspect_model(existing.model_path)
    _check_io(existing, info)
    shapes = {**config_shapes(existing, info), **hints}
    baseline = production_baseline(existing.config, info, existing.source, runtime=existing.runtime,
                                   runtime_options=existing.runtime_options, file_knobs=existing.file_knobs)
    if existing.notes:
        baseline = dataclasses.replace(baseline, notes=existing.notes + baseline.notes)
    return ExistingTune(model=existing.model_path, shapes=shapes, baseline=baseline, existing=existing)


def served_model_options(model: Path | None, model_repository: Path | None, served_name: str | None,
                         repository: Path | None, model_name: str | None, hints: dict[str, list[int]],
                         key_file: str | None = None) -> tuple[Path, dict[str, list[int]], Path | None, BaselineRoute | None]:
    """The tune command's (model, shapes, promotion repository, baseline) from its arguments: ``MODEL.onnx``
    as before, or ``--model-repository REPO --model NAME`` (promoted into REPO/NAME). Conflicting or missing
    arguments are one line."""
    if model_repository is None and served_name is None:
        if model is None:
            raise GptTritonError("give the ONNX model to tune (gpt-triton tune MODEL.onnx) or a served one "
                                 "(--model-repository REPO --model NAME)")
        return model, hints, repository, None
    if model_repository is None or served_name is None:
        raise GptTritonError("--model-repository REPO and --model NAME go together: the served model to tune")
    if model is not None:
        raise GptTritonError(f"give either {model} or --model-repository/--model, not both: the served model's file "
                             "is read from its repository")
    if repository is not None and Path(repository).resolve() != Path(model_repository).resolve():
        raise GptTritonError(f"--repository {repository} differs from --model-repository {model_repository}: the next "
                             "version is promoted beside the served ones")
    if model_name is not None and model_name != served_name:
        raise GptTritonError(f"--model-name {model_name} differs from --model {served_name}: the next version is "
                             "promoted under the served model's name")
    prepared = prepare_existing(model_repository, served_name, hints, key_file=key_file)
    return prepared.model, prepared.shapes, Path(model_repository), prepared.baseline
