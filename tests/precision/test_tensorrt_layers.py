"""TensorRT per-layer precision of a mixed route, against FakeTensorRT: 10.13 sets ``layer.precision`` and the
float output types of the kept groups' layers plus OBEY_PRECISION_CONSTRAINTS; 11.1 (strongly typed) keeps the
groups' ONNX types float32 and takes no precision flag."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.core.model_info import inspect_model
from gpt_triton.core.routes import BuildContext, Route
from gpt_triton.routes import TensorRtFamily
from gpt_triton.routes._tensorrt import Gpu
from gpt_triton.testing import fake_tensorrt

FAKE_GPU = Gpu("Fake GPU (gpt_triton.testing.fake_tensorrt)", "8.9")


def _build(version: str, precision_mlp: Path, out: Path, **knobs: Any) -> dict[str, Any]:
    trt = fake_tensorrt.module(version)
    family = TensorRtFamily(tensorrt=lambda: trt, gpu=lambda: FAKE_GPU)
    context = BuildContext(model=inspect_model(precision_mlp), shapes={"x": [16, 256]}, max_batch_size=16)
    route = Route(family="tensorrt", knobs={**family.default_route(context.model).knobs, **knobs})
    # The per-layer setters are deprecated from 10.12 on (as in TensorRT's binding); 11.x never calls them.
    deprecated = version == "10.13" and knobs.get("fp32_groups")
    with pytest.warns(DeprecationWarning) if deprecated else contextlib.nullcontext():
        artifact = family.build(route, context, out)
    header = fake_tensorrt.describe_engine((out / "model.plan").read_bytes())
    header["notes"] = artifact.notes
    return header


def test_tensorrt10_keeps_the_groups_layers_in_fp32(precision_mlp: Path, tmp_path: Path) -> None:
    header = _build("10.13", precision_mlp, tmp_path, precision="fp16", fp32_groups=["stage2"])
    layers = {layer["name"]: layer for layer in header["network"]["layers"]}
    stage2 = [layer for name, layer in layers.items() if name.startswith("/stage2/")]
    others = [layer for name, layer in layers.items() if not name.startswith("/stage2/")]
    assert len(stage2) == 6
    assert all(layer["precision"] == "FLOAT" and set(layer["output_types"].values()) == {"FLOAT"} for layer in stage2)
    assert all(layer["precision"] is None for layer in others)  # lowered by the FP16 flag
    flags = header["config"]["flags"]
    assert "FP16" in flags and "OBEY_PRECISION_CONSTRAINTS" in flags
    assert any("6 layer(s) kept in fp32" in note for note in header["notes"])


def test_tensorrt10_without_groups_sets_no_constraint(precision_mlp: Path, tmp_path: Path) -> None:
    header = _build("10.13", precision_mlp, tmp_path, precision="fp16")
    assert "OBEY_PRECISION_CONSTRAINTS" not in header["config"]["flags"]
    assert all(layer["precision"] is None for layer in header["network"]["layers"])


def test_tensorrt11_keeps_the_groups_types_float32(precision_mlp: Path, tmp_path: Path) -> None:
    header = _build("11.1", precision_mlp, tmp_path, precision="fp16", fp32_groups=["stage2"])
    layers = header["network"]["layers"]
    assert all(layer["precision"] is None for layer in layers)  # strongly typed: no per-layer setters used
    assert "OBEY_PRECISION_CONSTRAINTS" not in str(header["config"])
    assert any("stage2 keep float32 types" in note for note in header["notes"])
