"""Issue evidence: per-output tolerances and task metrics on real reduced-precision routes.

On the ResNet-style CNN (``gpt_triton.testing.models.build_resnet_cnn``) this builds reduced-precision
candidates with the real route families (ONNX Runtime fp16 / int8 dynamic / int8 static, OpenVINO bf16 /
int8, plus fp32 routes that should stay exact), runs every candidate on the tuning split of seeded
reference traffic (through an embedded Triton when the server and deploy modules work, else in-process),
compares with the default route's outputs under

* a *tight* element-wise tolerance (what fp32 re-association may change; reduced precision may not), and
* a *task* tolerance (the classifier's top-1 decision, ``examples.task_metrics:top1_agreement``),

and prints per candidate the exceedance count, the Clopper-Pearson bound, the margin and the eligibility
verdict, then the accuracy-latency Pareto set. The fastest candidate eligible under the task tolerance
is then accepted on the held-out split (opened once, through ``HeldOut``).

Run: ``.venv/bin/python benchmarks/accuracy_routes.py [--image 160] [--requests 48] [--in-process]``.
Latencies are medians of sequential requests on a shared 2-core machine: indicative, not a benchmark
of the engines.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # so examples.task_metrics imports when run as a script
    sys.path.insert(0, str(ROOT))

from gpt_triton.accuracy import (  # noqa: E402
    AccuracyResult,
    compare_requests,
    eligible,
    pareto_front,
    save_calibration_npz,
    split_reference,
    synthesize_reference,
)
from gpt_triton.accuracy.compare import max_abs_error  # noqa: E402
from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes  # noqa: E402
from gpt_triton.core.spec import AccuracySpec, ToleranceSpec  # noqa: E402

Request = dict[str, np.ndarray]

# (id, family, knobs). The first is the default route: its outputs are the reference.
CANDIDATES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("ort-fp32", "onnxruntime", {}),
    ("ort-fp32-basic", "onnxruntime", {"graph_optimization_level": "basic"}),
    ("ort-fp16", "onnxruntime", {"precision": "fp16"}),
    ("ort-int8-dynamic", "onnxruntime", {"precision": "int8_dynamic"}),
    ("ort-int8-static", "onnxruntime", {"precision": "int8_static"}),
    ("ov-f32", "openvino", {"inference_precision": "f32"}),
    ("ov-bf16", "openvino", {"inference_precision": "bf16"}),
    ("ov-int8", "openvino", {"quantization": "int8"}),
)

# The tolerances compared, from strictest to most task-like. Each is a plain AccuracySpec, as in a YAML spec.
SPECS: dict[str, AccuracySpec] = {
    # fp32 re-association moves these outputs by ~1e-6 relative: 1e-4 absolute OR 1e-3 relative per element
    # leaves fp32 routes ~100x headroom and no room for fp16/bf16/int8 rounding.
    "tight": AccuracySpec(default=ToleranceSpec(max_abs=1e-4, max_rel=1e-3), min_margin=0.1, max_exceedance_bound=0.2),
    # Direction of each output vector: fp16/bf16 rounding stays well inside 1e-4 of cosine distance, int8 does not.
    "cosine": AccuracySpec(default=ToleranceSpec(cosine_min=0.9999), min_margin=0.1, max_exceedance_bound=0.2),
    # The classifier's decision: top-1 class per sample (a user task metric).
    "top1": AccuracySpec(default=ToleranceSpec(), task_metric="examples.task_metrics:top1_agreement", max_exceedance_bound=0.2),
    # A multi-label reading of the logits (class fires when logit > 0), compared as detection sets; up to
    # 10% of requests may differ, and the 95% bound on the rate must stay under 25%.
    "labels": AccuracySpec(
        default=ToleranceSpec(), task_metric="examples.task_metrics:logit_detections_agree",
        max_exceedance_rate=0.1, max_exceedance_bound=0.25,
    ),
}
SPEC_HELP = {
    "tight": "per element |c-r| <= 1e-4 OR <= 1e-3*|r| on every output; min_margin 0.1; bound <= 0.2",
    "cosine": "cosine similarity >= 0.9999 per output and request; min_margin 0.1; bound <= 0.2",
    "top1": "task metric examples.task_metrics:top1_agreement (every sample's argmax agrees); bound <= 0.2",
    "labels": "task metric examples.task_metrics:logit_detections_agree; exceedance rate <= 0.1, bound <= 0.25",
}
ACCEPT_SPEC = "labels"  # the fastest candidate eligible under this one is accepted on the held-out split


@dataclass
class Row:
    id: str
    family: str
    knobs: dict[str, Any]
    latency_ms: float = float("nan")
    max_abs: float = float("nan")  # worst |candidate - reference| over outputs, requests, elements
    results: dict[str, AccuracyResult] = field(default_factory=dict)
    verdicts: dict[str, tuple[bool, str]] = field(default_factory=dict)
    error: str | None = None  # build/load/run failure
    notes: list[str] = field(default_factory=list)

    def tolerance_used(self) -> float:
        """Worst fraction of the tight tolerance used over outputs (1 - margin); inf when not run."""
        tight = self.results.get("tight")
        if tight is None or not tight.outputs:
            return float("inf")
        return 1.0 - tight.min_margin


# ---------------------------------------------------------------------------------------------- runners


class Runner:
    """Runs reference requests on one deployed candidate and times sequential requests."""

    def outputs(self, requests: Sequence[Request]) -> list[Request]:
        raise NotImplementedError

    def one(self, request: Request) -> None:
        self.outputs([request])

    def warm(self, requests: Sequence[Request]) -> None:
        for request in requests[:3]:  # first requests pay for lazy allocations
            self.one(request)

    def time_ms(self, requests: Sequence[Request], count: int, offset: int = 0) -> list[float]:
        times = []
        for i in range(count):
            request = requests[(offset + i) % len(requests)]
            start = time.perf_counter()
            self.one(request)
            times.append((time.perf_counter() - start) * 1e3)
        return times

    def close(self) -> None:
        """Release the candidate (unload it)."""


class InProcessRunner(Runner):
    """The candidate in this process, through the runners the python-backend adapter serves with."""

    def __init__(self, artifact: Any, output_names: list[str]) -> None:
        from gpt_triton.runtimes import open_runner as open_runtime

        entry = Path(artifact.directory) / artifact.files[0]
        # Outputs are kept across requests (a list of answers), so no reused output buffers here.
        self.runner = open_runtime(artifact.runtime, entry, artifact.runtime_options, output_names=output_names).activate()

    def outputs(self, requests: Sequence[Request]) -> list[Request]:
        return [self.runner.infer(r) for r in requests]

    def close(self) -> None:
        self.runner.deactivate()


class TritonRunner(Runner):
    def __init__(self, server: Any, name: str, info: ModelInfo, shapes: dict[str, list[int]], artifact: Any) -> None:
        from gpt_triton.deploy import write_model
        from gpt_triton.routes import Route

        assert server.repository is not None
        write_model(server.repository, name, info, shapes, artifact, Route(family="serving"), "python")
        server.load(server.repository / name)
        self.server, self.name = server, name
        self.names = [t.name for t in info.outputs]

    def outputs(self, requests: Sequence[Request]) -> list[Request]:
        from gpt_triton.accuracy import infer_requests

        return infer_requests(self.server.grpc_url, self.name, requests, self.names)

    def one(self, request: Request) -> None:
        """One synchronous gRPC round trip, as a client of the served model would make it."""
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import np_to_triton_dtype

        tensors = []
        for key, value in request.items():
            tensor = grpcclient.InferInput(key, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)
        self.server.client().infer(self.name, tensors)

    def close(self) -> None:
        self.server.unload(self.name)


@contextlib.contextmanager
def serving(workdir: Path, in_process: bool) -> Iterator[tuple[str, Any]]:
    """("triton", server) when the embedded server starts, else ("in-process", None)."""
    if not in_process:
        try:
            from gpt_triton.deploy import write_model  # noqa: F401 - only checking it exists
            from gpt_triton.server import EmbeddedTriton
        except ImportError as exc:
            print(f"note: server/deploy modules unavailable ({exc}); running in-process")
        else:
            server = EmbeddedTriton(workdir / "repository", workdir=workdir / "triton", log_path=workdir / "triton.log")
            try:
                server.start()
            except Exception as exc:  # noqa: BLE001 - any start failure falls back, and says so
                server.stop()
                print(f"note: embedded Triton did not start ({exc}); running in-process")
            else:
                try:
                    yield "triton", server
                finally:
                    server.stop()
                return
    yield "in-process", None


# ---------------------------------------------------------------------------------------------- run


@dataclass
class Outcome:
    mode: str
    rows: list[Row]
    tuning_requests: int
    heldout_requests: int
    pareto_tight: list[str]
    pareto_task: list[str]
    accepted: str | None
    acceptance: AccuracyResult | None
    heldout_log: list[Any]


def run(
    workdir: Path, *, image: int = 160, requests: int = 48, batch: int = 1, heldout_fraction: float = 0.3,
    latency_rounds: int = 8, in_process: bool = False, candidates: Sequence[tuple[str, str, dict[str, Any]]] = CANDIDATES,
    log: Callable[[str], None] = print, widths: tuple[int, ...] | None = None,
) -> Outcome:
    """``widths``: the CNN's stage widths (default: the builder's, a 25 MB model; tests pass narrower ones)."""
    from gpt_triton.routes import FAMILIES, BuildContext, Route
    from gpt_triton.testing.models import build_resnet_cnn

    workdir.mkdir(parents=True, exist_ok=True)
    model_path = build_resnet_cnn(workdir / "resnet_cnn.onnx", image=image,
                                  **({"widths": widths} if widths is not None else {}))
    info = inspect_model(model_path)
    shapes = resolve_shapes(info, {"images": [batch, 3, image, image]})
    ref = synthesize_reference(info, shapes, requests, seed=0)
    tuning, heldout = split_reference(ref, heldout_fraction, seed=0)
    calibration = workdir / "calibration.npz"
    save_calibration_npz(tuning, calibration)  # int8 calibration sees the tuning split only
    context = BuildContext(model=info, shapes=shapes, max_batch_size=8, calibration_npz=str(calibration))
    names = [t.name for t in info.outputs]
    log(f"model {model_path.name}: {info.size_bytes / 1e6:.1f} MB, images [{batch},3,{image},{image}]; "
        f"{len(ref)} synthetic requests -> {len(tuning)} tuning / {heldout.size} held-out")

    rows = [Row(cid, family, knobs) for cid, family, knobs in candidates]
    with serving(workdir, in_process) as (mode, server):
        log(f"outputs through: {mode}" + (f" (embedded Triton at {server.grpc_url}, python backend)" if server else ""))

        def open_runner(row_id: str, artifact: Any) -> Runner:
            if server is None:
                return InProcessRunner(artifact, names)
            return TritonRunner(server, f"acc_{row_id.replace('-', '_')}", info, shapes, artifact)

        runners: dict[str, Runner] = {}
        try:
            reference: list[Request] | None = None
            for row in rows:
                started = time.perf_counter()
                try:
                    with warnings.catch_warnings():  # onnxconverter-common warns once per clipped fp16 constant
                        warnings.simplefilter("ignore", UserWarning)
                        artifact = FAMILIES[row.family].build(
                            Route(family=row.family, knobs=row.knobs), context, workdir / "builds" / row.id
                        )
                    row.notes = list(artifact.notes)
                    runners[row.id] = open_runner(row.id, artifact)
                    answers = runners[row.id].outputs(tuning.inputs)
                except Exception as exc:  # noqa: BLE001 - a broken candidate is a result, not the end of the run
                    row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                    log(f"  {row.id}: FAILED {row.error}")
                    continue
                if reference is None:  # the default route (first candidate): its outputs are the reference
                    reference = answers
                row.max_abs = max(max_abs_error(r[n], a[n]) for r, a in zip(reference, answers, strict=True) for n in names)
                for key, spec in SPECS.items():
                    row.results[key] = compare_requests(reference, answers, spec, "tuning", inputs=tuning.inputs)
                    row.verdicts[key] = eligible(row.results[key], spec)
                log(f"  {row.id}: built, deployed, compared in {time.perf_counter() - started:.1f} s")
            _interleaved_latency(rows, runners, tuning.inputs, latency_rounds, per_round=4)

            ok_rows = [r for r in rows if r.results]
            pareto_tight = pareto_front([(r.id, r.latency_ms, r.tolerance_used()) for r in ok_rows])
            pareto_task = pareto_front([(r.id, r.latency_ms, r.results[ACCEPT_SPEC].exceedance_upper_bound) for r in ok_rows])

            # Acceptance: the fastest candidate eligible under ACCEPT_SPEC, on the held-out split, once.
            accepted: str | None = None
            acceptance: AccuracyResult | None = None
            winners = sorted((r for r in ok_rows if r.verdicts[ACCEPT_SPEC][0]), key=lambda r: r.latency_ms)
            if winners and rows[0].id in runners:
                best = winners[0]
                held = heldout.open_for_acceptance(f"accept {best.id}: fastest eligible under '{ACCEPT_SPEC}'")
                held_reference = runners[rows[0].id].outputs(held.inputs)
                acceptance = compare_requests(
                    held_reference, runners[best.id].outputs(held.inputs), SPECS[ACCEPT_SPEC], "heldout", inputs=held.inputs
                )
                accepted = best.id
        finally:
            for runner in runners.values():
                runner.close()
    return Outcome(mode, rows, len(tuning), heldout.size, pareto_tight, pareto_task, accepted, acceptance, list(heldout.log))


def _interleaved_latency(
    rows: Sequence[Row], runners: dict[str, Runner], requests: Sequence[Request], rounds: int, per_round: int
) -> None:
    """Median sequential latency per candidate, measured in interleaved rounds (rotating the order) so
    the machine's load drifts hit every candidate alike instead of whichever ran last."""
    ids = [r.id for r in rows if r.id in runners]
    for runner in runners.values():
        runner.warm(requests)
    times: dict[str, list[float]] = {i: [] for i in ids}
    for round_index in range(rounds):
        shift = round_index % max(len(ids), 1)
        for cid in ids[shift:] + ids[:shift]:
            times[cid] += runners[cid].time_ms(requests, per_round, offset=round_index * per_round)
    for row in rows:
        if times.get(row.id):
            row.latency_ms = float(statistics.median(times[row.id]))


# ---------------------------------------------------------------------------------------------- report


def format_outcome(outcome: Outcome) -> str:
    rows = outcome.rows
    lines = [
        f"outputs through {outcome.mode}; reference = outputs of the default route ({rows[0].id}); tuning split "
        f"{outcome.tuning_requests} requests, held-out {outcome.heldout_requests}",
        "p50 = median of sequential requests, interleaved rounds; worst abs = max |candidate - reference| over all elements",
        f"{'candidate':<17}{'p50 ms':>8}{'worst abs':>11}  notes",
    ]
    for r in rows:
        if r.error:
            lines.append(f"{r.id:<17}  FAILED: {r.error}")
        else:
            lines.append(f"{r.id:<17}{r.latency_ms:>8.1f}{r.max_abs:>11.2e}  {'; '.join(r.notes)}")
    for key in SPECS:
        lines.append(f"[{key}] {SPEC_HELP[key]}")
        lines.append(f"  {'candidate':<17}{'exceed':>8}{'CP95 bound':>11}{'margin':>10}  verdict")
        for r in rows:
            if key not in r.results:
                continue
            res, (ok, why) = r.results[key], r.verdicts[key]
            lines.append(
                f"  {r.id:<17}{res.exceedances:>4}/{res.requests:<3}{res.exceedance_upper_bound:>11.3f}{res.min_margin:>10.3g}  "
                f"{'keep' if ok else 'REJECT'}" + ("" if ok else f" ({why})")
            )
    lines.append(f"Pareto (p50, fraction of the tight tolerance used): {', '.join(outcome.pareto_tight)}")
    lines.append(f"Pareto (p50, CP bound under '{ACCEPT_SPEC}'): {', '.join(outcome.pareto_task)}")
    if outcome.accepted and outcome.acceptance:
        a = outcome.acceptance
        lines.append(
            f"held-out acceptance of {outcome.accepted} under '{ACCEPT_SPEC}': {a.exceedances}/{a.requests} exceed, "
            f"so at most {a.exceedance_upper_bound:.1%} of requests exceed the tolerance (95% confidence); "
            f"held-out opened {len(outcome.heldout_log)}x, by {', '.join(x.caller for x in outcome.heldout_log)}"
        )
    else:
        lines.append(f"no candidate eligible under '{ACCEPT_SPEC}'; held-out split not opened")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--image", type=int, default=160, help="image side (the model's default is 160)")
    parser.add_argument("--requests", type=int, default=48, help="synthetic reference requests (30%% held out)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--in-process", action="store_true", help="skip Triton; run the runtimes in-process")
    parser.add_argument("--workdir", type=Path, default=None, help="keep builds here (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="acc-routes-") as tmp:
        outcome = run(args.workdir or Path(tmp), image=args.image, requests=args.requests, batch=args.batch,
                      in_process=args.in_process)
    print(format_outcome(outcome))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
