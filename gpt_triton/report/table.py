"""Terminal summary of a run: one row per candidate, a verdict panel, and the per-family view.

The helpers here (objective lookup, eligibility, verdict lines) are shared by the Markdown and plot
renderers so all three views of a run agree on which number is "the" latency of a candidate.
"""

from __future__ import annotations

import math
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpt_triton.core.accuracy import AccuracyResult
from gpt_triton.core.measurements import Interval, LatencyStats
from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.core.routes import Route

# Statuses that never produced a measurement: their row carries the reason instead of numbers.
FAILED_STATUSES = ("crashed", "infeasible", "failed")
ROUTE_WIDTH = 48


# --------------------------------------------------------------------------------------------- helpers
def objective(report: RunReport) -> tuple[str, int]:
    """(metric, load index) the run optimised, read from the saved spec; defaults match ObjectiveSpec."""
    section = report.spec.get("objective") or {}
    metric = str(section.get("metric") or "p99")
    load_index = int(section.get("load_index") or 0)
    return metric, load_index


def lower_is_better(metric: str) -> bool:
    return metric != "throughput"


def load_stats(candidate: Candidate, load_index: int) -> LatencyStats | None:
    """The candidate's stats at one load level; a single level serves every index (older runs)."""
    if not candidate.latency:
        return None
    if load_index < len(candidate.latency):
        return candidate.latency[load_index]
    return candidate.latency[0] if len(candidate.latency) == 1 else None


def metric_interval(stats: LatencyStats | None, metric: str) -> Interval | None:
    if stats is None:
        return None
    field = {"p50": "p50_ms", "p90": "p90_ms", "p99": "p99_ms", "mean": "mean_ms", "throughput": "throughput"}
    value = getattr(stats, field.get(metric, "p99_ms"))
    return value if isinstance(value, Interval) else None


def objective_value(report: RunReport, candidate: Candidate) -> float | None:
    metric, load_index = objective(report)
    interval = metric_interval(load_stats(candidate, load_index), metric)
    return None if interval is None else interval.value


def eligible(report: RunReport, candidate: Candidate) -> bool:
    """Measured and eligible under the run's own accuracy policy (no accuracy recorded counts as eligible,
    so a run saved before validation still gets a per-family view)."""
    if candidate.status != "measured" or not candidate.latency:
        return False
    metric, load_index = objective(report)
    slo = (report.spec.get("objective") or {}).get("slo_p99_ms")
    if metric == "throughput" and slo is not None:  # throughput counts only under the latency SLO
        p99 = metric_interval(load_stats(candidate, load_index), "p99")
        if p99 is None or p99.value > float(slo):
            return False
    return candidate.accuracy is None or accuracy_eligibility(report, candidate.accuracy)[0]


def accuracy_eligibility(report: RunReport, result: AccuracyResult) -> tuple[bool, str]:
    """The selection's own rule (accuracy.compare.eligible) with the run's saved accuracy spec, so the
    report never disagrees with what selection did; falls back to ``passed`` if that is unavailable."""
    try:
        from gpt_triton.accuracy.compare import eligible as policy
        from gpt_triton.core.spec import AccuracySpec

        return policy(result, AccuracySpec.model_validate(report.spec.get("accuracy") or {}))
    except (ImportError, ValueError):  # an older report's spec, or the accuracy module missing
        return result.passed, result.reason or ("passed" if result.passed else "failed")


def _knob_text(knobs: dict[str, Any]) -> str:
    return Route(family="_", knobs=knobs).key().split(":", 1)[1].strip()


def common_knobs(report: RunReport) -> dict[str, dict[str, Any]]:
    """Per route family (compiler, graph, serving), the knob values every candidate of it shares.

    Routes spell out every knob, defaults included, so the full key of a real run runs to hundreds of
    characters; a table only needs the knobs that vary. report.md lists the shared ones once.
    """
    routes: dict[str, list[Route]] = {}
    for c in report.candidates:
        for route in (c.route, c.graph, c.serving):
            if route is not None:
                routes.setdefault(route.family, []).append(route)
    common: dict[str, dict[str, Any]] = {}
    for family, members in routes.items():
        if len(members) < 2:
            continue  # a lone route has nothing to be compared with: show it whole
        first = members[0].knobs
        common[family] = {k: v for k, v in first.items() if all(k in r.knobs and r.knobs[k] == v for r in members[1:])}
    return common


def short_route(candidate: Candidate, width: int = ROUTE_WIDTH, common: dict[str, dict[str, Any]] | None = None) -> str:
    """The knobs that set this candidate apart (the family has its own column): ``compiler | graph | serve``."""
    common = common or {}

    def varying(route: Route) -> str:
        shared = common.get(route.family, {})
        return _knob_text({k: v for k, v in route.knobs.items() if k not in shared})

    parts = [varying(candidate.route) or "shared knobs"]
    if candidate.graph and candidate.graph.knobs and (graph := varying(candidate.graph)):
        parts.append(f"{candidate.graph.family}: {graph}")
    if candidate.serving.knobs and (serving := varying(candidate.serving)):
        parts.append("serve " + serving)
    text = " | ".join(parts)
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    # Fixed decimals per magnitude (not %g): an interval's ends then line up with its value.
    decimals = 3 if abs(value) < 1 else 2 if abs(value) < 10 else 1 if abs(value) < 1000 else 0
    return f"{value:.{decimals}f}"


def fmt_interval(interval: Interval | None) -> str:
    if interval is None:
        return "-"
    # No space inside the brackets: a narrow terminal then wraps the whole interval under its value.
    return f"{fmt_ms(interval.value)} [{fmt_ms(interval.low)}–{fmt_ms(interval.high)}]"


def fmt_count(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def accuracy_text(report: RunReport, candidate: Candidate) -> str:
    acc = candidate.accuracy
    if acc is None:
        return "-"
    if not acc.passed:
        return f"FAIL {acc.exceedances}/{acc.requests}" + (f" ({acc.reason})" if acc.reason else "")
    text = f"m={acc.min_margin:.2g} ub={acc.exceedance_upper_bound:.2g}"
    ok, why = accuracy_eligibility(report, acc)
    return text if ok else f"{text} ineligible: {why}"


def marks(report: RunReport, candidate: Candidate) -> str:
    out = ""
    if candidate.id == report.winner_id:
        out += "★"
    if candidate.id == report.baseline_id or candidate.is_baseline:
        out += "B"
    if candidate.id == report.selected_id and candidate.id != report.winner_id:
        out += "s"  # selection's pick that the gain check did not confirm
    return out


# --------------------------------------------------------------------------------------------- table
# Real routes spell out every knob and real ids are 12-character digests, so below FULL_FROM columns the
# family and route move to a legend under the numbers; below NARROW_BELOW the lesser columns go too.
FULL_FROM = 170
NARROW_BELOW = 110
MEDIUM_DROPS = ("backend", "family", "route")
NARROW_DROPS = MEDIUM_DROPS + ("build s", "iso ms")
COLUMNS = (  # header, justify, no_wrap
    ("", "left", True), ("id", "left", True), ("family", "left", False), ("route", "left", False),
    ("status", "left", True), ("backend", "left", False), ("build s", "right", False), ("p50 ms", "right", False),
    ("p99 ms", "right", False), ("thr/s", "right", False), ("accuracy", "left", False), ("iso ms", "right", False),
)


def _load_label(report: RunReport, load_index: int) -> str:
    for candidate in report.candidates:
        stats = load_stats(candidate, load_index)
        if stats is not None:
            return stats.load.label()
    return "-"


def summary_table(report: RunReport, width: int | None = None) -> Table:
    """One row per candidate at the objective's load level; winner ★, baseline B, unconfirmed pick s.

    ``width``: the console's columns (None: every column). Narrower consoles lose the backend (report.md
    has it), family and route (:func:`route_legend` prints those), then the build and isolated times.
    """
    metric, load_index = objective(report)
    drops: tuple[str, ...] = ()
    if width is not None and width < FULL_FROM:
        drops = NARROW_DROPS if width < NARROW_BELOW else MEDIUM_DROPS
    common = common_knobs(report)
    table = Table(
        title=f"{report.model.name}: {len(report.candidates)} candidates (objective {metric} at {_load_label(report, load_index)})",
        caption="★ winner  B baseline  s selected, not confirmed by re-measurement; ms [95% bootstrap CI]; "
        "accuracy m=min margin ub=exceedance upper bound; iso = isolated in-process single request",
        box=box.SIMPLE_HEAD if drops else box.HEAVY_HEAD,
    )
    # Short columns never wrap; on a narrow terminal the route and the intervals wrap instead (an
    # interval drops to a second line under its value, which still reads naturally).
    for header, justify, no_wrap in COLUMNS:
        if header in drops:
            continue
        table.add_column(header, justify=justify, no_wrap=no_wrap,  # type: ignore[arg-type]
                         max_width=ROUTE_WIDTH if header == "route" else None,
                         min_width=12 if header in ("p50 ms", "p99 ms") else None, overflow="fold")
    for candidate in report.candidates:
        stats = load_stats(candidate, load_index)
        route = Text(short_route(candidate, common=common))
        if candidate.status in FAILED_STATUSES and candidate.reason:
            route.append("\n" + candidate.reason, style="red")
        build = "-" if candidate.status == "planned" else f"{candidate.build.seconds:.1f}"
        if candidate.build.cached:
            build += " (c)"
        isolated = candidate.isolated.single_request_ms if candidate.isolated else None
        style = "bold green" if candidate.id == report.winner_id else ("red" if candidate.status in FAILED_STATUSES else "")
        cells: dict[str, Text | str] = {
            "": marks(report, candidate),
            "id": candidate.id,
            "family": candidate.family,
            "route": route,
            "status": candidate.status,
            "backend": candidate.deploy.backend if candidate.deploy else "-",
            "build s": build,
            "p50 ms": fmt_interval(stats.p50_ms if stats else None),
            "p99 ms": fmt_interval(stats.p99_ms if stats else None),
            "thr/s": fmt_ms(stats.throughput.value) if stats and stats.throughput else "-",
            "accuracy": accuracy_text(report, candidate),
            "iso ms": fmt_ms(isolated),
        }
        table.add_row(*(cells[str(column.header)] for column in table.columns), style=style or None)
    return table


def route_legend(report: RunReport) -> Table:
    """id -> family and distinguishing knobs (and the reason of a failed candidate), for narrow consoles."""
    common = common_knobs(report)
    table = Table(box=box.SIMPLE_HEAD, title="routes (knobs shared by every candidate left out)")
    table.add_column("id", no_wrap=True)
    table.add_column("family")
    table.add_column("route", overflow="fold")
    for candidate in report.candidates:
        route = Text(short_route(candidate, width=10_000, common=common))
        if candidate.status in FAILED_STATUSES and candidate.reason:
            route.append("\n" + candidate.reason, style="red")
        table.add_row(candidate.id, candidate.family, route)
    return table


# --------------------------------------------------------------------------------------------- verdict
def break_even_inferences(report: RunReport) -> float | None:
    """Inferences needed to pay back the tuning time: tuning_s / (baseline_s - winner_s). None: never."""
    gain = report.gain
    if gain is None or report.tuning_seconds <= 0 or report.winner_id in (None, report.baseline_id):
        return None  # the baseline was kept: tuning bought nothing to pay back
    if gain.metric == "throughput":
        # Gain's *_ms are p99 latencies here; the time an inference costs at capacity is 1/throughput.
        base = metric_interval(gain.remeasured_baseline, "throughput")
        win = metric_interval(gain.remeasured_winner, "throughput")
        if base is None or win is None or base.value <= 0 or win.value <= 0:
            return None
        saved_s = 1.0 / base.value - 1.0 / win.value
    else:
        saved_s = (gain.baseline_ms - gain.winner_ms) / 1000.0
    if saved_s <= 0:
        return None
    return report.tuning_seconds / saved_s


def verdict_lines(report: RunReport) -> list[tuple[str, str]]:
    """(label, text) pairs; the terminal panel and report.md both print these."""
    lines: list[tuple[str, str]] = []
    if report.status == "failed":
        lines.append(("run", f"FAILED: {report.error or 'no error recorded'}"))
    elif report.status == "running":
        lines.append(("run", "still running (or interrupted): figures are partial"))
    winner, baseline = report.winner_id, report.baseline_id
    if winner is not None and winner == baseline:
        lines.append(("winner", f"the baseline {baseline}"))
    else:
        lines.append(("winner", f"{winner or 'none'} vs baseline {baseline or 'none'}"))
    gain = report.gain
    if gain is not None:
        r = gain.ratio
        # The gain is of the selected candidate; when the baseline was kept, the winner is not it.
        contender = report.selected_id or winner
        latency = "p99 " if gain.metric == "throughput" else ""  # Gain's *_ms are p99s for a throughput objective
        text = (
            f"{gain.metric} ratio {r.value:.3f} [{r.low:.3f}, {r.high:.3f}] ({r.level:.0%} CI); "
            f"{latency}baseline {fmt_ms(gain.baseline_ms)} ms -> {contender} {fmt_ms(gain.winner_ms)} ms"
        )
        if gain.selection_estimate_ratio is not None:
            text += f"; selection estimated {gain.selection_estimate_ratio:.3f} (winner's curse {gain.selection_estimate_ratio - r.value:+.3f})"
        lines.append(("re-measured gain", text))
    else:
        lines.append(("re-measured gain", "not measured"))
    if winner is not None and winner == baseline:
        if report.selected_id and report.selected_id != baseline:
            lines.append(("decision", f"promoted the baseline: {report.selected_id}'s gain was not significant"))
        else:
            lines.append(("decision", "promoted the baseline: no candidate beat it"))
    elif gain is not None and gain.significant:
        lines.append(("decision", "significant: the interval excludes 1.0"))
    elif gain is not None:
        lines.append(("decision", "not significant: the interval includes 1.0"))
    repeat = report.repeat_check
    if repeat:
        lines.append(("repeat check", f"{repeat.get('verdict', '?')}: first selection {repeat.get('first')}, "
                      f"second (fresh server) {repeat.get('second')}"))
    heldout = report.heldout
    if heldout is None:
        lines.append(("held-out", "not checked"))
    else:
        verdict = "PASS" if heldout.passed else "FAIL"
        text = (
            f"{verdict}: {heldout.exceedances}/{heldout.requests} exceedances, upper bound "
            f"{heldout.exceedance_upper_bound:.3g} ({heldout.confidence:.0%}), min margin {heldout.min_margin:.3g}"
        )
        if heldout.reason:
            text += f" ({heldout.reason})"
        lines.append(("held-out", text))
    if report.promoted_version is not None:
        lines.append(("promoted", f"version {report.promoted_version} at {report.promoted_path or '?'}"))
    else:
        lines.append(("promoted", "nothing promoted"))
    need = break_even_inferences(report)
    if need is not None:
        lines.append(("break-even", f"{fmt_count(need)} inferences repay {report.tuning_seconds:.0f} s of tuning"))
    elif winner is not None and winner == baseline:
        lines.append(("break-even", f"none: the baseline was kept; {report.tuning_seconds:.0f} s of tuning bought no speed-up"))
    elif gain is not None:
        lines.append(("break-even", "never: the winner saves no time per inference"))
    return lines


def verdict_panel(report: RunReport) -> Panel:
    body = Table.grid(padding=(0, 2))
    body.add_column(style="bold")
    body.add_column()
    for label, text in verdict_lines(report):
        style = "red" if ("FAIL" in text or label == "run") else ""
        body.add_row(label, Text(text, style=style))
    good = report.status == "done" and (report.heldout is None or report.heldout.passed)
    return Panel(body, title="verdict", border_style="green" if good else "red")


def print_summary(report: RunReport, console: Console | None = None) -> None:
    console = console or Console()
    families = per_family_summary(report)
    renderables: list[Any] = []
    if report.candidates:
        renderables.append(summary_table(report, width=console.width))
        if console.width < FULL_FROM:
            renderables.append(route_legend(report))
    else:
        renderables.append(Text(f"{report.model.name}: no candidates were planned", style="bold red"))
    if families:
        renderables.append(family_table(families))
    renderables.append(verdict_panel(report))
    console.print(Group(*renderables))


# --------------------------------------------------------------------------------------------- families
def per_family_summary(report: RunReport) -> list[dict[str, Any]]:
    """One dict per compiler family (its best eligible candidate), then one ``kind="union"`` dict.

    The union row compares the run's winner with the best single-family winner and with the runner-up
    family (the best family other than the winner's): that ratio is what searching across families bought.
    """
    metric, _ = objective(report)
    better = min if lower_is_better(metric) else max
    baseline = report.candidate(report.baseline_id) if report.baseline_id in {c.id for c in report.candidates} else None
    baseline_value = objective_value(report, baseline) if baseline else None
    rows: list[dict[str, Any]] = []
    for family in dict.fromkeys(c.family for c in report.candidates):
        members = [c for c in report.candidates if c.family == family]
        scored = [(v, c) for c in members if eligible(report, c) and (v := objective_value(report, c)) is not None]
        row: dict[str, Any] = {
            "kind": "family", "family": family, "candidates": len(members),
            "measured": sum(c.status == "measured" for c in members),
            "failed": sum(c.status in FAILED_STATUSES for c in members),
            "eligible": len(scored), "best_id": None, "best_value": None, "vs_baseline": None,
        }
        if scored:
            value, best = better(scored, key=lambda item: item[0])
            row.update(best_id=best.id, best_value=value)
            if baseline_value:
                row["vs_baseline"] = _speedup(metric, baseline_value, value)
        rows.append(row)
    if not rows:
        return rows
    bests = [r for r in rows if r["best_value"] is not None]
    union: dict[str, Any] = {
        "kind": "union", "metric": metric, "winner_id": report.winner_id, "winner_family": None,
        "winner_value": None, "best_single_family": None, "best_single_id": None, "best_single_value": None,
        "runner_up_family": None, "runner_up_id": None, "runner_up_value": None, "vs_runner_up": None,
    }
    if report.winner_id in {c.id for c in report.candidates}:
        winner = report.candidate(report.winner_id)  # type: ignore[arg-type]
        union.update(winner_family=winner.family, winner_value=objective_value(report, winner))
    if bests:
        top = better(bests, key=lambda r: r["best_value"])
        union.update(best_single_family=top["family"], best_single_id=top["best_id"], best_single_value=top["best_value"])
        others = [r for r in bests if r["family"] != union["winner_family"]]
        if others:
            runner = better(others, key=lambda r: r["best_value"])
            union.update(runner_up_family=runner["family"], runner_up_id=runner["best_id"], runner_up_value=runner["best_value"])
            if union["winner_value"] is not None:
                union["vs_runner_up"] = _speedup(metric, runner["best_value"], union["winner_value"])
    rows.append(union)
    return rows


def _speedup(metric: str, reference: float, value: float) -> float | None:
    """>1 means ``value`` is better than ``reference`` whatever the metric's direction."""
    if lower_is_better(metric):
        return reference / value if value > 0 else None
    return value / reference if reference > 0 else None


def family_table(rows: list[dict[str, Any]]) -> Table:
    families = [r for r in rows if r["kind"] == "family"]
    union = next((r for r in rows if r["kind"] == "union"), None)
    table = Table(title="per family (best eligible candidate)")
    for header in ("family", "cand.", "meas.", "fail", "best", "objective", "vs base"):
        table.add_column(header, justify="left" if header in ("family", "best") else "right",
                         no_wrap=header in ("family", "best"))
    for r in families:
        table.add_row(
            r["family"], str(r["candidates"]), str(r["measured"]), str(r["failed"]), r["best_id"] or "-",
            fmt_ms(r["best_value"]), f"{r['vs_baseline']:.2f}x" if r["vs_baseline"] else "-",
        )
    if union is not None:
        table.caption = union_text(union)
    return table


def union_text(union: dict[str, Any]) -> str:
    if union["winner_id"] is None:
        return "no winner"
    text = f"winner {union['winner_id']} ({union['winner_family']})"
    if union["runner_up_id"] is not None and union["vs_runner_up"] is not None:
        text += (
            f"; best other family {union['runner_up_family']} ({union['runner_up_id']}): "
            f"winner is {union['vs_runner_up']:.2f}x on {union['metric']}"
        )
    else:
        text += "; no other family had an eligible candidate"
    return text
