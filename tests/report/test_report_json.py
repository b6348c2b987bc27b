"""report.json: ``RunReport.spec`` is a TuneSpec, saved as the same JSON object the untyped dict was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.records import RunReport
from gpt_triton.core.spec import TuneSpec
from gpt_triton.report import load_report

from .conftest import make_report

# Written by a real `gpt-triton tune` while RunReport.spec was still a dict[str, Any].
REAL_RUN = Path(__file__).parent / "data" / "real_run_report.json"


def _compare(old: Any, new: Any, path: str = "") -> set[str]:
    """Key paths ``new`` adds to ``old``; fails on any value the two hold differently."""
    if not isinstance(old, dict):
        assert new == old, f"{path}: {old!r} became {new!r}"
        return set()
    assert isinstance(new, dict), f"{path}: {old!r} became {new!r}"
    added = {f"{path}{key}" for key in new.keys() - old.keys()}
    for key in old:
        assert key in new, f"{path}{key} was dropped"
        added |= _compare(old[key], new[key], f"{path}{key}.")
    return added


def test_a_report_written_before_the_spec_was_typed_still_loads() -> None:
    old = json.loads(REAL_RUN.read_text())
    report = RunReport.model_validate_json(REAL_RUN.read_bytes())
    assert isinstance(report.spec, TuneSpec)
    # The saved values, not the defaults: fast search, two load levels, a loosened tolerance, a budget.
    assert report.spec.search.mode == "fast" and report.spec.search.max_builds == 8
    assert [load.concurrency for load in report.spec.measure.loads] == [1, 3]
    assert report.spec.accuracy.default.max_abs == 0.05 and report.spec.time_budget_s == 300.0
    # Saved again, every field the old file had is written back unchanged; only fields added to the spec
    # since then appear, with their defaults.
    saved = json.loads(report.model_dump_json())["spec"]
    added = _compare(old["spec"], saved)
    assert {"measure.client_processes", "server.image", "server.tensorrt_version"} <= added
    defaults = json.loads(TuneSpec().model_dump_json())
    for path in added:  # each with its default (the spec grows: the exact set is not this test's business)
        mine, default = saved, defaults
        for key in path.split("."):
            mine, default = mine[key], default[key]
        assert mine == default, path
    assert saved["measure"]["client_processes"] == 1
    assert saved["server"]["image"] == TuneSpec().server.image and saved["server"]["tensorrt_version"] is None


def test_the_pipelines_spec_dict_round_trips_unchanged() -> None:
    # The pipeline builds the report from spec.model_dump(mode="json"); pydantic validates it to a TuneSpec.
    spec = TuneSpec.model_validate({
        "objective": {"metric": "throughput", "load_index": 1, "slo_p99_ms": 20.0},
        "measure": {"loads": [{"kind": "concurrency", "concurrency": 1}, {"kind": "rate", "rate": 50}]},
        "families": {"openvino": {"knobs": {"streams": [1, 2]}}},
        "time_budget_s": "10m",
    })
    dumped = spec.model_dump(mode="json")
    report = RunReport.model_validate({**make_report().model_dump(mode="json"), "spec": dumped})
    assert report.spec == spec and report.spec.objective.metric == "throughput"
    assert json.loads(report.model_dump_json())["spec"] == dumped
    assert RunReport.model_validate_json(report.model_dump_json()) == report


def test_a_report_with_an_invalid_spec_is_a_one_line_error(tmp_path: Path) -> None:
    data = json.loads(REAL_RUN.read_text())
    data["spec"]["objective"]["metric"] = "p95"
    (tmp_path / "report.json").write_text(json.dumps(data))
    with pytest.raises(GptTritonError, match=r"not a valid run report \(spec\.objective\.metric: ") as info:
        load_report(tmp_path)
    assert "\n" not in str(info.value)
