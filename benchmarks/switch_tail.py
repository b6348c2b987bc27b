"""Does what ran just before a window move its p99, and for which client? (a benchmark script, not a test; issue 16)

In a tune's re-measure each client measures the contenders in turn, so a window on the baseline always
follows that client's windows on the other contenders. On conv_attention, whose baseline (ONNX Runtime's
defaults) spins its threads, the built-in client's p99 gain over that baseline read 1.08-1.26x
perf_analyzer's in every cross-checked tune. Here one embedded Triton serves a run's re-measure
contenders, and each round measures the baseline (``--subject``) with both clients, each window after one
of four things done by the same client: a window on each other contender (as in the re-measure), a
window on the subject itself (as if it were served on its own), an idle gap (``--idle-s``), or the other
contenders' windows and then a short uncounted window on the subject (``--warm-s``: a warm-up). The eight
(client, before) conditions run in an order that rotates every round. Printed, paired by round
(geometric mean, t interval: gpt_triton.measure.paired.log_ratio_interval): built-in over perf_analyzer
window p99 and p50 under each "before", and each client's p99 after the others and after idle over its
p99 after itself.

    .venv/bin/python benchmarks/switch_tail.py --run-dir RUN [--rounds 24] [--idle-s 3] [--warm-s 0.25] [--subject ID]

RUN is a tune's run directory: its report names the contenders (``--others`` overrides: the candidate ids
of the other contenders, comma-separated) and its calibration.npz holds the tuning split's inputs, the
payloads both clients send.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

from gpt_triton.core.measurements import LoadProfile, WindowResult
from gpt_triton.core.records import RunReport
from gpt_triton.core.routes import BuildContext
from gpt_triton.measure.clients import BuiltinClient, LoadClient
from gpt_triton.measure.paired import log_ratio_interval, round_log_ratios
from gpt_triton.measure.perf_analyzer import PerfAnalyzerClient, find_perf_analyzer
from gpt_triton.routes._common import iter_calibration

sys.path.insert(0, str(Path(__file__).parent))
from served import serving  # noqa: E402

WINDOW_S, MIN_REQUESTS, SETTLE_S = 0.75, 500, 0.05  # examples/demo.yaml's windows, the built-in client's settle
CLIENTS = ("builtin", "perf_analyzer")
BEFORE = ("others", "self", "idle", "others+warm")


def contenders(report: RunReport, subject: str, others: str | None) -> list[str]:
    """The other contenders, then the subject: the order the re-measure measures them in."""
    if others:
        ids = [x for x in others.split(",") if x]
    else:  # the re-measure's pair; its runner-up is only in the log, so name it with --others
        ids = [x for x in (report.selected_id, report.winner_id) if x and x != subject]
    return [*dict.fromkeys(ids), subject]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--warm-s", type=float, default=0.25)
    parser.add_argument("--subject", help="the candidate measured after each 'before' (default: the run's baseline)")
    parser.add_argument("--others", help="the other contenders' ids, comma-separated (default: the run's selected)")
    args = parser.parse_args()
    report = RunReport.model_validate_json((args.run_dir / "report.json").read_text())
    subject = args.subject or report.baseline_id
    if subject is None:
        raise SystemExit(f"{args.run_dir}: the report names no baseline; pass --subject")
    ids = contenders(report, subject, args.others)
    if len(ids) < 2:
        raise SystemExit(f"{args.run_dir}: no other contender to measure before {subject}; pass --others")
    # The run's tuning split, one request each, as the int8 builds read it.
    context = BuildContext(model=report.model, shapes=report.shapes, calibration_npz=str(args.run_dir / "calibration.npz"))
    requests = list(iter_calibration(context, limit=1 << 30))
    tool = find_perf_analyzer(required=True)
    assert tool is not None
    load = LoadProfile(concurrency=1)
    results: dict[tuple[str, str], list[WindowResult]] = {}
    with serving({cid: report.candidate(cid) for cid in ids}, report.model, report.shapes, "m") as (server, names):
        clients: dict[str, LoadClient] = {"builtin": BuiltinClient(),
                                          "perf_analyzer": PerfAnalyzerClient(tool, "grpc", server.http_url)}

        def window(client: str, cid: str, seed: int, length_s: float = WINDOW_S, least: int = MIN_REQUESTS) -> WindowResult:
            sample = clients[client].window(server.grpc_url, names[cid], requests, load, length_s, least,
                                            metrics_url=server.metrics_url, seed=seed, payload_start=seed * 131,
                                            settle_s=SETTLE_S)  # perf_analyzer's process start is its settle
            return sample.result

        windows_before = {"others": ids[:-1], "self": [subject], "idle": [], "others+warm": ids[:-1]}

        def before_window(client: str, before: str, seed: int) -> None:
            if before == "idle":
                time.sleep(args.idle_s)
            for cid in windows_before[before]:
                window(client, cid, seed)
            if before == "others+warm":
                window(client, subject, seed, args.warm_s, 0)

        for client, cid in itertools.product(CLIENTS, ids):  # every model warm under both clients first
            window(client, cid, 0)
        conditions = list(itertools.product(CLIENTS, BEFORE))
        for r in range(args.rounds):
            k = r % len(conditions)
            for client, before in conditions[k:] + conditions[:k]:
                before_window(client, before, r)
                results.setdefault((client, before), []).append(window(client, subject, r))
            print(f"round {r + 1} of {args.rounds}", flush=True)
    print(f"\nsubject {subject} after: others {', '.join(ids[:-1])}; self; idle {args.idle_s:g} s; others and a "
          f"{args.warm_s:g} s warm-up on the subject; {args.rounds} rounds")

    def ratio(top: list[WindowResult], bottom: list[WindowResult], stat: str) -> str:
        found = log_ratio_interval(round_log_ratios([getattr(w, stat) for w in top], [getattr(w, stat) for w in bottom]))
        return f"{found.value:.3f} [{found.low:.3f}, {found.high:.3f}]"

    for before in BEFORE:
        b, pa = results[("builtin", before)], results[("perf_analyzer", before)]
        print(f"after {before:11s}: built-in / perf_analyzer window p99 {ratio(b, pa, 'p99_ms')}, p50 {ratio(b, pa, 'p50_ms')}; "
              f"median window p99 {np.median([w.p99_ms for w in b]):.3f} / {np.median([w.p99_ms for w in pa]):.3f} ms")
    for client in CLIENTS:
        own = results[(client, "self")]
        print(f"{client}: p99 over its p99 after self: after others {ratio(results[(client, 'others')], own, 'p99_ms')}, "
              f"after idle {ratio(results[(client, 'idle')], own, 'p99_ms')}, "
              f"after others and a warm-up {ratio(results[(client, 'others+warm')], own, 'p99_ms')}")


if __name__ == "__main__":
    main()
