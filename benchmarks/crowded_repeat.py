"""Does measuring a crowded window again keep a gain where a quiet machine puts it? (a benchmark script, not a
test; issue 16)

``measure.repeat_crowded`` (gpt_triton/measure/crowding.py) sets aside a counted window in which other
processes used clearly more CPU than usual and measures it again. This script asks what that buys on the
pair conv_attention tunes select (ONNX Runtime defaults, whose threads spin while they wait: ``a``, the
baseline; spinning off: ``b``; ``benchmarks/p99_spread.py``), served on one embedded Triton after a
burn-in. Each run measures the pair three times with the tuner's own ``Measurer.remeasure`` (the re-measure
design: ``remeasure_windows`` rounds, then the pair alone up to ``gain_max_windows`` windows a side, p99
windows of 500 requests), in a rotating order:

* ``quiet``: nothing else runs;
* ``counted``: an outside process (``gpt_triton.testing.co_tenant``) spins for ``--burst-s`` every
  ``--period-s``, and every window is counted as it came (``repeat_crowded`` 0);
* ``repeated``: the same bursts, the windows they crowd measured again (the default, 0.25).

Printed per run and condition: the p99 gain a/b over the counted windows, the windows set aside and what
the tuner read of other processes; then per condition the geometric mean over runs, its distance from
quiet's, and the run-to-run spread of the log gain.

    .venv/bin/python benchmarks/crowded_repeat.py [--runs 3] [--burst-s 4] [--period-s 20] [--windows 24]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.perf_analyzer_agreement import BUILDERS, ort_candidate  # noqa: E402
from gpt_triton.core.model_info import inspect_model, resolve_shapes  # noqa: E402
from gpt_triton.core.outcomes import apply_outcomes  # noqa: E402
from gpt_triton.core.records import Candidate  # noqa: E402
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec  # noqa: E402
from gpt_triton.deploy import deploy_candidates  # noqa: E402
from gpt_triton.measure.crowding import MAX_IN_A_ROW, RepeatCrowded, crowded_margin  # noqa: E402
from gpt_triton.measure.harness import Measurer  # noqa: E402
from gpt_triton.measure.perf_analyzer import load_client  # noqa: E402
from gpt_triton.server import EmbeddedTriton  # noqa: E402
from gpt_triton.testing.co_tenant import co_tenant  # noqa: E402

CONDITIONS = ("quiet", "counted", "repeated")


@contextmanager
def bursts(burst_s: float, period_s: float, on: bool) -> Iterator[None]:
    """An outside process spinning ``burst_s`` of every ``period_s`` while the block runs (nothing if not ``on``)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(period_s - burst_s):
            with co_tenant(1):
                stop.wait(burst_s)

    thread = threading.Thread(target=loop, daemon=True)
    if on:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if on:
            thread.join()


def one_condition(server: EmbeddedTriton, cands: list[Candidate], requests: list, spec: MeasureSpec,
                  condition: str, args: argparse.Namespace, seed: int) -> tuple[float, int, float]:
    """(p99 gain a/b, windows set aside, mean cores of other processes over the counted windows)."""
    client = load_client("builtin")
    if condition == "repeated":
        client = RepeatCrowded(client, 0.25, args.margin_cores)
    m = Measurer(server.grpc_url, requests, spec, ObjectiveSpec(metric="p99"), seed=seed, client=client)
    with bursts(args.burst_s, args.period_s, on=condition != "quiet"):
        results = m.remeasure(cands, ("a", "b"), [])
    gain = float(np.percentile(results["a"].latencies_ms, 99) / np.percentile(results["b"].latencies_ms, 99))
    others = [w.foreign_cores for w in m.counted if w.foreign_cores is not None]
    return gain, len(m.set_aside), float(np.mean(others)) if others else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="conv_attention", choices=sorted(BUILDERS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burst-s", type=float, default=4.0)
    parser.add_argument("--period-s", type=float, default=20.0)
    parser.add_argument("--windows", type=int, default=24, help="gain_max_windows: windows a side (default 24)")
    parser.add_argument("--margin-cores", type=float, default=None,
                        help="cores above the usual that crowd a window (default: the tuner's, crowded_margin())")
    args = parser.parse_args()
    spec = MeasureSpec(window_s=1.0, burn_in_s=0.0, remeasure_windows=8, gain_precision=0.001,
                       gain_max_windows=args.windows, warmup_s=1.0)
    gains: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    with tempfile.TemporaryDirectory(prefix="crowded-repeat-") as scratch:
        root = Path(scratch)
        model = BUILDERS[args.model](root / f"{args.model}.onnx")
        info = inspect_model(model)
        shapes = resolve_shapes(info, {})
        rng = np.random.default_rng(0)
        requests = [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(16)]
        cands = [ort_candidate("a", model, "ORT_ENABLE_ALL", "1", True),
                 ort_candidate("b", model, "ORT_ENABLE_ALL", "0", False)]
        with EmbeddedTriton(repository=root / "repo", workdir=root / "work") as server:
            apply_outcomes(cands, deploy_candidates(server, root / "repo", cands, info, shapes))
            if any(c.status != "deployed" for c in cands):
                raise SystemExit("; ".join(f"{c.id}: {c.reason}" for c in cands if c.status != "deployed"))
            Measurer(server.grpc_url, requests, spec.model_copy(update={"burn_in_s": 30.0}),
                     ObjectiveSpec(metric="p99")).burn_in(cands, [], "burn-in")
            for run in range(args.runs):
                order = CONDITIONS[run % 3:] + CONDITIONS[:run % 3]
                line = []
                for condition in order:
                    gain, aside, others = one_condition(server, cands, requests, spec, condition, args,
                                                        seed=run * 10 + CONDITIONS.index(condition))
                    gains[condition].append(gain)
                    line.append(f"{condition}: p99 a/b {gain:.3f}, {aside} set aside, others {others:.2f} cores")
                print(f"run {run + 1}: " + "; ".join(line), flush=True)
    quiet = float(np.exp(np.mean(np.log(gains["quiet"]))))
    margin = crowded_margin() if args.margin_cores is None else args.margin_cores
    per_side = max(args.windows, spec.remeasure_windows)  # the remeasure_windows rounds always run
    print(f"\n{args.runs} runs, {per_side} windows a side, an outside core spinning {args.burst_s:g} s of every "
          f"{args.period_s:g} s in 'counted' and 'repeated' (crowded: {margin:.3g} cores above the usual, at most "
          f"{MAX_IN_A_ROW} repeats in a row):")
    for condition in CONDITIONS:
        logs = np.log(gains[condition])
        mean = float(np.exp(np.mean(logs)))
        spread = float(np.std(logs, ddof=1)) if len(logs) > 1 else float("nan")
        print(f"  {condition:9s} p99 a/b {mean:.3f} (geometric mean), {mean / quiet - 1:+.1%} from quiet, "
              f"run-to-run sd of the log gain {spread:.3f}")


if __name__ == "__main__":
    main()
