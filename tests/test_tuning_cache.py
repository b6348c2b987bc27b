"""Tuning cache: header, append, resume by id (last state wins), header mismatch, torn last line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, inspect_model
from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import TuneSpec
from gpt_triton.routes import Route
from gpt_triton.tuning_cache import CacheHeader, TuningCache, make_header


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    from gpt_triton.testing.models import build_tiny_mlp

    return inspect_model(build_tiny_mlp(tmp_path_factory.mktemp("m") / "mlp.onnx"))


def cand(i: int, status: str = "planned") -> Candidate:
    return Candidate(id=f"c{i}", family="onnxruntime", route=Route(family="onnxruntime", knobs={"intra_op_threads": i}),
                     serving=Route(family="serving"), status=status)  # type: ignore[arg-type]


def test_header_then_one_line_per_state(model: ModelInfo, tmp_path: Path) -> None:
    header = make_header(model, TuneSpec())
    assert header.model_sha256 == model.sha256
    assert {"onnxruntime", "openvino", "cpu", "python"} <= set(header.environment)
    path = tmp_path / "cache.jsonl"
    with TuningCache.open(path, header, resume=False) as cache:
        cache.record(cand(1))
        cache.record(cand(1, "built"))
        cache.record(cand(2, "crashed"))
    lines = path.read_text().splitlines()
    assert CacheHeader.model_validate_json(lines[0]) == header
    assert [json.loads(line)["status"] for line in lines[1:]] == ["planned", "built", "crashed"]
    with TuningCache.open(path, header, resume=True) as cache:
        assert {k: c.status for k, c in cache.previous.items()} == {"c1": "built", "c2": "crashed"}
        cache.record(cand(3, "measured"))
    with TuningCache.open(path, header, resume=True) as cache:
        assert set(cache.previous) == {"c1", "c2", "c3"}


def test_without_resume_starts_over(model: ModelInfo, tmp_path: Path) -> None:
    header = make_header(model, TuneSpec())
    path = tmp_path / "cache.jsonl"
    with TuningCache.open(path, header, resume=False) as cache:
        cache.record(cand(1, "built"))
    with TuningCache.open(path, header, resume=False) as cache:
        assert cache.previous == {}
    assert len(path.read_text().splitlines()) == 1
    with TuningCache.open(tmp_path / "new.jsonl", header, resume=True) as cache:  # nothing to resume: a new file
        assert cache.previous == {}


@pytest.mark.parametrize("change, match", [
    ({"model_sha256": "0" * 64}, "model sha256"),
    ({"environment": {"onnxruntime": "0.0.1"}}, "environment changed.*onnxruntime"),
    ({"spec_digest": "other"}, "spec"),
])
def test_header_mismatch_says_why(model: ModelInfo, tmp_path: Path, change: dict[str, object], match: str) -> None:
    header = make_header(model, TuneSpec())
    path = tmp_path / "cache.jsonl"
    TuningCache.open(path, header, resume=False).close()
    other = header.model_copy(update=change)
    if "environment" in change:
        other.environment = {**header.environment, **change["environment"]}  # type: ignore[dict-item]
    with pytest.raises(GptTritonError, match=match) as info:
        TuningCache.open(path, other, resume=True)
    assert "new cache file" in str(info.value)


def test_search_settings_do_not_block_resume(model: ModelInfo) -> None:
    a = make_header(model, TuneSpec())
    b = make_header(model, TuneSpec.model_validate({"search": {"max_builds": 500, "mode": "full"}}))
    c = make_header(model, TuneSpec.model_validate({"families": {"openvino": {"enabled": False}}}))
    assert a.spec_digest == b.spec_digest != c.spec_digest
    # The re-measure's servers and the burn-in come after the search and always run again: a resume may change them.
    servers = make_header(model, TuneSpec.model_validate({"measure": {"remeasure_servers": 3}}))
    burn_in = make_header(model, TuneSpec.model_validate({"measure": {"burn_in_s": 5}}))
    windows = make_header(model, TuneSpec.model_validate({"measure": {"remeasure_windows": 9}}))
    assert servers.spec_digest == burn_in.spec_digest == a.spec_digest != windows.spec_digest
    # Measuring a crowded window again keeps another tenant out of a score; a cache from before it stays usable.
    crowded = make_header(model, TuneSpec.model_validate({"measure": {"repeat_crowded": 0}}))
    assert crowded.spec_digest == a.spec_digest
    # How the pair's gain is formed (paired by round or pooled) concerns only the stages after the search.
    pooled = make_header(model, TuneSpec.model_validate({"measure": {"gain_statistic": "pooled"}}))
    assert pooled.spec_digest == a.spec_digest


def test_torn_last_line_is_dropped_and_appends_stay_valid(model: ModelInfo, tmp_path: Path) -> None:
    header = make_header(model, TuneSpec())
    path = tmp_path / "cache.jsonl"
    with TuningCache.open(path, header, resume=False) as cache:
        cache.record(cand(1, "built"))
        cache.record(cand(2, "built"))
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # killed mid-write of the last record
    with TuningCache.open(path, header, resume=True) as cache:
        assert set(cache.previous) == {"c1"}
        cache.record(cand(3, "built"))
    with TuningCache.open(path, header, resume=True) as cache:
        assert set(cache.previous) == {"c1", "c3"}
    for line in path.read_text().splitlines():
        json.loads(line)


def test_corruption_before_the_end_is_an_error(model: ModelInfo, tmp_path: Path) -> None:
    header = make_header(model, TuneSpec())
    path = tmp_path / "cache.jsonl"
    with TuningCache.open(path, header, resume=False) as cache:
        cache.record(cand(1, "built"))
        cache.record(cand(2, "built"))
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:20]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(GptTritonError, match="corrupt at line 2"):
        TuningCache.open(path, header, resume=True)


def test_open_builds_the_header_from_model_and_spec(model: ModelInfo, tmp_path: Path) -> None:
    spec = TuneSpec()
    path = tmp_path / "cache.jsonl"
    with TuningCache.open(path, model, spec, resume=False) as cache:
        assert cache.header == make_header(model, spec)
        cache.record(cand(1, "built"))
    with TuningCache.open(path, make_header(model, spec), True) as cache:
        assert set(cache.previous) == {"c1"}
