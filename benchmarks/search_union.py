"""Candidate generation at scale: mixed search over several compiler families on a real-size CNN.

Runs `gpt-triton tune` (no promotion) on examples/models/resnet_cnn.onnx with examples/resnet_search.yaml
and prints, from the run's report: how many distinct candidates were built, deployed and measured (none
filtered by heuristic), the wall time, the best candidate of each family, and the union's winner against
the best single-family winner.

    python benchmarks/search_union.py [--model PATH] [--spec PATH] [--out RUN_DIR]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from gpt_triton.core.spec import load_spec
from gpt_triton.pipeline import Progress, TuneOptions, tune
from gpt_triton.report import per_family_summary
from gpt_triton.testing.models import build_resnet_cnn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("examples/models/resnet_cnn.onnx"))
    parser.add_argument("--spec", type=Path, default=Path("examples/resnet_search.yaml"))
    parser.add_argument("--out", type=Path, default=Path("runs/search_union"))
    args = parser.parse_args()
    if not args.model.exists():
        build_resnet_cnn(args.model)
    started = time.monotonic()
    report = tune(TuneOptions(model=args.model, spec=load_spec(args.spec), out=args.out, promote=False),
                  Progress(lambda text: None))
    wall = time.monotonic() - started
    statuses = Counter(c.status for c in report.candidates)
    distinct = len({c.id for c in report.candidates})
    print(f"model {args.model} ({report.model.size_bytes / 1e6:.1f} MB), search {report.spec.search.mode}")
    print(f"candidates: {distinct} distinct; by status: {dict(statuses)}")
    print(f"deployed and measured or screened: {sum(c.deploy is not None for c in report.candidates)}")
    print(f"wall time: {wall / 60:.1f} min (budget {report.spec.time_budget_s} s)")
    summary = per_family_summary(report)
    for row in summary.families:
        print(row)
    if summary.union is not None:
        print(summary.union.text())
    if report.gain:
        g = report.gain
        print(f"re-measured gain over the default route: {g.ratio.value:.3f} [{g.ratio.low:.3f}, {g.ratio.high:.3f}], "
              f"selection estimate {g.selection_estimate_ratio}")


if __name__ == "__main__":
    main()
