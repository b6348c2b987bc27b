"""Every plot is a readable PNG; plots with missing data are skipped with a reason, never drawn empty."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from matplotlib.image import imread

from gpt_triton.core.records import RunReport
from gpt_triton.report import plot_availability, render_plots
from gpt_triton.report.plots import PLOT_TITLES, pareto_front

from .conftest import LOADS, candidate, make_report, spec

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_valid_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])  # IHDR follows the signature
    assert width >= 400 and height >= 250, f"{path.name} is {width}x{height}"
    assert len(data) > 15_000, f"{path.name} has only {len(data)} bytes"
    pixels = imread(path)
    assert pixels.shape[:2] == (height, width)
    # Not a blank canvas: a real figure inks a visible share of its pixels (text, lines, fills).
    inked = (pixels[..., :3] < 0.9).any(axis=-1).mean()
    assert 0.02 < inked < 0.9, f"{path.name}: {inked:.1%} of pixels inked"


def test_all_plots_for_a_full_run(rendered: Path) -> None:
    plots_dir = rendered / "plots"
    assert sorted(p.name for p in plots_dir.iterdir()) == sorted(f"{n}.png" for n in PLOT_TITLES)  # no temp files
    for name in PLOT_TITLES:
        assert_valid_png(plots_dir / f"{name}.png")


def test_missing_isolated_and_gain_are_skipped_with_reasons(tmp_path: Path) -> None:
    report = make_report(gain=None)
    for c in report.candidates:
        c.isolated = None
    reasons = plot_availability(report)
    assert reasons["isolated_vs_served"] and "isolated" in reasons["isolated_vs_served"]
    assert reasons["remeasurement"] and "gain" in reasons["remeasurement"]
    plots = render_plots(report, tmp_path)
    assert set(plots) == set(PLOT_TITLES) - {"isolated_vs_served", "remeasurement"}
    for path in plots.values():
        assert_valid_png(path)


def test_one_load_level(tmp_path: Path) -> None:
    cands = [candidate(f"c{i}", fam, {"k": i}, "measured", base_ms=1.0 + i, loads=LOADS[:1], isolated_ms=0.8 + i,
                       baseline=i == 0) for i, fam in enumerate(["ort", "ort", "openvino"])]
    report = make_report(candidates=cands, baseline_id="c0", winner_id="c2", selected_id="c2")
    plots = render_plots(report, tmp_path)
    assert set(plots) == set(PLOT_TITLES)
    for path in plots.values():
        assert_valid_png(path)


def test_every_candidate_crashed(tmp_path: Path) -> None:
    cands = [candidate(f"x{i}", "ort", {"level": i}, "crashed", reason="signal 11", build_s=1.0 + i) for i in range(4)]
    report = make_report(candidates=cands, winner_id=None, selected_id=None, baseline_id=None, gain=None)
    plots = render_plots(report, tmp_path)
    assert set(plots) == {"build_cost"}
    assert_valid_png(plots["build_cost"])


def test_no_candidates_draws_nothing(tmp_path: Path) -> None:
    report = make_report(candidates=[], winner_id=None, selected_id=None, baseline_id=None, gain=None)
    assert render_plots(report, tmp_path) == {}
    assert all(reason for reason in plot_availability(report).values())


def test_gain_whose_candidates_are_unknown_still_plots(tmp_path: Path) -> None:
    # A report resumed from an older run may name a baseline that is no longer in the candidate list.
    report = make_report(baseline_id="gone")
    plots = render_plots(report, tmp_path, names=["remeasurement"])
    assert set(plots) == {"remeasurement"}
    assert_valid_png(plots["remeasurement"])


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ([("a", 1.0, 0.5), ("b", 2.0, 0.9), ("c", 2.5, 0.4)], {"a", "b"}),
        ([("a", 1.0, 0.5), ("b", 1.0, 0.5)], {"a", "b"}),  # ties dominate nobody
        ([("a", 1.0, 0.9), ("b", 2.0, 0.1), ("c", 3.0, 0.95)], {"a", "c"}),
    ],
)
def test_pareto_front(points: list[tuple[str, float, float]], front: set[str]) -> None:
    assert pareto_front(points) == front


def test_non_finite_and_tied_values_do_not_break_plots(tmp_path: Path) -> None:
    report = make_report()
    for c in report.candidates:
        if c.isolated:
            c.isolated.single_request_ms = 2.0  # all tied: Spearman's rho is undefined
    accuracy = report.candidate("c04").accuracy
    assert accuracy is not None
    accuracy.min_margin = float("inf")
    plots = render_plots(report, tmp_path, names=["isolated_vs_served", "accuracy_pareto"])
    assert set(plots) == {"isolated_vs_served", "accuracy_pareto"}
    for path in plots.values():
        assert_valid_png(path)


@pytest.mark.parametrize("metric", ["p99", "throughput"])
def test_remeasurement_plot_with_and_without_remeasured_stats(tmp_path: Path, metric: str) -> None:
    report = make_report(spec=spec(objective={"metric": metric, "load_index": 0}))
    assert report.gain is not None
    report.gain.metric = metric
    plots = render_plots(report, tmp_path / "with", names=["remeasurement"])
    assert_valid_png(plots["remeasurement"])
    report.gain.remeasured_baseline = report.gain.remeasured_winner = None  # an older run: points only
    plots = render_plots(report, tmp_path / "without", names=["remeasurement"])
    assert_valid_png(plots["remeasurement"])


def test_point_estimate_outside_its_interval_and_heavy_tails(tmp_path: Path) -> None:
    report = make_report()
    stats = report.candidate("c05").latency[0]
    assert stats.p99_ms is not None and report.gain is not None
    stats.p99_ms.low = stats.p99_ms.value * 1.01  # percentile bootstrap: the estimate may sit outside
    report.gain.ratio.high = report.gain.ratio.value * 0.99
    for window in report.candidate("c00").latency[0].windows:
        window.p99_ms *= 60  # a 300 ms tail beside 2 ms medians: drawn on a log axis
    drawn = ["latency_distribution", "latency_vs_throughput", "remeasurement", "accuracy_pareto"]
    plots = render_plots(report, tmp_path, names=drawn)
    assert set(plots) == set(drawn)
    for path in plots.values():
        assert_valid_png(path)


def test_unknown_plot_name_is_rejected(report: RunReport, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown plot"):
        render_plots(report, tmp_path, names=["pie_chart"])
