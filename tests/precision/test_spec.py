"""The spec's precision section: defaults, the lowerings it accepts, one-line errors for bad input."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.spec import PrecisionLowering, TuneSpec, load_spec
from gpt_triton.precision import LOWERINGS, tightened

ROOT = Path(__file__).resolve().parents[2]


def test_off_by_default_and_every_lowering_is_buildable() -> None:
    assert TuneSpec().precision.enabled is False
    assert set(typing.get_args(PrecisionLowering)) == set(LOWERINGS)


def test_the_example_spec_validates() -> None:
    spec = load_spec(ROOT / "examples" / "precision_search.yaml")
    assert spec.precision.enabled and spec.precision.lowerings == ["onnxruntime:int8_static", "openvino:int8"]


def test_an_unknown_lowering_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("precision: {enabled: true, lowerings: [openvino:bf16]}\n")
    with pytest.raises(GptTritonError, match=r"precision\.lowerings\.0"):
        load_spec(path)


def test_safety_tightens_the_allowed_exceedance_rate() -> None:
    spec = TuneSpec.model_validate({"accuracy": {"max_exceedance_rate": 0.1}})
    assert tightened(spec.accuracy, 0.5).max_exceedance_rate == pytest.approx(0.05)
    assert spec.accuracy.max_exceedance_rate == 0.1  # the run's own spec is untouched
