"""The machine-readable summary of a run: what ``gpt-triton tune --json`` and ``report --json`` print.

The keys are a contract (documented in README, "Machine-readable results"): add keys, never rename or
remove them; ``schema`` changes only when a key's meaning does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import EXIT_BAD_INPUT, EXIT_CODES, EXIT_NO_WINNER, EXIT_OK
from gpt_triton.core.records import RunReport
from gpt_triton.report.verdict import verdict_lines

SCHEMA = "gpt-triton.run-summary/1"


def run_exit_code(report: RunReport) -> int:
    """The exit code a finished tune reports: 0 a winner (promoted unless --no-promote), 1 no winner, 2 failed."""
    if report.status != "done":
        return EXIT_BAD_INPUT
    return EXIT_OK if report.winner_id is not None else EXIT_NO_WINNER


def run_summary(report: RunReport) -> dict[str, Any]:
    """Winner, gain with its interval, held-out verdict, candidate counts, paths and the exit code's meaning."""
    winner = report.candidate(report.winner_id) if report.winner_id else None
    gain = report.gain
    heldout = report.heldout
    run_dir = Path(report.run_dir)
    code = run_exit_code(report)
    report_md = run_dir / "report.md"
    return {
        "schema": SCHEMA,
        "run_id": report.run_id,
        "model": report.model.name,
        "status": report.status,
        "error": report.error,
        "exit_code": code,
        "exit_meaning": EXIT_CODES[code],
        "winner": None if winner is None else {
            "id": winner.id, "family": winner.family, "route": winner.route_text(), "is_baseline": winner.is_baseline,
        },
        "baseline_id": report.baseline_id,
        "selected_id": report.selected_id,
        "gain": None if gain is None else {
            "metric": gain.metric, "statistic": gain.statistic, "ratio": gain.ratio.value, "low": gain.ratio.low, "high": gain.ratio.high,
            "level": gain.ratio.level, "significant": gain.significant, "winner_ms": gain.winner_ms,
            "baseline_ms": gain.baseline_ms, "pooled_ratio": gain.pooled_ratio(),
            "selection_estimate_ratio": gain.selection_estimate_ratio,
            "selection_estimate_low": None if gain.selection_estimate is None else gain.selection_estimate.low,
            "selection_estimate_high": None if gain.selection_estimate is None else gain.selection_estimate.high,
            "runs_agree": None if (between := gain.between_runs()) is None else between.agree,
            "estimate_in_turns": gain.estimate_in_turns,
            "servers": 1 if gain.servers is None else len(gain.servers.servers),
            "between_server_sd": None if gain.servers is None else gain.servers.between_sd,
            "tail_edge": None if gain.tail is None else gain.tail.edge,
            "tail_spread": None if gain.tail is None else gain.tail.spread,
            "cross_check": None if (check := gain.cross_check) is None else {
                "client": check.client, "ratio": check.ratio.value, "low": check.ratio.low, "high": check.ratio.high,
                "agreement": check.agreement.value, "agreement_low": check.agreement.low,
                "agreement_high": check.agreement.high, "within": check.within, "p50_ratio": check.p50_ratio,
                "p50_agreement": None if check.p50_agreement is None else check.p50_agreement.value,
            },
        },
        "heldout": None if heldout is None else {
            "passed": heldout.passed, "requests": heldout.requests, "exceedances": heldout.exceedances,
            "exceedance_upper_bound": heldout.exceedance_upper_bound, "confidence": heldout.confidence,
            "min_margin": heldout.min_margin, "reason": heldout.reason,
        },
        "verdicts": dict(verdict_lines(report)),
        "candidates": {"total": len(report.candidates), **Counter(c.status for c in report.candidates)},
        "promoted": None if report.promoted_version is None else {
            "version": report.promoted_version, "path": report.promoted_path,
        },
        "paths": {
            "run_dir": str(run_dir),
            "report_json": str(run_dir / "report.json"),
            "report_md": str(report_md) if report_md.is_file() else None,
        },
        "tuning_seconds": report.tuning_seconds,
    }
