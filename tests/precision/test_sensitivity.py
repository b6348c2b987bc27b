"""The sensitivity search over a scripted probe: which groups it keeps, how many probes, when it stops."""

from __future__ import annotations

from collections.abc import Iterable

from gpt_triton.precision import ProbeBudget, ProbeResult, sensitivity_search

GROUPS = ["a", "b", "c", "d"]


def probe_needing(sensitive: Iterable[str], mild: Iterable[str] = ()) -> tuple[list[tuple[str, ...]], object]:
    """A probe that fails 10 of 20 requests per lowered sensitive group and 1 per lowered mild group."""
    sensitive, mild = set(sensitive), set(mild)
    calls: list[tuple[str, ...]] = []

    def probe(kept: tuple[str, ...]) -> ProbeResult:
        calls.append(kept)
        lowered = set(GROUPS) - set(kept)
        fails = 10 * len(lowered & sensitive) + len(lowered & mild)
        return ProbeResult(kept, min(fails, 20), 20, 1.0 - fails / 20, passed=fails == 0)

    return calls, probe


def test_keeps_the_one_sensitive_group() -> None:
    calls, probe = probe_needing({"c"})
    result = sensitivity_search(GROUPS, probe, ProbeBudget(50))  # type: ignore[arg-type]
    assert result.mix is not None and result.mix.kept == ("c",)
    assert result.whole_graph is not None and not result.whole_graph.passed
    assert calls == [(), ("b", "c", "d"), ("a", "c", "d"), ("a", "b", "d"), ("a", "b", "c"), ("c",)]
    assert result.probes == 6 and result.stopped is None


def test_adds_groups_back_by_damage_until_it_passes() -> None:
    _, probe = probe_needing({"d"}, mild={"b"})
    result = sensitivity_search(GROUPS, probe, ProbeBudget(50))  # type: ignore[arg-type]
    assert [s.kept for s in result.steps] == [("d",), ("b", "d")]  # d first (10 fails), then b (1)
    assert result.mix is not None and result.mix.kept == ("b", "d")


def test_whole_graph_passing_needs_no_mix() -> None:
    _, probe = probe_needing(set())
    result = sensitivity_search(GROUPS, probe, ProbeBudget(50))  # type: ignore[arg-type]
    assert result.mix is None and result.probes == 1 and result.whole_graph is not None and result.whole_graph.passed


def test_all_groups_sensitive_proposes_nothing_rather_than_the_fp32_route() -> None:
    _, probe = probe_needing(set(GROUPS))
    result = sensitivity_search(GROUPS, probe, ProbeBudget(50))  # type: ignore[arg-type]
    assert result.mix is None
    assert all(len(s.kept) < len(GROUPS) for s in result.steps)


def test_probe_budget_stops_the_search_and_says_why() -> None:
    calls, probe = probe_needing({"c"})
    budget = ProbeBudget(3)
    result = sensitivity_search(GROUPS, probe, budget)  # type: ignore[arg-type]
    assert len(calls) == 3 and result.mix is None
    assert result.stopped == "precision.max_probes=3 reached"


def test_deadline_stops_the_search() -> None:
    now = [0.0]
    _, probe = probe_needing({"c"})
    budget = ProbeBudget(50, deadline=10.0, clock=lambda: now[0])

    def slow(kept: tuple[str, ...]) -> ProbeResult:
        now[0] += 4.0
        return probe(kept)  # type: ignore[operator, no-any-return]

    result = sensitivity_search(GROUPS, slow, budget)
    assert result.probes == 3 and result.stopped is not None and "time budget" in result.stopped
