"""Matplotlib figures of a run, written as PNGs.

Figures are built with the object API (``matplotlib.figure.Figure``), never pyplot: no global state, no
GUI backend, safe to call from a server or a test. Each plot is skipped (with a reason) rather than
drawn empty when the run lacks its data; :func:`plot_availability` tells the Markdown renderer why.
Which load level is the objective's and which candidates the run's accuracy policy rejects come from
the view model (:mod:`gpt_triton.report.view`), as in the table and report.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from gpt_triton.core.measurements import Interval
from gpt_triton.core.objective import metric_interval
from gpt_triton.core.records import Candidate, RunReport
from gpt_triton.report.view import FAILED_STATUSES, ReportView, build_view, load_stats

if TYPE_CHECKING:  # matplotlib costs seconds to import; print_summary and report.md do not need it
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

PLOT_TITLES = {
    "latency_distribution": "Latency distribution per candidate (measurement windows)",
    "latency_vs_throughput": "Latency vs throughput across load levels",
    "isolated_vs_served": "Isolated vs served ranking",
    "remeasurement": "Re-measured gain: selected candidate vs baseline",
    "accuracy_pareto": "Accuracy-latency Pareto set",
    "build_cost": "Build cost per candidate",
}
WINNER, BASELINE, OTHER, BAD = "tab:green", "tab:blue", "tab:gray", "tab:red"
DPI = 110


def _measured(view: ReportView) -> list[Candidate]:
    return [r.candidate for r in view.rows if r.candidate.latency and not r.failed]


def _rejected(view: ReportView, candidate: Candidate) -> bool:
    """Has an accuracy result the run's accuracy policy rejects (drawn red, with an x, off the Pareto set)."""
    row = view.row(candidate.id)
    return row is not None and row.accuracy_ok is False


def _color(view: ReportView, candidate: Candidate) -> str:
    report = view.report
    if candidate.id == report.winner_id:
        return WINNER
    if candidate.id == report.baseline_id:
        return BASELINE
    if candidate.status in FAILED_STATUSES or _rejected(view, candidate):
        return BAD
    return OTHER


def _label(view: ReportView, candidate: Candidate) -> str:
    """The candidate's name (family and the knobs that differ from the baseline), its role in the run."""
    report = view.report
    selected = report.selected_id if report.selected_id != report.winner_id else None  # not confirmed
    roles = [role for role, cid in (("winner", report.winner_id), ("baseline", report.baseline_id),
                                    ("selected", selected)) if cid == candidate.id]
    return view.name(candidate.id) + (f" ({', '.join(roles)})" if roles else "")


def _annotate(ax: Axes, points: list[tuple[str, float, float]]) -> None:
    """Label points with their names, stepping a label down when it would overprint an earlier one.

    Call it last: overlap is judged in display pixels on the final limits (a "small" label is about
    7 px per character and 12 px tall at this DPI), so it holds on log axes and for ids of any length."""
    if not points:
        return
    ax.get_xlim(), ax.get_ylim()  # autoscaling is lazy: settle the limits before using transData
    px_per_pt = (ax.figure.dpi if ax.figure else DPI) / 72.0
    char_px, line_px = 7.0, 12.0
    placed: list[tuple[float, float, float]] = []  # label left x, label baseline y, label width (px)
    for cid, x, y in sorted(points, key=lambda p: (p[1], p[2])):
        px, py = ax.transData.transform((x, y))
        for level in range(len(placed) + 1):
            label_y = py + (4 - 11 * level) * px_per_pt
            if not any(abs(px - qx) < width and abs(label_y - qy) < line_px for qx, qy, width in placed):
                break
        ax.annotate(cid, (x, y), textcoords="offset points", xytext=(6, 4 - 11 * level), fontsize="small")
        placed.append((px, label_y, char_px * (len(cid) + 2)))


def _notable(report: RunReport, candidate: Candidate) -> bool:
    return candidate.id in (report.winner_id, report.baseline_id, report.selected_id)


def _color_legend(ax: Axes, extra: list[Line2D] | None = None, **kwargs: object) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker=marker, linestyle="", color=color, label=label) for color, marker, label in (
        (WINNER, "o", "winner"), (BASELINE, "o", "baseline"), (OTHER, "o", "other"), (BAD, "x", "failed accuracy"))]
    ax.legend(handles=[*(extra or []), *handles], fontsize="small", **kwargs)  # type: ignore[call-overload]


def _err(interval: Interval) -> tuple[float, float]:
    """Error-bar lengths; a bootstrap point estimate can fall just outside its percentile interval, and
    matplotlib refuses negative lengths."""
    return max(0.0, interval.value - interval.low), max(0.0, interval.high - interval.value)


def _log_if_wide(ax: Axes, values: list[float], axis: str) -> None:
    """Log scale when values span more than 20x (a p99 tail of 160 ms beside a 3 ms p50 on a noisy host)."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if positive and max(positive) / min(positive) > 20:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def _metric_name(metric: str) -> str:
    return "throughput (req/s)" if metric == "throughput" else f"{metric} latency (ms)"


# --------------------------------------------------------------------------------------------- plots
def _latency_distribution(view: ReportView, fig: Figure) -> None:
    candidates = _measured(view)
    n_loads = max(len(c.latency) for c in candidates)
    axes = fig.subplots(1, n_loads, sharey=True, squeeze=False)[0]
    labels = [_label(view, c) for c in candidates]
    for index, ax in enumerate(axes):
        rows = [(pos, c, s) for pos, c in enumerate(candidates) if (s := load_stats(c, index)) is not None and s.windows]
        p99 = [[w.p99_ms for w in s.windows] for _, _, s in rows]
        p50 = [[w.p50_ms for w in s.windows] for _, _, s in rows]
        positions = [pos for pos, _, _ in rows]
        if rows:
            # p99 boxes carry the objective's spread; p50 boxes (narrow, light) show the body of the distribution.
            box99 = ax.boxplot(p99, positions=positions, vert=False, widths=0.55, patch_artist=True)
            for patch, (_, c, _) in zip(box99["boxes"], rows, strict=True):
                patch.set_facecolor(_color(view, c))
                patch.set_alpha(0.55)
            box50 = ax.boxplot(p50, positions=positions, vert=False, widths=0.25, patch_artist=True)
            for patch in box50["boxes"]:
                patch.set_facecolor("white")
        title = rows[0][2].load.label() if rows else f"load {index}"
        ax.set_title(title)
        ax.set_xlabel("window latency (ms): wide box p99, narrow box p50")
        ax.grid(axis="x", alpha=0.3)
        _log_if_wide(ax, [v for series in p50 + p99 for v in series], "x")
    axes[0].set_yticks(range(len(candidates)), labels)
    axes[0].invert_yaxis()
    fig.suptitle(PLOT_TITLES["latency_distribution"])


def _latency_vs_throughput(view: ReportView, fig: Figure) -> None:
    report = view.report
    ax = fig.subplots()
    # Winner and baseline keep their colours from the other plots; the rest cycle through colours that
    # mean nothing else here (and change line style once those run out).
    palette = ["tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    styles = ["-", "--", ":", "-."]
    others = 0
    for candidate in _measured(view):
        if candidate.id in (report.winner_id, report.baseline_id):
            color, style = _color(view, candidate), "-"
        else:
            color, style = palette[others % len(palette)], styles[(others // len(palette)) % len(styles)]
            others += 1
        xs, ys, lo, hi = [], [], [], []
        for stats in candidate.latency:
            if stats.throughput is None or stats.p99_ms is None:
                continue
            xs.append(stats.throughput.value)
            ys.append(stats.p99_ms.value)
            low, high = _err(stats.p99_ms)
            lo.append(low)
            hi.append(high)
        if not xs:
            continue
        special = _notable(report, candidate)
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=_label(view, candidate), color=color, linestyle=style,
                    linewidth=2.2 if special else 1.0, alpha=1.0 if special else 0.7)
        if special:  # name the load level at each point of the two lines people compare
            for x, y, stats in zip(xs, ys, [s for s in candidate.latency if s.throughput and s.p99_ms], strict=True):
                ax.annotate(stats.load.label(), (x, y), textcoords="offset points", xytext=(6, -10), fontsize="x-small",
                            color=color)
    _log_if_wide(ax, [s.p99_ms.value for c in _measured(view) for s in c.latency if s.p99_ms], "y")
    loads = [s.load.label() for s in _measured(view)[0].latency]
    ax.set_xlabel("throughput (req/s)")
    ax.set_ylabel("p99 latency (ms), 95% CI")
    ax.set_title(f"{PLOT_TITLES['latency_vs_throughput']}\nloads: {', '.join(loads)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))


def _isolated_points(view: ReportView) -> list[tuple[Candidate, float, float]]:
    points = []
    for c in _measured(view):
        stats = load_stats(c, view.objective.load_index)
        if c.isolated and c.isolated.single_request_ms is not None and stats and stats.p50_ms \
                and math.isfinite(c.isolated.single_request_ms) and math.isfinite(stats.p50_ms.value):
            points.append((c, c.isolated.single_request_ms, stats.p50_ms.value))
    return points


def _isolated_vs_served(view: ReportView, fig: Figure) -> None:
    report = view.report
    """Rank against rank: the question is whether in-process timing would have *ordered* the candidates
    as serving does (Spearman's rho is the correlation of exactly these ranks). Raw milliseconds differ
    by the RPC overhead anyway, and ranks spread a tight cluster of candidates so every id is legible."""
    from scipy.stats import rankdata, spearmanr

    points = _isolated_points(view)
    iso_ms, served_ms = [p[1] for p in points], [p[2] for p in points]
    iso_rank, served_rank = rankdata(iso_ms), rankdata(served_ms)  # 1 = fastest; ties share a mean rank
    ax = fig.subplots()
    for (c, _, _), x, y in zip(points, iso_rank, served_rank, strict=True):
        failed = _rejected(view, c)
        ax.scatter(x, y, color=_color(view, c), s=60, zorder=3, marker="x" if failed else "o")
    named = [(c, float(x), float(y)) for (c, _, _), x, y in zip(points, iso_rank, served_rank, strict=True)
             if len(points) <= 25 or _notable(report, c)]
    title = "Spearman rho undefined (all tied)"
    if len(set(iso_ms)) > 1 and len(set(served_ms)) > 1:  # scipy warns and returns nan on a constant input
        rho, pvalue = (float(v) for v in spearmanr(iso_ms, served_ms))
        title = f"Spearman rho = {rho:.2f} (p = {pvalue:.2g}, n = {len(points)})"
    n = len(points)
    diagonal = ax.plot([1, n], [1, n], linestyle="--", color="black", alpha=0.4, label="same rank")
    ax.set_xlim(0.5, n + 0.5 + 0.12 * n)  # room for the labels right of the last point
    ax.set_ylim(0.5, n + 0.5)
    ax.set_xlabel(f"isolated rank (in-process single request, 1 = fastest; {min(iso_ms):.2f}-{max(iso_ms):.2f} ms)")
    ax.set_ylabel(f"served rank (p50 through Triton; {min(served_ms):.2f}-{max(served_ms):.2f} ms)")
    ax.set_title(f"{PLOT_TITLES['isolated_vs_served']}: {title}")
    ax.grid(alpha=0.3)
    _color_legend(ax, extra=list(diagonal), loc="best")
    _annotate(ax, [(view.name(c.id), x, y) for c, x, y in named])


def _interval_bar(ax: Axes, interval: Interval, y: float, color: str, marker: str, alpha: float, label: str | None) -> None:
    low, high = _err(interval)
    ax.errorbar([interval.value], [y], xerr=[[low], [high]],
                fmt=marker, color=color, alpha=alpha, capsize=4, label=label)


def _remeasurement(view: ReportView, fig: Figure) -> None:
    report = view.report
    gain = report.gain
    assert gain is not None
    load_index = view.objective.load_index
    metric = gain.metric
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    # The gain is the *selected* candidate's; when its gain was not significant the baseline was kept and
    # the selected candidate is the one that lost, so it is named as such.
    contender = report.selected_id or report.winner_id
    role = "winner" if contender == report.winner_id and contender != report.baseline_id else "selected (not promoted)"
    rows = [("baseline", report.baseline_id, gain.baseline_ms, gain.remeasured_baseline, BASELINE),
            (role, contender, gain.winner_ms, gain.remeasured_winner, WINNER if role == "winner" else OTHER)]
    known = {c.id for c in report.candidates}
    for pos, (_, cid, point_ms, stats, color) in enumerate(rows):
        screening = metric_interval(load_stats(report.candidate(cid), load_index), metric) if cid in known and cid else None
        if screening is not None:
            _interval_bar(left, screening, pos + 0.12, color, "s", 0.45, "screening (95% CI)" if pos == 0 else None)
        remeasured = metric_interval(stats, metric)
        if remeasured is not None:
            _interval_bar(left, remeasured, pos - 0.12, color, "D", 1.0, "re-measured (95% CI)" if pos == 0 else None)
        elif metric != "throughput":  # Gain's *_ms points are latencies: only comparable on a latency axis
            left.scatter([point_ms], [pos - 0.12], marker="D", color=color, s=60, zorder=3,
                         label="re-measured" if pos == 0 else None)
    left.set_yticks([0, 1], [f"{role}\n{view.name(cid)}" for role, cid, *_ in rows])
    left.set_ylim(-0.6, 1.6)
    left.set_xlabel(_metric_name(metric))
    left.set_title("screening vs re-measurement")
    left.grid(axis="x", alpha=0.3)
    # Neutral legend markers: colour means baseline/winner here, shape means screening/re-measurement.
    from matplotlib.lines import Line2D

    left.legend(handles=[Line2D([], [], marker="s", color="black", alpha=0.45, label="screening (95% CI)"),
                         Line2D([], [], marker="D", color="black", label="re-measured")], fontsize="small", loc="best")
    r = gain.ratio
    r_low, r_high = _err(r)
    right.errorbar([r.value], [0], xerr=[[r_low], [r_high]], fmt="o", color=WINNER if gain.significant else BAD,
                   capsize=6, label=f"re-measured {r.value:.2f} [{r.low:.2f}, {r.high:.2f}]")
    if gain.selection_estimate_ratio is not None:
        right.scatter([gain.selection_estimate_ratio], [0], marker="x", color="black", s=60, zorder=3,
                      label=f"selection estimate {gain.selection_estimate_ratio:.2f}")
    right.axvline(1.0, color="black", linestyle="--", alpha=0.5, label="no gain (1.0)")
    right.set_yticks([])
    _log_if_wide(right, [r.low, r.high, 1.0, gain.selection_estimate_ratio or 1.0], "x")
    right.set_xlabel(f"{metric} gain ratio (>1: {contender} better)")
    right.set_title("ratio: " + ("significant (CI excludes 1.0)" if gain.significant else "not significant (CI includes 1.0)"))
    right.grid(axis="x", alpha=0.3)
    right.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22))
    fig.suptitle(PLOT_TITLES["remeasurement"])


def _pareto_points(view: ReportView) -> list[tuple[Candidate, float, float]]:
    points = []
    for c in _measured(view):
        stats = load_stats(c, view.objective.load_index)
        # A non-finite margin (e.g. a zero tolerance) has no place on an axis: leave the point out.
        if c.accuracy is not None and stats is not None and stats.p99_ms is not None \
                and math.isfinite(c.accuracy.min_margin) and math.isfinite(stats.p99_ms.value):
            points.append((c, stats.p99_ms.value, c.accuracy.min_margin))
    return points


def pareto_front(points: list[tuple[str, float, float]]) -> set[str]:
    """Ids not dominated in (lower latency, higher margin)."""
    front = set()
    for cid, lat, margin in points:
        dominated = any(
            (lat2 <= lat and m2 >= margin) and (lat2 < lat or m2 > margin) for other, lat2, m2 in points if other != cid
        )
        if not dominated:
            front.add(cid)
    return front


def _accuracy_pareto(view: ReportView, fig: Figure) -> None:
    report = view.report
    points = _pareto_points(view)
    # A candidate the run's accuracy policy rejects is not a trade-off anyone can ship: keep it off the front.
    front = pareto_front([(c.id, lat, m) for c, lat, m in points if not _rejected(view, c)])
    ax = fig.subplots()
    for c, lat, margin in points:
        failed = _rejected(view, c)
        on_front = c.id in front
        ax.scatter(lat, margin, s=90 if on_front else 40, marker="x" if failed else "o", zorder=3,
                   color=_color(view, c), edgecolors="black" if on_front and not failed else None)
    ordered = sorted((lat, m) for c, lat, m in points if c.id in front)
    extra = list(ax.plot([p[0] for p in ordered], [p[1] for p in ordered], drawstyle="steps-post", color="black",
                         alpha=0.5, label=f"Pareto set ({len(ordered)}, circled)"))
    ax.axhline(0.0, color=BAD, linestyle=":")
    ax.set_xlabel("p99 latency (ms) at the objective's load")
    ax.set_ylabel("min accuracy margin (relative to tolerance; higher is safer)")
    ax.set_title(f"{PLOT_TITLES['accuracy_pareto']} (dotted line: tolerance)")
    ax.grid(alpha=0.3)
    _color_legend(ax, extra=extra)
    # With many points only those a reader looks for are named: Pareto set, winner, baseline, selected pick.
    _annotate(ax, [(view.name(c.id), lat, m) for c, lat, m in points if len(points) <= 12 or c.id in front or _notable(report, c)])


def _build_cost(view: ReportView, fig: Figure) -> None:
    report = view.report
    candidates = report.candidates
    left, right = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(candidates)))
    colors = [BAD if c.status in FAILED_STATUSES else _color(view, c) for c in candidates]
    left.barh(ys, [c.build.seconds for c in candidates], color=colors,
              hatch=["//" if c.build.cached else "" for c in candidates])
    right.barh(ys, [c.build.peak_rss_bytes / 2**20 for c in candidates], color=colors)
    for y, c in zip(ys, candidates, strict=True):
        left.annotate("cached" if c.build.cached else f"{c.build.seconds:.1f} s", (c.build.seconds, y),
                      textcoords="offset points", xytext=(4, -3), fontsize="small")
    left.margins(x=0.15)
    left.set_yticks(ys, [f"{c.id} {c.family} ({c.status}{', cached' if c.build.cached else ''})" for c in candidates])
    left.invert_yaxis()
    left.set_xlabel("build seconds")
    right.set_xlabel("peak RSS (MiB)")
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
    total = sum(c.build.seconds for c in candidates)
    fig.suptitle(f"{PLOT_TITLES['build_cost']}: {total:.0f} s total (red: crashed, infeasible or failed accuracy)")


# --------------------------------------------------------------------------------------------- driver
def plot_availability(report: RunReport) -> dict[str, str | None]:
    """Plot name -> None when it can be drawn, else the reason it is skipped."""
    return availability(build_view(report))


def availability(view: ReportView) -> dict[str, str | None]:
    """:func:`plot_availability` of a view already built."""
    report = view.report
    measured = _measured(view)
    none_measured = "no candidate was measured"
    iso = _isolated_points(view)
    return {
        "latency_distribution": None if any(s.windows for c in measured for s in c.latency) else none_measured,
        "latency_vs_throughput": None if any(s.throughput and s.p99_ms for c in measured for s in c.latency) else none_measured,
        "isolated_vs_served": None if len(iso) >= 2 else f"{len(iso)} candidate(s) have isolated estimates; a ranking needs 2",
        "remeasurement": None if report.gain is not None else "no re-measured gain in this run",
        "accuracy_pareto": None if _pareto_points(view) else "no measured candidate has an accuracy result",
        "build_cost": None if report.candidates else "the run has no candidates",
    }


DRAW: dict[str, Callable[[ReportView, Figure], None]] = {
    "latency_distribution": _latency_distribution,
    "latency_vs_throughput": _latency_vs_throughput,
    "isolated_vs_served": _isolated_vs_served,
    "remeasurement": _remeasurement,
    "accuracy_pareto": _accuracy_pareto,
    "build_cost": _build_cost,
}


def _figure_size(view: ReportView, name: str) -> tuple[float, float]:
    rows = len(view.rows)
    if name == "latency_distribution":
        loads = max((len(c.latency) for c in _measured(view)), default=1)
        return (4.5 + 4.0 * loads, 1.6 + 0.45 * rows)
    if name == "build_cost":
        return (11.0, 1.6 + 0.45 * rows)
    if name == "remeasurement":
        return (11.0, 4.2)
    if name == "latency_vs_throughput":
        return (10.5, 5.5)
    return (8.5, 6.0)


def render_plots(report: RunReport, out_dir: Path, names: Iterable[str] | None = None) -> dict[str, Path]:
    """Draw every plot the run has data for (or only ``names``) into ``out_dir``; returns name -> PNG path."""
    wanted = set(PLOT_TITLES if names is None else names)
    unknown = wanted - set(PLOT_TITLES)
    if unknown:
        raise ValueError(f"unknown plot(s) {sorted(unknown)}; known: {sorted(PLOT_TITLES)}")
    from matplotlib.figure import Figure

    view = build_view(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, reason in availability(view).items():
        if reason is not None or name not in wanted:
            continue
        fig = Figure(figsize=_figure_size(view, name), dpi=DPI, layout="constrained")
        DRAW[name](view, fig)
        path = out_dir / f"{name}.png"
        tmp = path.with_suffix(".png.tmp")
        fig.savefig(tmp, format="png")
        tmp.replace(path)
        written[name] = path
    return written
