"""How long does the deploy stage take to load a tune's candidates? (a benchmark script, not a test)

One set of conv_attention candidates (ONNX Runtime and OpenVINO routes, built once) is deployed with
``gpt_triton.deploy.deploy_candidates`` on a fresh embedded Triton per round, three ways, in an order that
rotates every round:

* ``before``: Triton's default config auto-completion on, one load request at a time (the deploy stage
  until 2026-12-07);
* ``no-autocomplete``: ``--disable-auto-complete-config``, one load at a time;
* ``now``: ``--disable-auto-complete-config`` and ``TritonServer.parallel_loads`` (4) requests in flight.

Each round times the server's start, the deploy (until every candidate is loaded), the unload of all of
them and the stop, and prints the medians and each way's deploy time over ``now``'s, from the same rounds.

    .venv/bin/python benchmarks/deploy_loads.py [--rounds 3] [--candidates 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes  # noqa: E402
from gpt_triton.core.outcomes import apply_outcomes  # noqa: E402
from gpt_triton.core.records import Candidate  # noqa: E402
from gpt_triton.deploy import deploy_candidates, unload_candidates  # noqa: E402
from gpt_triton.routes import BuildContext, Route, get_family  # noqa: E402
from gpt_triton.server import EmbeddedTriton  # noqa: E402
from gpt_triton.testing.conformance.families import write_calibration  # noqa: E402
from gpt_triton.testing.models import build_conv_attention  # noqa: E402

WAYS = {"before": (True, 1), "no-autocomplete": (False, 1), "now": (False, EmbeddedTriton.parallel_loads)}


def candidates(root: Path, count: int) -> tuple[list[Candidate], ModelInfo, dict[str, list[int]]]:
    """``count`` routes of conv_attention, ONNX Runtime and OpenVINO in turn, each with other knobs."""
    info = inspect_model(build_conv_attention(root / "model.onnx"))
    shapes = resolve_shapes(info, {})
    write_calibration(info, shapes, root / "calibration.npz")
    context = BuildContext(model=info, shapes=shapes, calibration_npz=str(root / "calibration.npz"))
    serving = get_family("serving").default_route(info)
    variants: dict[str, list[dict[str, object]]] = {
        "onnxruntime": [{}, {"graph_optimization_level": "basic"}, {"intra_op_threads": 1}, {"allow_spinning": False},
                        {"execution_mode": "parallel"}],
        "openvino": [{}, {"num_streams": 2}, {"performance_hint": "THROUGHPUT"}, {"inference_precision": "f32"}],
    }
    built: list[Candidate] = []
    for index in range(count):
        family = ("onnxruntime", "openvino")[index % 2]
        knobs = variants[family][(index // 2) % len(variants[family])]
        default = get_family(family).default_route(info)
        route = Route(family=family, knobs={**default.knobs, **knobs})
        artifact = get_family(family).build(route, context, root / "artifacts" / f"c{index:02d}")
        built.append(Candidate(id=f"c{index:02d}", family=family, route=route, serving=serving, status="built",
                               artifact=artifact))
    return built, info, shapes


def one_round(way: str, built: list[Candidate], info: ModelInfo, shapes: dict[str, list[int]], root: Path) -> dict[str, float]:
    auto_complete, parallel = WAYS[way]
    server = EmbeddedTriton(root / way / "repo", workdir=root / way / "work", auto_complete_config=auto_complete)
    server.parallel_loads = parallel
    times: dict[str, float] = {}
    began = time.perf_counter()
    with server:
        times["start"] = time.perf_counter() - began
        copies = [c.model_copy(deep=True) for c in built]
        began = time.perf_counter()
        outcomes = list(deploy_candidates(server, root / way / "staging", copies, info, shapes))
        times["deploy"] = time.perf_counter() - began
        apply_outcomes(copies, outcomes)
        if failed := [c for c in copies if c.status == "failed"]:
            raise SystemExit(f"{way}: {failed[0].id} did not load: {failed[0].reason}")
        began = time.perf_counter()
        unload_candidates(server, copies)
        times["unload"] = time.perf_counter() - began
        began = time.perf_counter()
    times["stop"] = time.perf_counter() - began
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-loads-") as tmp:
        root = Path(tmp)
        built, info, shapes = candidates(root, args.candidates)
        ways = list(WAYS)
        seen: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
        for index in range(args.rounds):
            order = ways[index % len(ways):] + ways[:index % len(ways)]
            for way in order:
                seen[way].append(one_round(way, built, info, shapes, root / f"r{index}"))
                times = seen[way][-1]
                print(f"round {index + 1} {way:16s} " + " ".join(f"{k} {v:.2f} s" for k, v in times.items()), flush=True)
    print(f"\n{args.candidates} candidates of conv_attention, {args.rounds} rounds; medians:")
    now = statistics.median(t["deploy"] for t in seen["now"])
    for way in ways:
        med = {k: statistics.median(t[k] for t in seen[way]) for k in seen[way][0]}
        print(f"  {way:16s} " + " ".join(f"{k} {v:.2f} s" for k, v in med.items())
              + f"; deploy {med['deploy'] / now:.2f}x now's ({med['deploy'] / args.candidates:.2f} s a candidate)")


if __name__ == "__main__":
    main()
