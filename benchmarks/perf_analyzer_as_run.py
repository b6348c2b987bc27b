"""Does a tune's gain survive perf_analyzer run as users run it? (a benchmark script, not a test; issue 16)

The other agreement checks (``perf_analyzer_agreement.py``, the tune's own ``measure.cross_check``) put
perf_analyzer behind the tuner's seam: one short run per window, its per-request latencies formed into the
tuner's statistic. A user does not read that. A user runs ``perf_analyzer -m MODEL --concurrency-range 1``
on each version and reads the p99 it prints, which perf_analyzer forms its own way: time windows of
1.2 x ``-p`` (5000 ms by default), repeated until the last three agree within ``--stability-percentage``
(10%), then ONE p99 over the three windows' requests merged (InferenceProfiler::MergePerfStatusReports in
NVIDIA's sources): a pooled p99 of some 18 s of traffic.

Here one embedded Triton serves a finished tune's baseline and selected candidate, and each round runs
perf_analyzer once on each, in that default way (the run's tuning-split inputs as ``--input-data``, its
CSV read for the p50 and p99 it reports), the order flipping every round. Printed: each round's figures,
perf_analyzer's gain paired by round (geometric mean, t interval), and against it the tune's re-measured
gain (report.json: the statistic it was formed with) and the ratio of the tune's own pooled figures
(``baseline_ms / winner_ms``, the statistic perf_analyzer's p99 is), each with the two widths added.

    .venv/bin/python benchmarks/perf_analyzer_as_run.py RUN_DIR [RUN_DIR ...] [--rounds 6] [--interval-ms 5000]

Run it from the directory the tune ran in: a tune given a relative ``--out`` (``make demo``'s ``runs/demo``)
records its artifacts' folders relative to that directory.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

sys.path.insert(0, str(Path(__file__).parent))
from perf_analyzer_agreement import from_run, verdict  # noqa: E402
from served import random_requests, serving  # noqa: E402

from gpt_triton.core.cross_check import agreement_interval  # noqa: E402
from gpt_triton.core.errors import GptTritonError  # noqa: E402
from gpt_triton.core.measurements import Interval  # noqa: E402
from gpt_triton.core.model_info import inspect_model  # noqa: E402
from gpt_triton.core.records import RunReport  # noqa: E402
from gpt_triton.core.routes import BuildContext  # noqa: E402
from gpt_triton.measure.paired import log_ratio_interval, round_log_ratios  # noqa: E402
from gpt_triton.measure.perf_analyzer import PerfAnalyzer, find_perf_analyzer, input_data, read_csv_ms  # noqa: E402
from gpt_triton.routes._common import iter_calibration  # noqa: E402

ROLES = ("baseline", "winner")


def as_users_run_it(tool: PerfAnalyzer, grpc_url: str, model: str, data: Path, batch: int, interval_ms: int,
                    folder: Path) -> tuple[float, float] | None:
    """One perf_analyzer run with its own measurement defaults but ``-p``; (p50, p99) in ms as its CSV
    reports them, or None when it found no stable measurement (it says so and exits non-zero)."""
    report = folder / "report.csv"
    report.unlink(missing_ok=True)
    done = tool.run(["-m", model, "-u", grpc_url, "-i", "grpc", "-b", str(batch), "--concurrency-range", "1:1",
                     "-p", str(interval_ms), "--input-data", str(data), "-f", str(report)],
                    timeout_s=interval_ms / 1000 * 1.2 * 12 + 120)
    p50, p99 = read_csv_ms(report, "p50"), read_csv_ms(report, "p99")
    if done.returncode != 0 or p50 is None or p99 is None:
        last = (done.stderr or done.stdout).strip().splitlines()
        print(f"    perf_analyzer on {model}: exit {done.returncode}: {last[-1] if last else 'no output'}")
        return None
    return p50, p99


def against(label: str, tune: Interval, pa: Interval) -> str:
    """tune / perf_analyzer with an interval that adds both widths (two runs, normal on the log scale)."""
    ratio, _ = agreement_interval(tune, pa)
    return (f"{label} {tune.value:.3f} [{tune.low:.3f}, {tune.high:.3f}] / perf_analyzer's {pa.value:.3f}: "
            f"{ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] ({verdict(ratio.value, ratio.low, ratio.high)})")


def one_run(run_dir: Path, tool: PerfAnalyzer, rounds: int, interval_ms: int) -> None:
    report = RunReport.model_validate_json((run_dir / "report.json").read_text())
    model_path, baseline, winner = from_run(run_dir)
    info = inspect_model(model_path)
    calibration = run_dir / "calibration.npz"
    if calibration.is_file():  # what the tune sent: its tuning split, one request each
        context = BuildContext(model=report.model, shapes=report.shapes, calibration_npz=str(calibration))
        requests = list(iter_calibration(context, limit=64))
    else:
        requests = random_requests(report.shapes)
    figures: dict[str, list[tuple[float, float]]] = {role: [] for role in ROLES}
    print(f"\n{run_dir}: baseline {baseline.id} vs {winner.id}, {rounds} rounds of one perf_analyzer run each "
          f"(-p {interval_ms}, its default stability), {len(requests)} inputs", flush=True)
    with serving({"baseline": baseline, "winner": winner}, info, report.shapes, "as-run") as (server, names), \
            tempfile.TemporaryDirectory(prefix="as-run-pa-") as tmp:
        folder = Path(tmp)
        config = grpcclient.InferenceServerClient(server.grpc_url).get_model_config(names["baseline"], as_json=True)
        doc, batch = input_data(requests, int(config["config"].get("max_batch_size", 0)) > 0)
        (folder / "input.json").write_text(json.dumps(doc))
        for role in ROLES:  # one short run each first: the models' first requests are not what is compared
            as_users_run_it(tool, server.grpc_url, names[role], folder / "input.json", batch, 1000, folder)
        for r in range(rounds):
            found = {}
            for role in (ROLES if r % 2 == 0 else ROLES[::-1]):
                found[role] = as_users_run_it(tool, server.grpc_url, names[role], folder / "input.json", batch,
                                              interval_ms, folder)
            if found["baseline"] is None or found["winner"] is None:
                print(f"  round {r + 1}: left out (no stable measurement on a side)", flush=True)
                continue
            for role in ROLES:
                figures[role].append(found[role])  # type: ignore[arg-type]
            print(f"  round {r + 1}: baseline p50 {found['baseline'][0]:.3f} p99 {found['baseline'][1]:.3f} ms; "
                  f"winner p50 {found['winner'][0]:.3f} p99 {found['winner'][1]:.3f} ms", flush=True)
    if len(figures["baseline"]) < 2:
        print("  fewer than two rounds on both sides: no interval")
        return
    gains = {}
    for k, stat in enumerate(("p50", "p99")):
        gains[stat] = log_ratio_interval(round_log_ratios([f[k] for f in figures["baseline"]],
                                                          [f[k] for f in figures["winner"]]))
        iv = gains[stat]
        print(f"  perf_analyzer's {stat} gain, paired by round: {iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}] "
              f"({len(figures['baseline'])} rounds)")
    gain = report.gain
    if gain is None or gain.metric not in gains:
        print("  the tune has no p50/p99 gain to compare")
        return
    pa = gains[gain.metric]
    print("  " + against(f"the tune's re-measured {gain.metric} gain ({gain.statistic})", gain.ratio, pa))
    # The tune's pooled figures carry no interval of their own in the report: the re-measured one's width.
    pooled = gain.baseline_ms / gain.winner_ms
    width = gain.ratio.high / gain.ratio.low
    as_pooled = Interval(value=pooled, low=pooled / np.sqrt(width), high=pooled * np.sqrt(width))
    print("  " + against(f"the tune's pooled figures {gain.baseline_ms:.3f} / {gain.winner_ms:.3f} ms", as_pooled, pa)
          + " (the re-measure's width lent to it)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--interval-ms", type=int, default=5000, help="perf_analyzer's -p (its default: 5000)")
    args = parser.parse_args()
    tool = find_perf_analyzer(required=True)
    assert tool is not None
    print(f"{tool.version()} at {tool.binary}")
    for run_dir in args.run_dirs:
        try:
            one_run(run_dir, tool, args.rounds, args.interval_ms)
        except (GptTritonError, OSError) as exc:  # a missing report or artifact: one line, exit 1
            raise SystemExit(f"{run_dir}: {exc}") from None


if __name__ == "__main__":
    main()
