"""The verdict of a run as (label, text) lines: the terminal panel and report.md both print these."""

from __future__ import annotations

from gpt_triton.core.naming import unique_names
from gpt_triton.core.objective import metric_interval
from gpt_triton.core.records import RunReport
from gpt_triton.report.fmt import fmt_count, fmt_ms


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


def _who(report: RunReport, candidate_id: str | None) -> str:
    """A candidate as the verdict names it: name and id (core.naming), "none" for no candidate."""
    names = unique_names(report.candidates, report.baseline_id)
    return f"{names[candidate_id]} ({candidate_id})" if candidate_id in names else (candidate_id or "none")


# Paired, the ratio is not baseline_ms / winner_ms (those are pooled): the line says which it is.
_PAIRED = {"paired": " (paired by round)", "pooled": ""}


def _gain_lines(report: RunReport) -> list[tuple[str, str]]:
    winner, baseline, gain = report.winner_id, report.baseline_id, report.gain
    lines: list[tuple[str, str]] = []
    if gain is not None:
        r = gain.ratio
        # The gain is of the selected candidate; when the baseline was kept, the winner is not it.
        contender = report.selected_id or winner
        latency = "p99 " if gain.metric == "throughput" else ""  # Gain's *_ms are p99s for a throughput objective
        text = (
            f"{gain.metric} ratio{_PAIRED[gain.statistic]} {r.value:.3f} [{r.low:.3f}, {r.high:.3f}] ({r.level:.0%} CI); "
            f"{latency}baseline {fmt_ms(gain.baseline_ms)} ms -> {_who(report, contender)} {fmt_ms(gain.winner_ms)} ms"
        )
        if gain.statistic == "paired" and gain.metric != "throughput" and (pooled := gain.pooled_ratio()) is not None:
            # perf_analyzer prints one p99 over its requests pooled: the ratio of these two is the like-for-like
            # figure to set beside its gain (eight conv_attention tunes rechecked at once: 0.90 of it pooled over
            # them, the paired ratio 0.86, each check +/-15-25% on its own: docs/measurement.md).
            text += f" (their ratio {pooled:.3f}: pooled, as perf_analyzer prints a {gain.metric})"
        if gain.selection_estimate_ratio is not None:
            e = gain.selection_estimate
            interval = f" [{e.low:.3f}, {e.high:.3f}]" if e is not None else ""
            text += (f"; selection estimated {gain.selection_estimate_ratio:.3f}{interval} "
                     f"(winner's curse {gain.selection_estimate_ratio - r.value:+.3f})")
            if (between := gain.between_runs()) is not None:
                text += f": {between.describe()}"
        if gain.servers is not None:
            text += f"; pooled over {gain.servers.describe()}"
        lines.append(("re-measured gain", text))
        if gain.tail is not None and gain.tail.edge:  # the gain is this run's, at its share of slow requests
            lines.append(("tail", gain.tail.describe()))
        if gain.cross_check is not None:  # the other client's gain from the same minutes
            lines.append(("cross-check", gain.cross_check.describe(gain.metric)))
    else:
        lines.append(("re-measured gain", "not measured"))
    if winner is not None and winner == baseline:
        if report.selected_id and report.selected_id != baseline:
            lines.append(("decision", f"promoted the baseline: {_who(report, report.selected_id)}'s gain was not significant"))
        else:
            lines.append(("decision", "promoted the baseline: no candidate beat it"))
    elif gain is not None and gain.significant:
        lines.append(("decision", "significant: the interval excludes 1.0"))
    elif gain is not None:
        lines.append(("decision", "not significant: the interval includes 1.0"))
    return lines


def verdict_lines(report: RunReport) -> list[tuple[str, str]]:
    """(label, text) pairs: run state, winner, gain, decision, repeat check, held-out, promotion, break-even."""
    lines: list[tuple[str, str]] = []
    if report.status == "failed":
        lines.append(("run", f"FAILED: {report.error or 'no error recorded'}"))
    elif report.status == "running":
        lines.append(("run", "still running (or interrupted): figures are partial"))
    winner, baseline = report.winner_id, report.baseline_id
    if winner is not None and winner == baseline:
        lines.append(("winner", f"the baseline {baseline}"))
    else:
        lines.append(("winner", f"{_who(report, winner)} vs baseline {baseline or 'none'}"))
    lines += _gain_lines(report)
    repeat = report.repeat_check
    if repeat:
        lines.append(("repeat check", f"{repeat.get('verdict', '?')}: first selection {_who(report, repeat.get('first'))}, "
                      f"second (fresh server) {_who(report, repeat.get('second'))}"))
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
    elif report.gain is not None:
        lines.append(("break-even", "never: the winner saves no time per inference"))
    return lines

