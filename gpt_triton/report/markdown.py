"""report.md: the same verdict and tables as the terminal, plus per-load detail, decisions and plots.

A renderer over :mod:`gpt_triton.report.view`, like the terminal summary, so the two cannot disagree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from gpt_triton.core.recheck import Recheck, pool_rechecks
from gpt_triton.core.records import RunReport
from gpt_triton.report.fmt import fmt_interval, fmt_ms, fmt_ratio, fmt_ratio_interval, knob_text
from gpt_triton.report.plots import PLOT_TITLES, availability
from gpt_triton.report.view import MARKS, build_view, mixed_precision_rows


def _cell(text: object) -> str:
    """Markdown table cells cannot hold pipes or newlines (route keys contain ``|``)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _link(path: Path, relative_to: Path | None) -> str:
    if relative_to is None:
        return path.as_posix()
    return Path(os.path.relpath(path, relative_to)).as_posix()


def render_markdown(report: RunReport, plots: dict[str, Path], relative_to: Path | None = None,
                    rechecks: Sequence[Recheck] = ()) -> str:
    """The Markdown report. Plot links are made relative to ``relative_to`` (report.md's directory);
    ``rechecks`` are the run's ``gpt-triton recheck`` records, oldest first."""
    view = build_view(report)
    objective = view.objective
    out: list[str] = [f"# gpt-triton run {report.run_id}: {report.model.name}", ""]
    out.append(
        f"Model `{report.model.path}` (sha256 {report.model.sha256[:12]}, opset {report.model.opset}), shapes "
        + ", ".join(f"`{k}={'x'.join(map(str, v))}`" for k, v in report.shapes.items())
        + f". Created {report.created} by gpt-triton {report.tool_version}; tuning took {report.tuning_seconds:.0f} s."
    )
    m = report.machine
    versions = ", ".join(f"{k} {v}" for k, v in sorted(m.runtime_versions.items()))
    out += [
        "",
        f"Machine `{m.hostname}`: {m.cpu}, {m.cores} cores, {m.memory_bytes / 2**30:.0f} GiB, GPU {m.gpu or 'none'}"
        + (f"; {versions}" if versions else "")
        + f". Triton {report.triton_version or '?'} ({report.triton_mode}).",
    ]
    if report.reference:
        ref = report.reference
        synthetic = " **synthetic inputs: accuracy says nothing about real traffic**" if ref.get("synthetic") else ""
        out += ["", "Reference data: " + ", ".join(f"{k}={v}" for k, v in ref.items()) + "." + synthetic]
    out += ["", "## Verdict", ""]
    out += [f"- **{label}**: {_cell(text)}" for label, text in view.verdict]
    out += _rechecks(rechecks)

    marks = ", ".join(f"{symbol} {meaning}" for symbol, meaning in MARKS)
    out += ["", "## Candidates", "", f"Objective: {objective.metric} at load index {objective.load_index} "
            f"({objective.load_label}). Marks: {marks}. Intervals are {objective.confidence:.0%} bootstrap CIs.", ""]
    if any(view.common.values()):
        out += ["Knobs every candidate of a route family shares (left out of the route column):", ""]
        out += [f"- `{family}`: `{_cell(knob_text(knobs)) or '-'}`" for family, knobs in sorted(view.common.items()) if knobs]
        out += [""]
    rows: list[list[object]] = []
    for row in view.rows:
        c, stats = row.candidate, row.stats
        rows.append([
            # Whole: a cut would fall before the knob that differs (every row starts with the shared ones).
            row.marks, c.id, f"`{row.name}`", f"`{row.route}`", c.status,
            c.deploy.backend if c.deploy else "-",
            f"{c.build.seconds:.1f}" + (" (cached)" if c.build.cached else ""),
            fmt_interval(stats.p50_ms if stats else None), fmt_interval(stats.p99_ms if stats else None),
            fmt_ms(stats.throughput.value) if stats and stats.throughput else "-", row.accuracy,
            fmt_ms(c.isolated.single_request_ms if c.isolated else None), row.failure or "",
        ])
    if rows:
        out += _table(["", "id", "name", "route", "status", "backend", "build s", "p50 ms", "p99 ms", "thr/s",
                       "accuracy", "isolated ms", "reason"], rows)
    else:
        out += ["No candidates were planned.", ""]

    families = view.families
    if families.union is not None:
        out += ["## Per family", ""]
        out += _table(
            ["family", "candidates", "measured", "failed", "eligible", "best", objective.metric, "vs baseline"],
            [[r.family, r.candidates, r.measured, r.failed, r.eligible, r.best_name or "-", fmt_ms(r.best_value),
              fmt_ratio(r.vs_baseline)] for r in families.families],
        )
        out += [families.union.text() + ".", ""]

    mixed = mixed_precision_rows(view)
    if mixed:
        out += ["## Mixed precision", "", "Layer groups kept in fp32 by the precision search (probes and cost in "
                "the decisions); tuning split only, the held-out verdict is the winner's.", ""]
        out += _table(["name", "kept in fp32", "status", "tuning split", objective.metric, "held-out"],
                      [[f"`{m.row.name}`", ", ".join(m.kept), m.row.candidate.status, m.tuning,
                        fmt_interval(m.row.objective), m.heldout] for m in mixed])

    out += _per_load(report, view.name)

    if report.heldout is not None and report.heldout.outputs:
        out += ["## Held-out accuracy per output", ""]
        out += _table(["output", "metric", "tolerance", "worst", "quantile", "margin", "exceedances"],
                      [[o.output, o.metric, f"{o.tolerance:g}", f"{o.worst:.3g}", f"{o.quantile:.3g}",
                        f"{o.margin:.3g}", f"{o.exceedances}/{o.requests}"] for o in report.heldout.outputs])

    out += ["## Plots", ""]
    reasons = availability(view)
    for name, title in PLOT_TITLES.items():
        if name in plots:
            out += [f"### {title}", "", f"![{title}]({_link(plots[name], relative_to)})", ""]
        else:
            out += [f"### {title}", "", f"Not drawn: {reasons.get(name) or 'not rendered'}.", ""]

    if report.candidates:
        # The full route keys, defaults included: what a rebuild (or a bug report) needs verbatim.
        out += ["<details><summary>Full routes</summary>", "", "```"]
        out += [f"{c.id}  {view.name(c.id)}\n    {c.route_text()}" for c in report.candidates]
        out += ["```", "", "</details>", ""]

    if report.decisions:
        out += ["## Decisions", ""] + [f"{i}. {_cell(d)}" for i, d in enumerate(report.decisions, 1)] + [""]
    return "\n".join(out).rstrip() + "\n"


def _rechecks(rechecks: Sequence[Recheck]) -> list[str]:
    """What perf_analyzer, run as users run it, read for the pair since the tune (``gpt-triton recheck``)."""
    if not rechecks:
        return []
    out = ["", "## Rechecked with perf_analyzer", "",
           "perf_analyzer at its own defaults on the baseline and the pick, a run each per round "
           "(`gpt-triton recheck`, kept in `rechecks/`): its gains paired by round, and the tune's re-measured "
           "gain as a fraction of its own.", ""]
    rows: list[list[object]] = []
    for r in rechecks:
        pa = r.gains.get(r.metric)
        rows.append([r.created, f"{r.hours_after_tune:.1f}", r.triton_mode, r.rounds_done,
                     fmt_ratio_interval(r.gains.get("p50")), fmt_ratio_interval(pa), fmt_ratio_interval(r.agreement),
                     "-" if r.within is None else ("yes" if r.within else "no")])
    out += _table(["when", "hours after", "server", "rounds", "p50 gain", f"{rechecks[0].metric} gain",
                   "tune / perf_analyzer", "within 5%"], rows)
    latest = rechecks[-1]
    if (series := pool_rechecks(rechecks, latest)) is not None:  # the latest recheck's pair, as recheck printed it
        line = series.line(latest.tune_gain, latest.tune_statistic)
        out += [line[0].upper() + line[1:] + ".", ""]
    return out


def _per_load(report: RunReport, name: Callable[[str], str]) -> list[str]:
    """One table per load level: the served figures and the server-side breakdown."""
    measured = [c for c in report.candidates if c.latency]
    if not measured:
        return []
    out = ["## Latency per load level", ""]
    n_loads = max(len(c.latency) for c in measured)
    for index in range(n_loads):
        present = [(c, c.latency[index]) for c in measured if index < len(c.latency)]
        out += [f"### {present[0][1].load.label()}", ""]
        rows: list[list[object]] = []
        for c, s in present:
            server = s.server
            breakdown = (
                f"queue {server.queue_ms:.2f} / infer {server.compute_infer_ms:.2f}"
                + (f" / batch {server.success_count / server.execution_count:.2f}" if server.execution_count else "")
                if server else "-"
            )
            lag = [w.send_lag_p99_ms for w in s.windows if w.send_lag_p99_ms is not None]
            rows.append([
                # How many requests each estimate rests on; a tail no order statistic bounds says so.
                c.id, name(c.id), f"{len(s.windows)} / {s.requests}", "yes" if s.stable else "no",
                *(fmt_interval(getattr(s, f"{q}_ms")) + (" (too few requests: unbounded)" if q in s.unbounded else "")
                  for q in ("p50", "p90", "p99")),
                fmt_interval(s.throughput), s.errors, breakdown,
                "-" if s.rate_held is None else ("yes" if s.rate_held else f"NO (send lag p99 {fmt_ms(max(lag)) if lag else '?'} ms)"),
            ])
        out += _table(["id", "name", "windows / requests", "stable", "p50 ms", "p90 ms", "p99 ms", "throughput/s", "errors",
                       "server ms (mean)", "rate held"], rows)
    return out

