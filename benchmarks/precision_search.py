"""Precision searched per layer group: a mixed candidate feasible where whole-graph int8 is not, and faster
than the best full-precision route, measured side by side in one run.

Runs `gpt-triton tune` (no promotion) on examples/models/precision_mlp.onnx with its confidently classified
reference (examples/precision_model.py builds both when missing) and examples/precision_search.yaml, and prints
from the run's report: each candidate's precision, kept groups, tuning-split verdict and p99; the precision
search's probes and time; the best mixed candidate against the best fp32 candidate (p99 ratio of the search's
interleaved windows); the winner and its held-out verdict.

    python benchmarks/precision_search.py [--out RUN_DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the task metric examples.task_metrics:top1_agreement is imported by path
sys.path.insert(0, str(ROOT / "examples"))

from precision_model import build_precision_mlp, build_reference  # noqa: E402

from gpt_triton.core.objective import measured_value  # noqa: E402
from gpt_triton.core.records import Candidate  # noqa: E402
from gpt_triton.core.spec import load_spec  # noqa: E402
from gpt_triton.pipeline import Progress, TuneOptions, tune  # noqa: E402

REDUCED = {("onnxruntime", "precision"): ("int8_static", "fp16", "int8_dynamic"), ("openvino", "quantization"): ("int8",)}


def lowered(candidate: Candidate) -> bool:
    return any(candidate.family == fam and candidate.route.knobs.get(knob) in values
               for (fam, knob), values in REDUCED.items())


def label(candidate: Candidate) -> str:
    knobs = candidate.route.knobs
    precision = knobs.get("precision") or ("int8" if knobs.get("quantization") == "int8" else "f32")
    kept = knobs.get("fp32_groups") or []
    return f"{candidate.family} {precision}" + (f" keep[{', '.join(kept)}]" if kept else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/precision_search"))
    args = parser.parse_args()
    model = ROOT / "examples/models/precision_mlp.onnx"
    reference = ROOT / "examples/models/precision_mlp_reference.npz"
    if not model.exists():
        build_precision_mlp(model)
    if not reference.exists():
        build_reference(model, reference)
    spec = load_spec(ROOT / "examples/precision_search.yaml")
    started = time.monotonic()
    report = tune(TuneOptions(model=model, spec=spec, reference=reference, out=args.out, promote=False,
                              shapes={"x": [64, 256]}), Progress(lambda text: None))
    wall = time.monotonic() - started
    objective = spec.objective
    print(f"model {model.name}: {len(report.candidates)} candidates, wall {wall:.0f} s (budget {spec.time_budget_s:.0f} s)")
    print(f"{'candidate':44} {'status':11} {'tuning split':30} p99 ms")
    for c in report.candidates:
        acc = c.accuracy
        verdict = f"{acc.exceedances}/{acc.requests} fail, margin {acc.min_margin:.2f}" if acc else (c.reason or "-")[:30]
        p99_interval = c.latency[objective.load_index].p99_ms if c.latency else None
        p99 = p99_interval.value if p99_interval is not None else None
        print(f"{label(c):44} {c.status:11} {verdict[:30]:30} {'-' if p99 is None else f'{p99:.2f}'}")
    for line in report.decisions:
        if line.startswith("search: precision:"):
            print(line.removeprefix("search: "))
    measured = [c for c in report.candidates if c.status == "measured"]
    whole = [c for c in report.candidates if lowered(c) and not c.route.knobs.get("fp32_groups")]
    mixed = [c for c in measured if c.route.knobs.get("fp32_groups")]
    full = [c for c in measured if not lowered(c)]
    print("whole-graph reduced precision: " + ", ".join(f"{label(c)} {c.status}" for c in whole))
    if mixed and full:
        best_mixed = min(mixed, key=lambda c: measured_value(c, objective) or float("inf"))
        best_full = min(full, key=lambda c: measured_value(c, objective) or float("inf"))
        m, f = measured_value(best_mixed, objective), measured_value(best_full, objective)
        if m is not None and f is not None:
            print(f"best mixed {label(best_mixed)} p99 {m:.2f} ms vs best fp32 {label(best_full)} p99 {f:.2f} ms: "
                  f"{f / m:.2f}x faster (same run, interleaved windows)")
    if report.winner_id:
        winner = report.candidate(report.winner_id)
        held = report.heldout
        print(f"winner {label(winner)}; held-out: "
              + (f"{'passed' if held.passed else 'FAILED'} ({held.exceedances}/{held.requests} fail)" if held else "-"))
    if report.gain:
        g = report.gain
        print(f"re-measured p99 gain over the default route: {g.ratio.value:.2f} [{g.ratio.low:.2f}, {g.ratio.high:.2f}]")


if __name__ == "__main__":
    main()
