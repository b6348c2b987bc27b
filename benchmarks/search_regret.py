"""What does racing cost in selection quality, and what does it save? (a benchmark script, not a test)

Deploys N ONNX Runtime variants of the bundled conv+attention (or ResNet-style) model (graph optimisation level x intra-op
threads x spinning, served by the python-backend adapter) on one embedded Triton, then measures them
twice with :class:`gpt_triton.measure.harness.Measurer`, in one run:

* exhaustively: racing off, every candidate gets ``--windows`` windows;
* with racing: one full window each, then after every interleaved round the candidates clearly slower
  than the leader (drift pooled across all candidates, Bonferroni over comparisons and rounds) are
  dropped; contenders continue until stable, separated or ``--windows``.

It prints the regret of the racing winner against the exhaustive best (both valued by the exhaustive
measurement, the better-sampled one), whether the racing winner is inside the exhaustive tie set, and
the fraction of windows and wall time racing used.

    .venv/bin/python benchmarks/search_regret.py [--window 0.5] [--windows 6] [--metric p50]
    .venv/bin/python benchmarks/search_regret.py --model resnet --window 1 --windows 7   # issue 4's target
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

import numpy as np

from gpt_triton.deploy import write_model
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.stats import additive_fit
from gpt_triton.model_info import inspect_model, resolve_shapes, sha256_file
from gpt_triton.records import Candidate
from gpt_triton.routes._base import Artifact, Route
from gpt_triton.select import select
from gpt_triton.server import EmbeddedTriton
from gpt_triton.spec import MeasureSpec, ObjectiveSpec
from gpt_triton.testing.models import build_conv_attention, build_resnet_cnn

LEVELS = ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"]
THREADS = [0, 1, 2]
SPINNING = ["0", "1"]


def candidates(model_path: Path) -> list[Candidate]:
    sha = sha256_file(model_path)
    out = []
    for i, (level, threads, spin) in enumerate(itertools.product(LEVELS, THREADS, SPINNING)):
        knobs = {"graph_optimization_level": level, "intra_op_num_threads": threads, "allow_spinning": spin}
        route = Route(family="onnxruntime", knobs=knobs)
        options = {"session_options": {"graph_optimization_level": level, "intra_op_num_threads": threads},
                   "config_entries": {"session.intra_op.allow_spinning": spin}}
        art = Artifact(family="onnxruntime", runtime="onnxruntime", route=route, directory=str(model_path.parent),
                       files=[model_path.name], runtime_options=options, sha256=sha,
                       size_bytes=model_path.stat().st_size)
        out.append(Candidate(id=f"c{i:02d}", family="onnxruntime", route=route, serving=Route(family="serving"),
                             artifact=art, status="built", is_baseline=(i == 0)))
    return out


def run(measurer: Measurer, cands: list[Candidate]) -> tuple[float, int, list[str]]:
    start, windows_before = time.monotonic(), measurer._windows_run
    log = measurer.measure(cands)
    return time.monotonic() - start, measurer._windows_run - windows_before, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=0.5, help="seconds per window")
    parser.add_argument("--windows", type=int, default=6, help="windows per candidate when exhaustive (= max_windows)")
    parser.add_argument("--metric", default="p50", choices=["p50", "p90", "p99", "mean"])
    parser.add_argument("--race-after", type=int, default=1, help="rounds before racing may drop (>= 1)")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N candidates (0: all 24)")
    parser.add_argument("--model", default="conv_attention", choices=["conv_attention", "resnet"],
                        help="resnet (~19 ms/inference) spreads the variants wider than conv_attention (~2 ms)")
    args = parser.parse_args()
    objective = ObjectiveSpec(metric=args.metric)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build = build_resnet_cnn if args.model == "resnet" else build_conv_attention
        model_path = build(root / "model" / "model.onnx")
        info = inspect_model(model_path)
        shapes = resolve_shapes(info, {})
        rng = np.random.default_rng(0)
        requests = [{name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
                    for _ in range(8)]
        base = candidates(model_path)
        if args.limit:
            base = base[: args.limit]
        with EmbeddedTriton(repository=root / "repo", workdir=root / "work") as server:
            t0 = time.monotonic()
            for cand in base:
                assert cand.artifact is not None
                cand.deploy = write_model(root / "repo", f"regret_{cand.id}", info, shapes, cand.artifact,
                                          cand.serving, "python")
                server.load(root / "repo" / cand.deploy.model_name)
                cand.status = "deployed"
            print(f"deployed {len(base)} candidates in {time.monotonic() - t0:.0f} s", flush=True)
            exhaustive = [c.model_copy(deep=True) for c in base]
            racing = [c.model_copy(deep=True) for c in base]
            common = dict(warmup_s=0.3, window_s=args.window, window_min_requests=20, max_windows=args.windows,
                          bootstrap_resamples=1000)
            ex_spec = MeasureSpec.model_validate(dict(common, racing=False, min_windows=args.windows))
            race_spec = MeasureSpec.model_validate(dict(common, racing=True, min_windows=3))
            ex_s, ex_w, _ = run(Measurer(server.grpc_url, requests, ex_spec, objective, seed=1), exhaustive)
            race_s, race_w, race_log = run(Measurer(server.grpc_url, requests, race_spec, objective, seed=2,
                                                      race_after=args.race_after), racing)

    def everyone(_c: Candidate) -> tuple[bool, str]:
        return True, ""

    best = select(exhaustive, objective, everyone)
    won = select(racing, objective, everyone)
    assert best.winner_id and won.winner_id
    truth = best.values  # exhaustive estimates: the better-sampled valuation of every candidate
    fastest = min(truth, key=truth.__getitem__)
    regret = truth[won.winner_id] / truth[fastest] - 1.0
    dropped = sum(1 for line in race_log if line.startswith("racing: dropped"))
    for line in race_log:
        if line.startswith("racing: dropped") or "separated" in line or "stable" in line:
            print("  " + line)
    print(f"model {args.model}; objective: {args.metric} at concurrency 1; {len(base)} candidates; "
          f"windows of {args.window} s")
    print(f"exhaustive: {ex_w} windows, {ex_s:.0f} s; fastest {fastest} {truth[fastest]:.3f} ms; "
          f"selected {best.winner_id} (ties: {', '.join(best.ties) or 'none'})")
    print(f"racing:     {race_w} windows, {race_s:.0f} s; dropped {dropped}; selected {won.winner_id} "
          f"(ties: {', '.join(won.ties) or 'none'})")
    in_ties = won.winner_id == best.winner_id or won.winner_id in best.ties or won.winner_id == fastest
    print(f"regret of the racing winner vs the exhaustive fastest: {100 * regret:.1f}% "
          f"({'inside' if in_ties else 'outside'} the exhaustive tie set)")
    print(f"time used by racing: {race_w / ex_w:.2f} of the windows, {race_s / ex_s:.2f} of the wall time")
    # Calibration of racing's noise model on the exhaustive windows: the residual of the additive
    # candidate + round fit (drift removed) vs the raw between-window spread (drift included).
    y = {c.id: {r: float(np.log(getattr(w, f"{args.metric}_ms"))) for r, w in enumerate(c.latency[0].windows)}
         for c in exhaustive if c.latency and c.latency[0].windows and args.metric != "mean"}
    if y:
        mu, drift, rss, df = additive_fit(y)
        raw = np.mean([np.var(list(rows.values()), ddof=1) for rows in y.values() if len(rows) > 1])
        print(f"exhaustive windows: per-window noise {100 * np.sqrt(rss / max(df, 1)):.1f}% after removing the "
              f"shared round drift (range {100 * (max(drift.values()) - min(drift.values())):.1f}%), "
              f"{100 * np.sqrt(raw):.1f}% without")
    for cand in sorted(exhaustive, key=lambda c: truth.get(c.id, float("inf")))[:5]:
        print(f"  {cand.id} {truth.get(cand.id, float('nan')):.3f} ms  {cand.route.key()}")


if __name__ == "__main__":
    main()
