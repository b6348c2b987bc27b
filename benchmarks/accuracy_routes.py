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
from gpt_triton.model_info import ModelInfo, inspect_model, resolve_shapes  # noqa: E402
from gpt_triton.spec import AccuracySpec, ToleranceSpec  # noqa: E402

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

# Tight: fp32 re-association moves these outputs by ~1e-6 relative; 1e-4 absolute OR 1e-3 relative per
# element leaves fp32 routes ~100x headroom and no room for fp16/bf16/int8 rounding.
TIGHT = AccuracySpec(
    default=ToleranceSpec(max_abs=1e-4, max_rel=1e-3),
    min_margin=0.1,
    max_exceedance_bound=0.1,
)
# Task: the application only acts on the top-1 class.
TASK = AccuracySpec(
    default=ToleranceSpec(),
    task_metric="examples.task_metrics:top1_agreement",
    max_exceedance_bound=0.1,
)


@dataclass
class Row:
    id: str
    family: str
    knobs: dict[str, Any]
    latency_ms: float = float("nan")
    tight: AccuracyResult | None = None
    task: AccuracyResult | None = None
    tight_ok: tuple[bool, str] = (False, "not run")
    task_ok: tuple[bool, str] = (False, "not run")
    max_abs: float = float("nan")  # worst |candidate - reference| over outputs, requests, elements
    error: str | None = None  # build/load/run failure
    notes: list[str] = field(default_factory=list)

    def tolerance_used(self) -> float:
        """Worst fraction of the tight tolerance used over outputs (1 - margin); inf when not run."""
        if self.tight is None or not self.tight.outputs:
            return float("inf")
        return 1.0 - self.tight.min_margin


# ---------------------------------------------------------------------------------------------- runners


class Runner:
    """Runs reference requests on one deployed candidate and times sequential requests."""

    def outputs(self, requests: Sequence[Request]) -> list[Request]:
        raise NotImplementedError

    def latency_ms(self, requests: Sequence[Request], repeats: int) -> float:
        for request in requests[:3]:  # warm-up: first requests pay for lazy allocations
            self.outputs([request])
        times = []
        for i in range(repeats):
            start = time.perf_counter()
            self.outputs([requests[i % len(requests)]])
            times.append((time.perf_counter() - start) * 1e3)
        return float(statistics.median(times))

    def close(self) -> None:
        """Release the candidate (unload it)."""


class InProcessRunner(Runner):
    def __init__(self, artifact: Any, output_names: list[str]) -> None:
        path = Path(artifact.directory) / artifact.files[0]
        options = artifact.runtime_options
        self.names = output_names
        if artifact.runtime == "onnxruntime":
            import onnxruntime as ort

            so = ort.SessionOptions()
            for key, value in options.get("session_options", {}).items():
                if key == "graph_optimization_level":
                    value = getattr(ort.GraphOptimizationLevel, value)
                elif key == "execution_mode":
                    value = getattr(ort.ExecutionMode, value)
                setattr(so, key, value)
            for key, value in options.get("config_entries", {}).items():
                so.add_session_config_entry(key, str(value))
            session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            self._run: Callable[[Request], Request] = lambda r: dict(zip(self.names, session.run(self.names, r), strict=True))
        else:
            import openvino as ov

            compiled = ov.Core().compile_model(str(path), options.get("device", "CPU"), options.get("config", {}))
            ports = {name: port for port in compiled.outputs for name in port.get_names()}
            self._run = lambda r: {n: np.array(v) for n, v in ((n, compiled(r)[ports[n]]) for n in self.names)}

    def outputs(self, requests: Sequence[Request]) -> list[Request]:
        return [self._run(r) for r in requests]


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

    def latency_ms(self, requests: Sequence[Request], repeats: int) -> float:
        import tritonclient.grpc as grpcclient

        client = self.server.client()

        def one(request: Request) -> None:
            tensors = []
            for key, value in request.items():
                tensor = grpcclient.InferInput(key, list(value.shape), "FP32")
                tensor.set_data_from_numpy(value)
                tensors.append(tensor)
            client.infer(self.name, tensors)

        for request in requests[:3]:
            one(request)
        times = []
        for i in range(repeats):
            start = time.perf_counter()
            one(requests[i % len(requests)])
            times.append((time.perf_counter() - start) * 1e3)
        return float(statistics.median(times))

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
    latency_repeats: int = 20, in_process: bool = False, candidates: Sequence[tuple[str, str, dict[str, Any]]] = CANDIDATES,
    log: Callable[[str], None] = print,
) -> Outcome:
    from gpt_triton.routes import FAMILIES, BuildContext, Route
    from gpt_triton.testing.models import build_resnet_cnn

    workdir.mkdir(parents=True, exist_ok=True)
    model_path = build_resnet_cnn(workdir / "resnet_cnn.onnx", image=image)
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

        def open_runner(row: Row, artifact: Any) -> Runner:
            if server is None:
                return InProcessRunner(artifact, names)
            return TritonRunner(server, f"acc_{row.id.replace('-', '_')}", info, shapes, artifact)

        reference_runner: Runner | None = None
        reference: list[Request] = []
        for row in rows:
            started = time.perf_counter()
            family = FAMILIES[row.family]
            runner: Runner | None = None
            try:
                artifact = family.build(Route(family=row.family, knobs=row.knobs), context, workdir / "builds" / row.id)
                row.notes = list(artifact.notes)
                runner = open_runner(row, artifact)
                answers = runner.outputs(tuning.inputs)
                row.latency_ms = runner.latency_ms(tuning.inputs, latency_repeats)
            except Exception as exc:  # noqa: BLE001 - a broken candidate is a result, not the end of the run
                row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                log(f"  {row.id}: FAILED {row.error}")
                if runner is not None:
                    runner.close()
                continue
            if reference_runner is None:  # the default route: its outputs are the reference
                reference_runner, reference = runner, answers
            elif runner is not reference_runner:
                runner.close()
            row.max_abs = max(max_abs_error(r[n], a[n]) for r, a in zip(reference, answers, strict=True) for n in names)
            row.tight = compare_requests(reference, answers, TIGHT, "tuning", inputs=tuning.inputs)
            row.task = compare_requests(reference, answers, TASK, "tuning", inputs=tuning.inputs)
            row.tight_ok, row.task_ok = eligible(row.tight, TIGHT), eligible(row.task, TASK)
            log(f"  {row.id}: built+ran in {time.perf_counter() - started:.1f} s, p50 {row.latency_ms:.1f} ms")

        ok_rows = [r for r in rows if r.tight is not None]
        pareto_tight = pareto_front([(r.id, r.latency_ms, r.tolerance_used()) for r in ok_rows])
        pareto_task = pareto_front([(r.id, r.latency_ms, r.task.exceedance_upper_bound) for r in ok_rows if r.task])

        # Acceptance: the fastest candidate eligible under the task tolerance, on the held-out split.
        accepted: str | None = None
        acceptance: AccuracyResult | None = None
        winners = sorted((r for r in ok_rows if r.task_ok[0]), key=lambda r: r.latency_ms)
        if winners and reference_runner is not None:
            best = winners[0]
            held = heldout.open_for_acceptance(f"accept {best.id}, the fastest candidate eligible under the task tolerance")
            artifact = FAMILIES[best.family].build(Route(family=best.family, knobs=best.knobs), context, workdir / "builds" / best.id)
            held_reference = reference_runner.outputs(held.inputs)
            runner = open_runner(Row("accept", best.family, best.knobs), artifact)
            try:
                acceptance = compare_requests(held_reference, runner.outputs(held.inputs), TASK, "heldout", inputs=held.inputs)
            finally:
                runner.close()
            accepted = best.id
        if reference_runner is not None:
            reference_runner.close()
    return Outcome(mode, rows, len(tuning), heldout.size, pareto_tight, pareto_task, accepted, acceptance, list(heldout.log))


# ---------------------------------------------------------------------------------------------- report


def _verdict(ok: tuple[bool, str]) -> str:
    return "keep" if ok[0] else "REJECT"


def format_outcome(outcome: Outcome) -> str:
    lines = [
        f"outputs through {outcome.mode}; tuning split {outcome.tuning_requests} requests, "
        f"Clopper-Pearson one-sided 95% upper bounds",
        "tight = per element |c-r| <= 1e-4 OR <= 1e-3*|r| on logits and probabilities (min_margin 0.1, bound <= 0.1); "
        "task = top-1 class agrees (examples.task_metrics:top1_agreement, bound <= 0.1)",
        f"{'candidate':<17}{'p50 ms':>8}  {'tight: exc':>10} {'bound':>6} {'margin':>9} {'worst abs':>10}  {'verdict':<7}"
        f"  {'task: exc':>9} {'bound':>6}  {'verdict':<7}",
    ]
    for r in outcome.rows:
        if r.tight is None or r.task is None:
            lines.append(f"{r.id:<17}  failed: {r.error}")
            continue
        lines.append(
            f"{r.id:<17}{r.latency_ms:>8.1f}  {r.tight.exceedances:>5}/{r.tight.requests:<4} {r.tight.exceedance_upper_bound:>6.3f} "
            f"{r.tight.min_margin:>9.3g} {r.max_abs:>10.2e}  {_verdict(r.tight_ok):<7}  {r.task.exceedances:>4}/{r.task.requests:<4} "
            f"{r.task.exceedance_upper_bound:>6.3f}  {_verdict(r.task_ok):<7}"
        )
    lines.append(f"Pareto (p50 latency, fraction of tight tolerance used): {', '.join(outcome.pareto_tight)}")
    lines.append(f"Pareto (p50 latency, task exceedance bound): {', '.join(outcome.pareto_task)}")
    for r in outcome.rows:
        if r.tight is not None and not r.tight_ok[0]:
            lines.append(f"  {r.id} rejected by tight: {r.tight_ok[1]}")
        if r.task is not None and not r.task_ok[0]:
            lines.append(f"  {r.id} rejected by task: {r.task_ok[1]}")
    if outcome.accepted and outcome.acceptance:
        a = outcome.acceptance
        lines.append(
            f"held-out acceptance of {outcome.accepted}: {a.exceedances}/{a.requests} exceedances, bound "
            f"{a.exceedance_upper_bound:.3f} -> 'at most {a.exceedance_upper_bound:.1%} of requests change their top-1 "
            f"class, 95% confidence'; held-out opened {len(outcome.heldout_log)}x by "
            f"{', '.join(x.caller for x in outcome.heldout_log)}"
        )
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
