"""`gpt-triton recheck`: a finished run's pair measured again by the real perf_analyzer at its defaults.

The run directory is made as a tune leaves it (report.json, calibration.npz, built artifacts) from two real
ONNX Runtime builds of the tiny MLP; the server is a real embedded Triton, or the session's one reached by URL.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import pytest

from gpt_triton.cli import main
from gpt_triton.core.measurements import Interval, between_servers
from gpt_triton.core.model_info import inspect_model, resolve_shapes
from gpt_triton.core.recheck import Recheck, RecheckRound, hours_between, pool_rechecks
from gpt_triton.core.records import Candidate, Gain, Machine, RunReport
from gpt_triton.core.spec import TuneSpec
from gpt_triton.deploy import write_model
from gpt_triton.measure.as_run import Printed, RoundResult, paired_gains
from gpt_triton.measure.perf_analyzer import PerfAnalyzer, find_perf_analyzer
from gpt_triton.recheck import machine_words, rebased, recheck
from gpt_triton.routes import BuildContext, Route, get_family
from gpt_triton.server import EmbeddedTriton
from gpt_triton.testing.conformance.families import write_calibration
from gpt_triton.testing.models import build_tiny_mlp

needs_perf_analyzer = pytest.mark.skipif(find_perf_analyzer() is None,
                                         reason="perf_analyzer is not installed here: `make perf-analyzer`")
# -p 400: perf_analyzer's own stability rule still decides when a run ends (3 windows within 10%, the tiny MLP
# serves some 1,000 requests a window); the default 5000 would make a round 40 s.
FAST = ["--rounds", "2", "--interval-ms", "400"]


def make_run(root: Path, *, gain: bool = True, selected: str = "c01") -> Path:
    """A run directory as `gpt-triton tune --out` leaves it: ONNX Runtime's default threads against one thread,
    neither spinning. A spinning baseline fights perf_analyzer for the 2 cores: in a suite run it once found no
    stable measurement in one of the two rounds (exit 3), and the tests are about the command, not that fight."""
    run_dir = root / "run"
    model_path = build_tiny_mlp(root / "model.onnx")
    info = inspect_model(model_path)
    shapes = resolve_shapes(info, {})
    run_dir.mkdir()
    write_calibration(info, shapes, run_dir / "calibration.npz")
    context = BuildContext(model=info, shapes=shapes, calibration_npz=str(run_dir / "calibration.npz"))
    ort, serving = get_family("onnxruntime"), get_family("serving")
    default = ort.default_route(info).knobs
    routes = {"c00": Route(family="onnxruntime", knobs={**default, "allow_spinning": False}),
              "c01": Route(family="onnxruntime", knobs={**default, "intra_op_threads": 1, "allow_spinning": False})}
    candidates = [Candidate(id=cid, family="onnxruntime", route=route, serving=serving.default_route(info),
                            is_baseline=cid == "c00", status="measured",
                            artifact=ort.build(route, context, run_dir / "artifacts" / cid))
                  for cid, route in routes.items()]
    report = RunReport(
        run_id="r1", run_dir=str(run_dir), tool_version="test", created="2026-12-07T09:00:00+00:00", model=info,
        shapes=shapes, spec=TuneSpec(), machine=Machine(hostname="h", cpu="c", cores=2, memory_bytes=1),
        candidates=candidates, baseline_id="c00", selected_id=selected, winner_id=selected, status="done",
        gain=Gain(metric="p99", ratio=Interval(value=1.2, low=1.1, high=1.3), winner_ms=1.0, baseline_ms=1.2,
                  statistic="paired", significant=True) if gain else None,
    )
    (run_dir / "report.json").write_text(report.model_dump_json())
    return run_dir


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Moved after the "tune": report.json's absolute artifact folders exist nowhere, so every test reads
    them through the run directory it is given (as a run copied to another machine or mounted elsewhere)."""
    return make_run(tmp_path_factory.mktemp("recheck")).rename(tmp_path_factory.mktemp("moved") / "run")


def _copy(finished_run: Path, tmp_path: Path) -> Path:
    """A test's own copy of the finished run, to write rechecks into."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def _tritonservers() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.name() == "tritonserver"}


def _written(run_dir: Path) -> Recheck:
    files = sorted((run_dir / "rechecks").glob("*.json"))
    assert len(files) == 1 and not list((run_dir / "rechecks").glob(".*")), "one record, no temp file left"
    return Recheck.model_validate_json(files[0].read_text())


@pytest.mark.slow
@needs_perf_analyzer
def test_recheck_on_an_embedded_server_prints_and_keeps_perf_analyzers_gains(
        finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _copy(finished_run, tmp_path)
    # Two rechecks made before: one alike (pooled with this one), one with perf_analyzer's default -p (left out).
    (run_dir / "rechecks").mkdir()
    earlier = _record(None, interval_ms=400).model_copy(update={
        "run_id": "r1", "baseline_model": "c_c00_recheck", "winner_model": "c_c01_recheck", "hours_after_tune": 0.5})
    (run_dir / "rechecks" / "20200101T000000Z.json").write_text(earlier.model_dump_json())
    other = earlier.model_copy(update={"interval_ms": 5000, "gains": {"p99": Interval(value=9.0, low=8.0, high=10.0)}})
    (run_dir / "rechecks" / "20200101T000001Z.json").write_text(other.model_dump_json())
    before = _tritonservers()
    assert main(["recheck", str(run_dir), *FAST]) == 0
    out = capsys.readouterr().out
    assert "perf_analyzer's p99 gain, paired by round" in out and "of perf_analyzer's" in out
    files = sorted((run_dir / "rechecks").glob("*.json"))
    assert len(files) == 3 and not list((run_dir / "rechecks").glob(".*")), "one record more, no temp file left"
    record = Recheck.model_validate_json(files[-1].read_text())
    assert record.series is not None and record.series.rechecks == 2 and "pooled over the 2 rechecks alike" in out
    pooled, _ = between_servers([earlier.gains["p99"], record.gains["p99"]])
    assert record.series.gain == pooled and record.series.first_hours == 0.5
    assert [r.first for r in record.rounds] == ["baseline", "winner"]  # the order flips every round
    assert all(r.baseline_p99_ms and r.winner_p99_ms and r.baseline_p50_ms and r.winner_p50_ms for r in record.rounds)
    assert all(0 < r.baseline_p50_ms <= r.baseline_p99_ms for r in record.rounds if r.baseline_p50_ms and r.baseline_p99_ms)
    assert set(record.gains) == {"p50", "p99"} and record.tune_gain is not None and record.agreement is not None
    assert record.agreement.value == pytest.approx(1.2 / record.gains["p99"].value, rel=1e-6)
    assert record.triton_mode == "embedded" and record.baseline_model == "c_c00_recheck"
    assert record.requests == 8 and record.hours_after_tune > 0
    # The machine's load while perf_analyzer ran: this process tree (perf_analyzer, the embedded server) is not
    # "other processes", so on an idle machine they are well under the one core perf_analyzer alone would add.
    assert all(r.seconds and r.seconds > 0.4 and r.other_cores is not None for r in record.rounds)
    assert record.machine.startswith("other processes used ") and "over its 2 rounds" in record.machine
    assert f"while perf_analyzer ran, {record.machine}" in out
    assert _tritonservers() == before, "the embedded server is stopped"
    assert json.loads((run_dir / "report.json").read_text()) == json.loads((finished_run / "report.json").read_text())


@pytest.mark.slow
@needs_perf_analyzer
def test_recheck_on_a_users_server_loads_the_pair_there_and_leaves_the_server_running(
        finished_run: Path, tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    run_dir = _copy(finished_run, tmp_path)
    assert main(["recheck", str(run_dir), *FAST, "--triton-url", triton_server.grpc_url]) == 0
    record = _written(run_dir)
    assert record.triton_mode == "remote" and record.complete_rounds == 2
    assert record.machine.endswith("on this machine it counts among them)")
    loaded = {m["name"] for m in triton_server.client().get_model_repository_index(as_json=True).get("models", [])
              if m.get("state") == "READY"}
    assert not {"c_c00_recheck", "c_c01_recheck"} & loaded, "the pair is unloaded afterwards"
    assert triton_server.client().is_server_live()

    # Models the server already serves, named: nothing is loaded, perf_analyzer runs on them as named.
    report = RunReport.model_validate_json((run_dir / "report.json").read_text())
    for cid, name in (("c00", "prod_base"), ("c01", "prod_new")):
        cand = rebased(report.candidate(cid), report, run_dir)
        assert cand.artifact is not None
        write_model(triton_server.repository or tmp_path, name, report.model, report.shapes, cand.artifact,
                    cand.serving, "python")
        triton_server.load((triton_server.repository or tmp_path) / name)
    shutil.rmtree(run_dir / "rechecks")
    try:
        assert main(["recheck", str(run_dir), *FAST, "--triton-url", triton_server.grpc_url,
                     "--models", "prod_base", "prod_new:1"]) == 0
    finally:
        triton_server.unload_many(["prod_base", "prod_new"])
    record = _written(run_dir)
    assert (record.baseline_model, record.winner_model) == ("prod_base", "prod_new:1")


@dataclass(frozen=True)
class _Unsettling(PerfAnalyzer):
    """The real perf_analyzer, its stability steered run by run. The runs numbered in ``unsettle`` are given a
    rule no machine meets (three windows within 0.001%, three tries), so perf_analyzer itself finds no stable
    measurement and exits 2; those in ``refuse`` an option it refuses (another exit code); every other run a
    rule any three windows meet, so that a loaded CI machine cannot unsettle a run the test counts on (a suite
    run once saw a run outside ``unsettle`` fail so)."""

    unsettle: frozenset[int] = frozenset()
    refuse: frozenset[int] = frozenset()
    calls: list[list[str]] = field(default_factory=list)

    def run(self, args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        n = len(self.calls) - 1  # the first call is --version
        self.calls.append(list(args))
        extra = (["--stability-percentage", "0.001", "--max-trials", "3"] if n in self.unsettle else
                 ["--stability-percentage", "-1"] if n in self.refuse else
                 ["--stability-percentage", "1000"] if n >= 0 else [])
        return super().run([*args, *extra], timeout_s)


@pytest.mark.slow
@needs_perf_analyzer
def test_an_unsettled_perf_analyzer_run_is_run_again_in_its_place_and_other_failures_are_not(
        finished_run: Path, tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    run_dir = _copy(finished_run, tmp_path)
    real = find_perf_analyzer(required=True)
    assert real is not None
    # Runs 0-1 are the warm-ups. Round 1 (baseline first): the winner's run 3 is unsettled, run 4 takes its place.
    # Round 2 (winner first): run 5 is refused, not run again. Round 3: the baseline's runs 7 and 8 are both
    # unsettled; with one retry the round is left out. Round 4 (runs 10, 11) is whole.
    tool = _Unsettling(binary=real.binary, library_dirs=real.library_dirs, unsettle=frozenset({3, 7, 8}),
                       refuse=frozenset({5}))
    said: list[str] = []
    record, _ = recheck(run_dir, rounds=4, interval_ms=400, triton_url=triton_server.grpc_url, tool=tool, retries=1,
                        say=said.append)
    assert len(tool.calls) - 1 == 12
    first, second, third, fourth = record.rounds
    assert first.retried.startswith("winner: exit 2: ") and not first.note and first.winner_p99_ms
    assert "run again after winner: exit 2" in said[1]
    assert second.note.startswith("winner: exit 99") and not second.retried and second.winner_p99_ms is None
    assert third.note.startswith("baseline: exit 2") and third.retried.startswith("baseline: exit 2")
    assert not fourth.note and not fourth.retried
    assert record.complete_rounds == 2 and set(record.gains) == {"p50", "p99"}
    assert record.rounds_done == "2/4 (2 with a run repeated)"


def _one_line(capsys: pytest.CaptureFixture[str], *fragments: str) -> None:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, err


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, finished_run: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recheck", str(tmp_path / "nowhere")]) == 2
    _one_line(capsys, "run directory not found")
    kept = make_run(tmp_path / "kept", selected="c00")
    assert main(["recheck", str(kept)]) == 2
    _one_line(capsys, "selection kept the baseline")
    assert main(["recheck", str(finished_run), "--rounds", "1"]) == 2
    _one_line(capsys, "at least 2 rounds")
    assert main(["recheck", str(finished_run), "--interval-ms", "0"]) == 2
    _one_line(capsys, "at least 100 ms")
    assert main(["recheck", str(finished_run), "--retries", "-1"]) == 2
    _one_line(capsys, "--retries -1")
    assert main(["recheck", str(finished_run), "--models", "a", "b"]) == 2
    _one_line(capsys, "give --triton-url")
    assert main(["recheck", str(finished_run), "--triton-url", "localhost:1", "--models", "a", "b:x"]) == 2
    _one_line(capsys, "NAME:VERSION")
    assert not (finished_run / "rechecks").exists() and not (kept / "rechecks").exists()
    # A record in rechecks/ that does not read: one line before perf_analyzer or a server starts, nothing written.
    broken = tmp_path / "broken"
    shutil.copytree(finished_run, broken)
    (broken / "rechecks").mkdir()
    (broken / "rechecks" / "20261207T120000Z.json").write_text('{"run_id": "r"}')
    before = _tritonservers()
    assert main(["recheck", str(broken)]) == 2
    _one_line(capsys, "20261207T120000Z.json is not a recheck record")
    assert [p.name for p in (broken / "rechecks").iterdir()] == ["20261207T120000Z.json"] and _tritonservers() == before


@needs_perf_analyzer
def test_a_lost_artifact_or_an_unreachable_server_is_one_line(tmp_path: Path, finished_run: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _copy(finished_run, tmp_path)
    shutil.rmtree(run_dir / "artifacts" / "c01")
    before = _tritonservers()
    assert main(["recheck", str(run_dir)]) == 2
    _one_line(capsys, "c01", "artifact is gone")
    assert _tritonservers() == before and not (run_dir / "rechecks").exists()
    assert main(["recheck", str(run_dir), "--triton-url", "127.0.0.1:1"]) == 3
    _one_line(capsys, "cannot reach Triton")


def _round(first: str, base: tuple[float, float] | str, win: tuple[float, float] | str) -> RoundResult:
    def printed(x: tuple[float, float] | str) -> Printed | str:
        return x if isinstance(x, str) else Printed(p50_ms=x[0], p99_ms=x[1])
    return RoundResult(first=first, figures={"baseline": printed(base), "winner": printed(win)})


def test_a_rounds_load_weights_its_runs_by_their_seconds_and_old_records_have_none() -> None:
    result = RoundResult(first="baseline", figures={}, load={"baseline": (1.0, 0.0, 3.0), "winner": (0.0, 0.2, 1.0)})
    assert result.round_load() == pytest.approx((0.75, 0.05, 4.0))
    assert RoundResult(first="winner", figures={}).round_load() is None
    rounds = [RecheckRound(first="baseline", other_cores=0.1, steal_cores=0.0, seconds=30.0),
              RecheckRound(first="winner", other_cores=0.9, steal_cores=0.1, seconds=10.0)]
    words = machine_words(rounds, remote=False)
    assert words.startswith("other processes used 0.30 cores on average over its 2 rounds (at most 0.90; "
                            "more than 0.5 in 1), steal 0.03 cores")
    assert machine_words([RecheckRound(first="baseline")], remote=False) == ""  # written before loads were kept


def test_paired_gains_use_complete_rounds_only() -> None:
    rounds = [_round("baseline", (2.0, 4.0), (1.0, 2.0)), _round("winner", "exit 99: unstable", (1.0, 2.0)),
              _round("baseline", (2.0, 8.0), (1.0, 2.0))]
    gains = paired_gains(rounds)
    assert gains["p50"].value == pytest.approx(2.0)
    assert gains["p99"].value == pytest.approx(np.sqrt(2.0 * 4.0))  # the geometric mean of 2 and 4
    assert gains["p99"].low < gains["p99"].value < gains["p99"].high
    assert paired_gains(rounds[:2]) == {}  # one complete round gives no interval


def _record(agreement: Interval | None, z: float = 0.0, interval_ms: int = 5000) -> Recheck:
    return Recheck(created="2026-12-07T12:00:00+00:00", run_id="r", tune_created="2026-12-07T09:00:00+00:00",
                   hours_after_tune=3.0, baseline_id="c00", winner_id="c01", baseline_model="a", winner_model="b",
                   triton_mode="embedded", perf_analyzer="Perf Analyzer Version 2.41.0", interval_ms=interval_ms, requests=8,
                   rounds=[RecheckRound(first="baseline"), RecheckRound(first="winner", note="baseline: exit 99")],
                   gains={"p99": Interval(value=2.0, low=1.8, high=2.2)}, metric="p99",
                   tune_gain=Interval(value=2.0, low=1.9, high=2.1) if agreement else None, tune_statistic="paired",
                   agreement=agreement, z=z)


def test_the_verdict_names_the_side_and_whether_the_intervals_allow_it() -> None:
    assert _record(Interval(value=1.01, low=0.97, high=1.04)).lines()[-1].endswith("within 5%, its whole interval too")
    assert "reaches beyond" in _record(Interval(value=1.02, low=0.9, high=1.15)).lines()[-1]
    far = _record(Interval(value=0.8, low=0.7, high=0.9), z=-3.0).lines()[-1]
    assert "20.0% apart" in far and "perf_analyzer reads the larger gain" in far and "moved since the tune" in far
    near = _record(Interval(value=1.1, low=0.9, high=1.3), z=1.0).lines()[-1]
    assert "the tune claimed the larger gain" in near and "more rounds would tell" in near
    assert "(1 rounds)" in _record(None).lines()[0] and "nothing to set against" in _record(None).lines()[-1]
    assert _record(None).within is None and _record(Interval(value=1.0, low=1.0, high=1.0)).within
    assert hours_between("2026-12-07T09:00:00+00:00", "2026-12-07T12:30:00Z") == pytest.approx(3.5)
    assert hours_between("2026-12-07T09:00:00", "2026-12-07T10:00:00+00:00") == pytest.approx(1.0)


def test_report_md_lists_the_rechecks_and_a_bad_record_is_one_line(
        finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpt_triton.report import render_markdown

    report = RunReport.model_validate_json((finished_run / "report.json").read_text())
    text = render_markdown(report, {}, rechecks=[_record(Interval(value=0.98, low=0.72, high=1.34)), _record(None)])
    section = text.split("## Rechecked with perf_analyzer", 1)[1].split("##", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| 2026")]
    assert len(rows) == 2 and "| 3.0 |" in rows[0] and "0.980 [0.720, 1.340]" in rows[0] and rows[0].endswith("| yes |")
    assert rows[1].endswith("| - |") and "| 1/2 |" in rows[1]
    assert "Rechecked" not in render_markdown(report, {})  # no recheck, no section

    run_dir = _copy(finished_run, tmp_path)
    (run_dir / "rechecks").mkdir()
    (run_dir / "rechecks" / "20261207T120000Z.json").write_text('{"run_id": "r"}')
    assert main(["report", str(run_dir), "--no-summary"]) == 2
    _one_line(capsys, "20261207T120000Z.json is not a recheck record")
    assert not (run_dir / "report.md").exists() and not (run_dir / "plots").exists()


def _gain(value: float, low: float, high: float, **update: object) -> Recheck:
    return _record(Interval(value=1.0, low=0.9, high=1.1)).model_copy(
        update={"gains": {"p99": Interval(value=value, low=low, high=high)}, **update})


def test_rechecks_alike_pool_as_servers_do_and_the_tune_is_set_against_the_pooled_gain() -> None:
    first, second = _gain(1.9, 1.6, 2.25, hours_after_tune=0.3), _gain(1.4, 1.25, 1.55, hours_after_tune=1.4)
    series = pool_rechecks([first], second)
    assert series is not None and (series.rechecks, series.rounds) == (2, 2)
    assert (series.first_hours, series.last_hours) == (0.3, 1.4)
    pooled, spread = between_servers([first.gains["p99"], second.gains["p99"]])
    assert series.gain == pooled and spread.between_sd > 0  # 1.9 against 1.4: beyond both intervals
    assert series.agreement is not None and series.agreement.value == pytest.approx(2.0 / pooled.value)
    line = series.line(second.tune_gain, "paired")
    assert "pooled over the 2 rechecks alike (2 rounds, 0.3-1.4 h after the tune; a between-recheck sd of" in line
    assert "the tune's (paired) is" in line and "of it:" in line

    # Not alike, so left out: another -p, another server, another pair; a recheck with no p99 gain adds nothing.
    unlike = [_gain(9.0, 8.0, 10.0, interval_ms=400), _gain(9.0, 8.0, 10.0, triton_mode="remote", server="h:8001"),
              _gain(9.0, 8.0, 10.0, winner_id="c02"), second.model_copy(update={"gains": {}})]
    assert pool_rechecks(unlike, first) is None  # the first alone: nothing to pool
    again = pool_rechecks([*unlike, first, second], second)  # ``like`` among the records counts once
    assert again is not None and again.rechecks == 2 and again.gain == pooled

    # Alike and within their intervals: no between-recheck sd, and the tune within 5% of the pooled gain.
    near = pool_rechecks([_gain(2.02, 1.8, 2.25)], _gain(1.98, 1.8, 2.2))
    assert near is not None and near.spread.between_sd == 0 and near.within
    assert "no spread beyond their own intervals" in near.line() and "the tune's" not in near.line()


def test_a_record_keeps_its_series_and_prints_it_and_report_md_pools_the_latest_pair(finished_run: Path) -> None:
    from gpt_triton.report import render_markdown

    first, second = _gain(1.9, 1.6, 2.25), _gain(1.4, 1.25, 1.55)
    second.series = pool_rechecks([first], second)
    kept = Recheck.model_validate_json(second.model_dump_json())
    assert kept.series == second.series and kept.lines()[-1].startswith("pooled over the 2 rechecks alike")
    old = Recheck.model_validate_json(second.model_dump_json(exclude={"series", "server"}))  # written before them
    assert old.series is None and old.server == "" and old.alike(second)
    report = RunReport.model_validate_json((finished_run / "report.json").read_text())
    text = render_markdown(report, {}, rechecks=[first, old])
    assert "Pooled over the 2 rechecks alike" in text.split("## Rechecked with perf_analyzer", 1)[1]
    assert "Pooled over" not in render_markdown(report, {}, rechecks=[first])
