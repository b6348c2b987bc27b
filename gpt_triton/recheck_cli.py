"""``gpt-triton recheck RUN_DIR``: perf_analyzer, run as users run it, on a finished tune's pair."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "recheck", help="measure a finished tune's baseline and pick again with perf_analyzer at its defaults",
        description="Serve RUN_DIR's baseline and selected candidate again and run NVIDIA's perf_analyzer on each, "
        "at its own defaults (-p 5000, three stable windows, the p99 it prints), once a model a round, the order "
        "flipping every round; print its p50 and p99 gains paired by round beside the tune's re-measured gain and "
        "write them to RUN_DIR/rechecks/<time>.json, with perf_analyzer's gain pooled over this and the earlier "
        "rechecks alike (same pair, server and -p; a random-effects mean). A gain describes the minutes it was "
        "measured in: recheck it later, again, or on the server you deploy to.",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="directory written by `gpt-triton tune`")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of one perf_analyzer run per model (default 6)")
    parser.add_argument("--interval-ms", type=int, default=5000, help="perf_analyzer's -p (its default: 5000)")
    parser.add_argument("--retries", type=int, default=1,
                        help="a perf_analyzer run that finds no stable measurement is run again in its place up to "
                        "this many times, as a user would, before its round is left out (default 1; 0: never)")
    parser.add_argument("--triton-url", metavar="HOST:PORT",
                        help="run on this Triton's gRPC endpoint (explicit model control: the pair is loaded and "
                        "unloaded there) instead of an embedded one")
    parser.add_argument("--models", nargs=2, metavar=("BASELINE", "WINNER"),
                        help="with --triton-url: models that server already serves (NAME or NAME:VERSION), "
                        "measured instead of loading the run's artifacts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpt_triton.recheck import recheck

    record, path = recheck(args.run_dir, rounds=args.rounds, interval_ms=args.interval_ms, triton_url=args.triton_url,
                           models=tuple(args.models) if args.models else None, retries=args.retries)
    for line in record.lines():
        print(line)
    print(f"wrote {path}")
    return 0
