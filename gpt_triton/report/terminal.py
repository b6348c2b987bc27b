"""The terminal summary of a run (rich): one row per candidate, the per-family view, the verdict panel.

A renderer over :mod:`gpt_triton.report.view`: it decides layout and styling only; every figure, mark
and eligibility comes from the view model.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpt_triton.core.records import RunReport
from gpt_triton.report.fmt import fmt_interval, fmt_ms, fmt_ratio, truncate
from gpt_triton.report.view import MARKS, CandidateRow, FamilySummary, ReportView, build_view

ROUTE_WIDTH = 48
# Real routes spell out every knob and real ids are 12-character digests, so below FULL_FROM columns the
# route moves to a legend under the numbers; below NARROW_BELOW the name (also in the legend) and the lesser
# columns go too.
FULL_FROM = 170
NARROW_BELOW = 110
MEDIUM_DROPS = ("backend", "route")
NARROW_DROPS = MEDIUM_DROPS + ("build s", "iso ms", "name")  # the legend names them
COLUMNS = (  # header, justify, no_wrap
    ("", "left", True), ("id", "left", True), ("name", "left", False), ("route", "left", False),
    ("status", "left", True), ("backend", "left", False), ("build s", "right", False), ("p50 ms", "right", False),
    ("p99 ms", "right", False), ("thr/s", "right", False), ("accuracy", "left", False), ("iso ms", "right", False),
)


def _route(row: CandidateRow, width: int) -> Text:
    route = Text(truncate(row.route, width))
    if row.failure:
        route.append("\n" + row.failure, style="red")
    return route


def _cells(row: CandidateRow) -> dict[str, Text | str]:
    c, stats = row.candidate, row.stats
    build = "-" if c.status == "planned" else f"{c.build.seconds:.1f}"
    if c.build.cached:
        build += " (c)"
    return {
        "": row.marks,
        "id": c.id,
        "name": row.name,
        "route": _route(row, ROUTE_WIDTH),
        "status": c.status,
        "backend": c.deploy.backend if c.deploy else "-",
        "build s": build,
        "p50 ms": fmt_interval(stats.p50_ms if stats else None),
        "p99 ms": fmt_interval(stats.p99_ms if stats else None),
        "thr/s": fmt_ms(stats.throughput.value) if stats and stats.throughput else "-",
        "accuracy": row.accuracy,
        "iso ms": fmt_ms(c.isolated.single_request_ms if c.isolated else None),
    }


def candidate_table(view: ReportView, width: int | None = None) -> Table:
    """One row per candidate at the objective's load level; winner ★, baseline B, unconfirmed pick s.

    ``width``: the console's columns (None: every column). Narrower consoles lose the backend (report.md
    has it) and route (:func:`route_legend` prints it), then the build and isolated times. The name (family and
    the knobs that differ from the baseline) is never dropped: it is how a person tells the rows apart.
    """
    report, objective = view.report, view.objective
    drops: tuple[str, ...] = ()
    if width is not None and width < FULL_FROM:
        drops = NARROW_DROPS if width < NARROW_BELOW else MEDIUM_DROPS
    marks = "  ".join(f"{symbol} {meaning}" for symbol, meaning in MARKS)
    table = Table(
        title=f"{report.model.name}: {len(report.candidates)} candidates "
        f"(objective {objective.metric} at {objective.load_label})",
        caption=f"{marks}; ms [{objective.confidence:.0%} bootstrap CI]; "
        "accuracy m=min margin ub=exceedance upper bound; iso = isolated in-process single request",
        box=box.SIMPLE_HEAD if drops else box.HEAVY_HEAD,
    )
    # Short columns never wrap; on a narrow terminal the route and the intervals wrap instead (an
    # interval drops to a second line under its value, which still reads naturally).
    for header, justify, no_wrap in COLUMNS:
        if header in drops:
            continue
        table.add_column(header, justify=justify, no_wrap=no_wrap,  # type: ignore[arg-type]
                         max_width=ROUTE_WIDTH if header in ("route", "name") else None,
                         min_width=12 if header in ("p50 ms", "p99 ms") else None, overflow="fold")
    for row in view.rows:
        cells = _cells(row)
        style = "bold green" if row.id == report.winner_id else ("red" if row.failed else "")
        table.add_row(*(cells[str(column.header)] for column in table.columns), style=style or None)
    return table


def summary_table(report: RunReport, width: int | None = None) -> Table:
    """:func:`candidate_table` of a report."""
    return candidate_table(build_view(report), width)


def route_legend(view: ReportView) -> Table:
    """id -> name and distinguishing knobs (and the reason of a failed candidate), for narrow consoles."""
    table = Table(box=box.SIMPLE_HEAD, title="routes (knobs shared by every candidate left out)")
    table.add_column("id", no_wrap=True)
    table.add_column("name", overflow="fold")
    table.add_column("route", overflow="fold")
    for row in view.rows:
        table.add_row(row.id, row.name, _route(row, 10_000))
    return table


def family_table(summary: FamilySummary) -> Table:
    table = Table(title="per family (best eligible candidate)")
    for header in ("family", "cand.", "meas.", "fail", "best", "objective", "vs base"):
        table.add_column(header, justify="left" if header in ("family", "best") else "right",
                         no_wrap=header == "family")
    for r in summary.families:
        table.add_row(r.family, str(r.candidates), str(r.measured), str(r.failed), r.best_name or "-",
                      fmt_ms(r.best_value), fmt_ratio(r.vs_baseline))
    if summary.union is not None:
        table.caption = summary.union.text()
    return table


def verdict_panel(view: ReportView) -> Panel:
    body = Table.grid(padding=(0, 2))
    body.add_column(style="bold")
    body.add_column()
    for label, text in view.verdict:
        style = "red" if ("FAIL" in text or label == "run") else ""
        body.add_row(label, Text(text, style=style))
    return Panel(body, title="verdict", border_style="green" if view.verdict_ok else "red")


def print_summary(report: RunReport, console: Console | None = None) -> None:
    console = console or Console()
    view = build_view(report)
    renderables: list[Any] = []
    if view.rows:
        renderables.append(candidate_table(view, width=console.width))
        if console.width < FULL_FROM:
            renderables.append(route_legend(view))
    else:
        renderables.append(Text(f"{report.model.name}: no candidates were planned", style="bold red"))
    if view.families.families:
        renderables.append(family_table(view.families))
    renderables.append(verdict_panel(view))
    console.print(Group(*renderables))
