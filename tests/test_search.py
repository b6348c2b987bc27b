"""CandidateSearch: counts per mode from the families' own knob lists, feedback in mixed, seeded random,
max_builds, baseline first, and spec errors; each strategy passes the shared conformance suite."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import ModelInfo, inspect_model
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact, BuildContext, Knob, Route
from gpt_triton.core.spec import TuneSpec
from gpt_triton.routes import FAMILIES, RouteFamily
from gpt_triton.search import (
    STRATEGIES,
    CandidateSearch,
    FastSearch,
    FullSearch,
    MixedSearch,
    RandomSearch,
    knob_space,
)
from gpt_triton.testing.conformance.search import SearchStrategyConformance
from gpt_triton.testing.models import build_tiny_mlp


class TestFastConformance(SearchStrategyConformance):
    strategy = FastSearch


class TestFullConformance(SearchStrategyConformance):
    strategy = FullSearch


class TestMixedConformance(SearchStrategyConformance):
    strategy = MixedSearch


class TestRandomConformance(SearchStrategyConformance):
    strategy = RandomSearch


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    return inspect_model(build_tiny_mlp(tmp_path_factory.mktemp("m") / "mlp.onnx"))


def ort_values(model: ModelInfo, knob: str) -> list[Any]:
    return next(k.values for k in FAMILIES["onnxruntime"].knobs(model) if k.name == knob)


def small_spec(mode: str, **search: Any) -> TuneSpec:
    """Only onnxruntime, with two swept knobs; every other knob fixed at its default."""
    fixed = {"allow_spinning": True, "execution_mode": "sequential", "enable_mem_arena": True, "enable_mem_pattern": True,
             "precision": "fp32", "inter_op_threads": 0}
    return TuneSpec.model_validate({
        "search": {"mode": mode, **search},
        "families": {
            "onnxruntime": {"knobs": fixed},  # graph_optimization_level and intra_op_threads sweep all values
            "openvino": {"enabled": False}, "graph": {"enabled": False}, "serving": {"enabled": False},
        },
    })


def test_baseline_first_and_is_ort_defaults(model: ModelInfo) -> None:
    for mode in ("fast", "full", "mixed", "random"):
        search = CandidateSearch(TuneSpec.model_validate({"search": {"mode": mode}}), model)
        batch = search.ask()
        assert batch[0] is search.baseline and batch[0].is_baseline
        assert sum(c.is_baseline for c in batch) == 1
        assert search.baseline.family == "onnxruntime" and search.baseline.graph is None
        defaults = FAMILIES["onnxruntime"].default_route(model).knobs
        assert search.baseline.route.knobs == defaults
        assert len({c.id for c in batch}) == len(batch)


def test_fast_is_one_knob_at_a_time(model: ModelInfo) -> None:
    search = CandidateSearch(small_spec("fast"), model)
    batch = search.ask()
    levels, threads = ort_values(model, "graph_optimization_level"), ort_values(model, "intra_op_threads")
    assert len(batch) == 1 + (len(levels) - 1) + (len(threads) - 1)
    base = search.baseline.route.knobs
    for candidate in batch[1:]:
        changed = [k for k, v in candidate.route.knobs.items() if v != base[k]]
        assert len(changed) == 1
    assert search.ask() == []


def test_fast_default_spec_covers_graph_and_serving_knobs(model: ModelInfo) -> None:
    batch = CandidateSearch(TuneSpec.model_validate({"search": {"mode": "fast", "max_builds": 1000}}), model).ask()
    assert any(c.graph is not None for c in batch)
    assert any(c.serving.knobs["dynamic_batching"] for c in batch)
    assert {c.family for c in batch} >= {"onnxruntime", "openvino"}
    # A knob that only applies under another (fp16 block list under fp16) is tried under that value,
    # and never planned where it cannot matter.
    for c in batch:
        if c.family == "onnxruntime" and c.route.knobs["fp16_op_block_list"]:
            assert c.route.knobs["precision"] == "fp16"
    assert any(c.family == "onnxruntime" and c.route.knobs["fp16_op_block_list"] for c in batch)


def test_full_is_the_cartesian_product(model: ModelInfo) -> None:
    search = CandidateSearch(small_spec("full"), model)
    batch = search.ask()
    expected = len(ort_values(model, "graph_optimization_level")) * len(ort_values(model, "intra_op_threads"))
    assert len(batch) == expected  # the baseline is one of the product's routes
    assert search.plan_counts()["families"]["onnxruntime"]["full"] == expected


def test_full_respects_max_builds_and_logs_it(model: ModelInfo) -> None:
    search = CandidateSearch(small_spec("full", max_builds=5), model)
    batch = search.ask()
    assert len(batch) == 5
    assert any("max_builds=5" in d for d in search.decisions)
    assert search.ask() == []


def test_fast_respects_max_builds(model: ModelInfo) -> None:
    search = CandidateSearch(TuneSpec.model_validate({"search": {"mode": "fast", "max_builds": 7}}), model)
    batch = search.ask()
    assert len(batch) == 7 and batch[0].is_baseline
    assert any("max_builds=7" in d for d in search.decisions)


def test_knob_space_count_matches_enumeration(model: ModelInfo) -> None:
    for name in ("onnxruntime", "openvino", "graph", "serving"):
        space = knob_space(FAMILIES[name], model, None)
        routes = list(space.enumerate())
        assert space.count() == len(routes)
        assert len({repr(sorted(r.items())) for r in routes}) == len(routes)
    plain = knob_space(FAMILIES["openvino"], model, None)
    assert plain.count() == math.prod(len(v) for v in plain.values.values())  # no conditional knobs


def test_mixed_combines_the_values_that_beat_the_start(model: ModelInfo) -> None:
    search = CandidateSearch(small_spec("mixed"), model)
    first = search.ask()

    def score(c: Candidate) -> float | None:
        k = c.route.knobs
        if k["graph_optimization_level"] == "disable":
            return None  # a crash must not count as a win
        return 10.0 - (k["graph_optimization_level"] == "extended") - (k["intra_op_threads"] == 1)

    search.tell(first, score)
    second = search.ask()
    assert [c.route.knobs["graph_optimization_level"] for c in second] == ["extended"]
    assert [c.route.knobs["intra_op_threads"] for c in second] == [1]
    assert not {c.id for c in second} & {c.id for c in first}
    assert any("beat its start" in d for d in search.decisions)
    assert search.ask() == []


def test_mixed_without_winners_plans_nothing_more(model: ModelInfo) -> None:
    search = CandidateSearch(small_spec("mixed"), model)
    first = search.ask()
    search.tell(first, lambda c: 1.0)
    assert search.ask() == []


def test_random_is_seeded_and_reproducible(model: ModelInfo) -> None:
    def ids(seed: int) -> list[str]:
        spec = TuneSpec.model_validate({"search": {"mode": "random", "random_routes": 10, "seed": seed}})
        return [c.id for c in CandidateSearch(spec, model).ask()]

    assert ids(1) == ids(1)
    assert ids(1) != ids(2)
    assert len(ids(1)) == 11 and len(set(ids(1))) == 11


def test_ids_are_stable_across_instances(model: ModelInfo) -> None:
    spec = TuneSpec.model_validate({"search": {"mode": "fast"}})
    assert [c.id for c in CandidateSearch(spec, model).ask()] == [c.id for c in CandidateSearch(spec, model).ask()]


def test_spec_fixed_and_swept_knobs(model: ModelInfo) -> None:
    spec = TuneSpec.model_validate({
        "search": {"mode": "full"},
        "families": {"onnxruntime": {"knobs": {"precision": "int8_dynamic", "graph_optimization_level": ["basic", "all"],
                                               "intra_op_threads": 0, "inter_op_threads": 0, "allow_spinning": False,
                                               "execution_mode": "sequential", "enable_mem_arena": True, "enable_mem_pattern": True}},
                     "openvino": {"enabled": False}, "graph": {"enabled": False}, "serving": {"enabled": False}},
    })
    batch = CandidateSearch(spec, model).ask()
    planned = [c for c in batch if not c.is_baseline]
    assert len(planned) == 2
    assert {c.route.knobs["graph_optimization_level"] for c in planned} == {"basic", "all"}
    assert all(c.route.knobs["precision"] == "int8_dynamic" and c.route.knobs["allow_spinning"] is False for c in planned)


@pytest.mark.parametrize("families, match", [
    ({"onnxrutime": {}}, "unknown route famil.*onnxrutime.*onnxruntime"),
    ({"onnxruntime": {"knobs": {"threads": 2}}}, "unknown knob 'threads'.*intra_op_threads"),
])
def test_spec_names_are_checked(model: ModelInfo, families: dict[str, Any], match: str) -> None:
    with pytest.raises(GptTritonError, match=match):
        CandidateSearch(TuneSpec.model_validate({"families": families}), model)


def test_plan_counts_agree_with_ask(model: ModelInfo, tmp_path: Path) -> None:
    spec = TuneSpec.model_validate({"search": {"mode": "fast", "max_builds": 1000}})
    counts = CandidateSearch(spec, model).plan_counts()
    assert counts["modes"]["fast"] == len(CandidateSearch(spec, model).ask())


def test_the_spec_mode_picks_the_strategy(model: ModelInfo) -> None:
    assert set(STRATEGIES) == {"fast", "full", "mixed", "random"}
    for mode, strategy in STRATEGIES.items():
        assert strategy.mode == mode
        search = CandidateSearch(TuneSpec.model_validate({"search": {"mode": mode}}), model)
        assert type(search.strategy) is strategy


def test_plan_counts_are_exact_per_mode(model: ModelInfo) -> None:
    """Nothing cut by max_builds and no feedback: every mode plans exactly what plan_counts says."""
    for mode in ("fast", "full", "mixed", "random"):
        spec = small_spec(mode, max_builds=1000, random_routes=5)
        counts = CandidateSearch(spec, model).plan_counts()
        search = CandidateSearch(spec, model)
        planned = search.ask()
        search.tell(planned, lambda c: None)
        planned += search.ask()
        assert counts["modes"][mode] == len(planned), mode


# --- families the server cannot serve are not planned (and the run says why) ---------------------------------

class _AvailablePlanFamily(RouteFamily):
    """A compiler available here whose artifacts (TensorRT plans) only a server's tensorrt backend runs."""

    name = "plans"
    runtime = "tensorrt"

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def knobs(self, model: ModelInfo) -> list[Knob]:
        return [Knob(name="level", values=[1, 2], default=1)]

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        raise NotImplementedError


def test_families_the_server_cannot_serve_are_not_planned(model: ModelInfo) -> None:
    families = {"onnxruntime": FAMILIES["onnxruntime"], "plans": _AvailablePlanFamily(), "serving": FAMILIES["serving"]}
    spec = TuneSpec.model_validate({"search": {"mode": "fast"}})
    assert any(c.family == "plans" for c in CandidateSearch(spec, model, families).ask())
    search = CandidateSearch(spec, model, families, unavailable={"plans": "the Triton server has no tensorrt backend"})
    assert {c.family for c in search.ask()} == {"onnxruntime"}
    assert "plans: unavailable here (the Triton server has no tensorrt backend)" in search.decisions
    # A family's own unavailability is what the run reports first.
    search = CandidateSearch(spec, model, FAMILIES, unavailable={"openvino": "the server says no"})
    assert not any(c.family == "openvino" for c in search.ask())
    assert "openvino: unavailable here (the server says no)" in search.decisions
    if not FAMILIES["tensorrt"].availability()[0]:
        search = CandidateSearch(spec, model, FAMILIES, unavailable={"tensorrt": "the server says no"})
        assert not any("the server says no" in d for d in search.decisions)


class _Server:
    def __init__(self, native_backends: frozenset[str]) -> None:
        self.native_backends = native_backends


def test_the_pipeline_plans_plans_only_for_a_server_and_image_that_run_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 7: no tensorrt backend, no plans (the run goes on with the rest). Item 4: the builder's TensorRT
    must be the one the serving image ships; an image the support table does not know is not guessed."""
    from gpt_triton import serving
    from gpt_triton.core.spec import DEFAULT_TRITON_IMAGE
    from gpt_triton.k8s.render import TRITON_IMAGE
    from gpt_triton.testing import fake_tensorrt

    assert DEFAULT_TRITON_IMAGE == TRITON_IMAGE  # the spec's serving image is the chart's sidecar
    embedded = serving.unusable_families(TuneSpec(), _Server(frozenset()))  # type: ignore[arg-type]
    assert list(embedded) == ["tensorrt"] and "has no tensorrt backend (it has only python)" in embedded["tensorrt"]

    monkeypatch.setattr(type(FAMILIES["tensorrt"]), "availability", lambda self: (True, ""))
    ngc = _Server(frozenset({"onnxruntime", "openvino", "tensorrt"}))
    with fake_tensorrt.installed("10.13"):  # builder TensorRT 10.13.3.9
        unknown = serving.unusable_families(TuneSpec(), ngc)  # type: ignore[arg-type]
        assert "the TensorRT of serving image nvcr.io/nvidia/tritonserver:24.10-py3 is unknown" in unknown["tensorrt"]
        assert "pin it with server.tensorrt_version" in unknown["tensorrt"]
        pinned = TuneSpec.model_validate({"server": {"tensorrt_version": "10.13.3.9"}})
        assert serving.unusable_families(pinned, ngc) == {}  # type: ignore[arg-type]
        listed = TuneSpec.model_validate({"server": {"image": "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"}})
        assert serving.unusable_families(listed, ngc) == {}  # type: ignore[arg-type]
        older = TuneSpec.model_validate({"server": {"image": "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3"}})
        reason = serving.unusable_families(older, ngc)["tensorrt"]  # type: ignore[arg-type]
        assert reason.startswith("builder TensorRT 10.13.3.9 cannot build plans for nvcr.io/nvidia/tritonserver:25.10")
        assert "install tensorrt==10.11.0.33" in reason and "26.02-trtllm-python-py3" in reason
