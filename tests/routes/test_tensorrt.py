"""TensorRT family: availability explains itself here; builds only run on a GPU (marked gpu)."""

from __future__ import annotations

import json

import pytest

from gpt_triton.routes import TensorRtFamily
from gpt_triton.routes._tensorrt import route_string, tuner_knobs
from gpt_triton.testing.conformance.families import FamilyConformance
from gpt_triton.testing.models import build_tiny_mlp

_AVAILABLE, _WHY = TensorRtFamily().availability()


@pytest.mark.gpu
@pytest.mark.skipif(not _AVAILABLE, reason=_WHY or "TensorRT unavailable")
class TestTensorRtConformance(FamilyConformance):
    family = TensorRtFamily()
    model_builder = staticmethod(build_tiny_mlp)
    non_default = {"precision": "fp16", "builder_optimization_level": 2}


def test_unavailable_without_gpu_says_why() -> None:
    available, why = TensorRtFamily().availability()
    if available:
        pytest.skip("TensorRT and a GPU are present")
    assert "tensorrt" in why.lower() or "gpu" in why.lower()


def test_tuner_json_becomes_knobs_and_route_strings() -> None:
    """The shape of IBuilderConfig.all_build_routes (TensorRT 11.1+) maps onto knobs and back."""
    text = json.dumps({"tuner_version": "1", "tuner_options": [
        {"option": "knob_a", "allowed_values": ["on", "off"], "default_value": "on", "help": "a"},
        {"option": "knob_b", "allowed_values": [0, 1, 2], "default_value": 0, "help": "b"},
    ]})
    knobs = tuner_knobs(text)
    assert [k.name for k in knobs] == ["knob_a", "knob_b"]
    assert all(k.default in k.values for k in knobs)
    assert route_string({"knob_a": "off", "knob_b": 0, "precision": "fp16"}, knobs) == "-knob_a=off"
    assert tuner_knobs("") == []
