"""Isolated builds: a crash, an abort, a hang, an exception and a memory blow-up each mark only their own
candidate crashed; work is shared and deduplicated; a resumed run takes builds from the tuning cache; GPU families
get a resident-memory watchdog instead of an address-space limit; TensorRT engines are built per serving batch."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpt_triton.build import build_candidates
from gpt_triton.core.model_info import ModelInfo, inspect_model, resolve_shapes, sha256_file
from gpt_triton.core.outcomes import apply_outcomes
from gpt_triton.core.records import Candidate
from gpt_triton.core.routes import Artifact
from gpt_triton.core.spec import SearchSpec, TuneSpec
from gpt_triton.routes import FAMILIES, BuildContext, Knob, Route, RouteFamily, TensorRtFamily
from gpt_triton.routes._common import copy_file, make_artifact, source_model
from gpt_triton.routes._tensorrt import Gpu
from gpt_triton.search import candidate_id
from gpt_triton.testing import fake_tensorrt
from gpt_triton.testing.models import build_tiny_mlp
from gpt_triton.tuning_cache import TuningCache, make_header


class _TestFamily(RouteFamily):
    kind = "compiler"
    runtime = "onnxruntime"

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def knobs(self, model: ModelInfo) -> list[Knob]:
        return [Knob(name="variant", values=["a", "b"], default="a")]

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        raise NotImplementedError


class SegfaultFamily(_TestFamily):
    name = "test_segv"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        os.kill(os.getpid(), signal.SIGSEGV)
        raise AssertionError("unreachable")


class AbortFamily(_TestFamily):
    name = "test_abort"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        os.abort()


class HangFamily(_TestFamily):
    name = "test_hang"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        threading.Event().wait()  # never set: the build hangs until the parent's timeout kills it
        raise AssertionError("unreachable")


class RaiseFamily(_TestFamily):
    name = "test_raise"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        raise ValueError(f"bad knob value {route.knobs.get('variant')!r}")


class MemoryFamily(_TestFamily):
    name = "test_memory"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        hog = bytearray(3 * 1024**3)  # above the 2048 MB limit the test sets
        raise AssertionError(f"allocated {len(hog)} bytes despite the limit")


class CopyFamily(_TestFamily):
    """Every variant writes the same bytes: distinct routes, byte-identical artifacts."""

    name = "test_copy"
    file_knobs = ("variant",)

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        out_dir.mkdir(parents=True, exist_ok=True)
        copy_file(source_model(context), out_dir / "model.onnx")
        return make_artifact(self, "onnxruntime", route, out_dir, ["model.onnx"], {})


class LimitsFamily(_TestFamily):
    """Copies the model and notes the build child's address-space limit."""

    name = "test_limits"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        out_dir.mkdir(parents=True, exist_ok=True)
        copy_file(source_model(context), out_dir / "model.onnx")
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
        return make_artifact(self, "onnxruntime", route, out_dir, ["model.onnx"], {}, [f"RLIMIT_AS={soft}"])


class GpuLimitsFamily(LimitsFamily):
    name = "test_gpu_limits"
    device = "gpu"


class GpuMemoryFamily(_TestFamily):
    """Grows resident memory to 2 GB, then waits: only the parent's watchdog (or the timeout) ends it."""

    name = "test_gpu_memory"
    device = "gpu"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        chunks = [bytearray(b"\x01") * 2**24 for _ in range(128)]  # written, hence resident, 16 MB at a time
        threading.Event().wait()
        raise AssertionError(f"held {len(chunks)} chunks")


class SlowFamily(_TestFamily):
    """Starts a worker process (as compilers do) and waits: only a kill ends it."""

    name = "test_slow"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "partial.bin").write_bytes(b"half a build")
        subprocess.Popen(["sleep", "600"])
        threading.Event().wait()
        raise AssertionError("unreachable")


class EnvFamily(_TestFamily):
    """Notes which signing-key variables the build child can see."""

    name = "test_env"

    def build(self, route: Route, context: BuildContext, out_dir: Path) -> Artifact:
        out_dir.mkdir(parents=True, exist_ok=True)
        copy_file(source_model(context), out_dir / "model.onnx")
        seen = sorted(name for name in os.environ if name.startswith("GPT_TRITON_SIGNING"))
        return make_artifact(self, "onnxruntime", route, out_dir, ["model.onnx"], {}, [f"env={','.join(seen)}"])


class FakeTensorRtFamily(TensorRtFamily):
    """The production family over FakeTensorRT 10.13; a class, so the build child constructs the same one."""

    def __init__(self) -> None:
        trt = fake_tensorrt.module("10.13")
        super().__init__(tensorrt=lambda: trt, gpu=lambda: Gpu("Fake GPU", "8.9"))


TEST_FAMILIES: dict[str, RouteFamily] = {
    **FAMILIES, **{f.name: f for f in (SegfaultFamily(), AbortFamily(), HangFamily(), RaiseFamily(), MemoryFamily(), CopyFamily(),
                                       LimitsFamily(), GpuLimitsFamily(), GpuMemoryFamily(), EnvFamily())}
}


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    model = inspect_model(build_tiny_mlp(tmp_path_factory.mktemp("m") / "mlp.onnx"))
    return BuildContext(model=model, shapes=resolve_shapes(model, {}), max_batch_size=8)


def candidate(family: str, knobs: dict[str, Any] | None = None, serving: dict[str, Any] | None = None,
              graph: dict[str, Any] | None = None) -> Candidate:
    route = Route(family=family, knobs=knobs or {})
    serving_route = Route(family="serving", knobs=serving or {})
    graph_route = Route(family="graph", knobs=graph) if graph else None
    return Candidate(id=candidate_id(route, graph_route, serving_route), family=family, route=route,
                     graph=graph_route, serving=serving_route)


def no_temp_dirs(work: Path) -> bool:
    return not [p for p in (work / "artifacts").iterdir() if p.name.startswith(".tmp-")]


def test_crash_abort_hang_raise_and_memory_are_isolated(context: BuildContext, tmp_path: Path) -> None:
    spec = SearchSpec(build_timeout_s=10,  # a child needs seconds just to import on a loaded 2-core machine
                       build_memory_mb=2048)
    names = ["test_segv", "test_abort", "test_hang", "test_raise", "test_memory", "onnxruntime"]
    cands = [candidate(n, {"variant": "b"} if n == "test_raise" else None) for n in names]
    seen: list[str] = []
    # Session fixtures (a shared Triton) may already have children of this process; only new ones count.
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    apply_outcomes(cands, build_candidates(cands, context, tmp_path, spec, families=TEST_FAMILIES),
                   after=lambda c, _: seen.append(c.id))
    by = {c.family: c for c in cands}
    assert by["test_segv"].status == "crashed" and by["test_segv"].reason == "killed by SIGSEGV"
    assert by["test_abort"].status == "crashed" and (by["test_abort"].reason or "").startswith("killed by SIGABRT")
    assert by["test_hang"].status == "crashed" and by["test_hang"].reason == "timed out after 10 s"
    assert by["test_raise"].reason == "ValueError: bad knob value 'b'"
    assert "MemoryError" in (by["test_memory"].reason or "") and "2048 MB" in (by["test_memory"].reason or "")
    good = by["onnxruntime"]
    assert good.status == "built" and good.artifact is not None
    assert good.build.seconds > 0 and good.build.peak_rss_bytes > 10 * 2**20  # the child's own peak RSS
    assert sorted(seen) == sorted(c.id for c in cands)
    assert no_temp_dirs(tmp_path)
    leftovers = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not leftovers, f"a build child outlived its build: {leftovers}"


def test_int8_static_without_calibration_crashes_with_a_clear_reason(context: BuildContext, tmp_path: Path) -> None:
    c = candidate("onnxruntime", {"precision": "int8_static"})
    apply_outcomes([c], build_candidates([c], context, tmp_path, SearchSpec(), families=TEST_FAMILIES))
    assert c.status == "crashed" and "calibration" in (c.reason or "")


def test_shared_work_and_byte_identical_dedupe(context: BuildContext, tmp_path: Path) -> None:
    base = candidate("onnxruntime")
    runtime_only = candidate("onnxruntime", {"allow_spinning": False})
    serving_only = candidate("onnxruntime", serving={"instance_count": 2})
    copy_a, copy_b = candidate("test_copy", {"variant": "a"}), candidate("test_copy", {"variant": "b"})
    cands = [base, runtime_only, serving_only, copy_a, copy_b]
    apply_outcomes(cands, build_candidates(cands, context, tmp_path, SearchSpec(), families=TEST_FAMILIES))
    assert all(c.status == "built" and c.artifact for c in cands)
    # Three child builds: ORT fp32 once (session options are runtime-only), test_copy once per variant.
    assert len(list((tmp_path / "logs").glob("*.log"))) == 3
    # All five produced the source's bytes: stored once.
    dirs = {c.artifact.directory for c in cands if c.artifact}
    assert len(dirs) == 1 and [p for p in (tmp_path / "artifacts").iterdir()] == [Path(dirs.pop())]
    assert base.artifact and runtime_only.artifact and serving_only.artifact and copy_b.artifact
    assert runtime_only.artifact.runtime_options["config_entries"]["session.intra_op.allow_spinning"] == "0"
    assert base.artifact.runtime_options["config_entries"]["session.intra_op.allow_spinning"] == "1"
    assert not base.build.cached and base.build.seconds > 0
    assert not runtime_only.build.cached  # same files, other runtime options: a distinct artifact
    assert serving_only.build.cached and serving_only.artifact == base.artifact.model_copy(update={"route": serving_only.route})
    assert copy_b.build.cached and not copy_a.build.cached  # byte-identical files and equal options


def test_graph_rewrite_is_built_once_for_every_compiler(context: BuildContext, tmp_path: Path) -> None:
    graph = {"simplify": "none", "constant_folding": True, "shape_inference": False}
    cands = [candidate("onnxruntime", graph=graph), candidate("openvino", graph=graph),
             candidate("onnxruntime", {"precision": "int8_dynamic"}, graph=graph)]
    apply_outcomes(cands, build_candidates(cands, context, tmp_path, SearchSpec(), families=TEST_FAMILIES))
    assert [c.status for c in cands] == ["built"] * 3
    assert len(list((tmp_path / "logs").glob("graph-*.log"))) == 1
    graph_dirs = [p for p in (tmp_path / "artifacts").iterdir() if p.name.startswith("graph-")]
    assert len(graph_dirs) == 1
    assert cands[0].artifact and cands[0].artifact.sha256 == sha256_file(graph_dirs[0] / "model.onnx")


def test_resume_takes_builds_and_crashes_from_the_cache(context: BuildContext, tmp_path: Path) -> None:
    spec = TuneSpec()
    header = make_header(context.model, spec)
    first = [candidate("onnxruntime"), candidate("test_raise")]
    with TuningCache.open(tmp_path / "cache.jsonl", header, resume=False) as cache:
        apply_outcomes(first, build_candidates(first, context, tmp_path / "work", spec.search, cache=cache, families=TEST_FAMILIES),
                       after=lambda c, _: cache.record(c))
    shutil.rmtree(tmp_path / "work" / "logs")
    again = [candidate("onnxruntime"), candidate("test_raise"), candidate("onnxruntime", {"allow_spinning": False}),
             candidate("onnxruntime", {"precision": "int8_dynamic"})]
    with TuningCache.open(tmp_path / "cache.jsonl", header, resume=True) as cache:
        assert set(cache.previous) == {c.id for c in first}
        apply_outcomes(again, build_candidates(again, context, tmp_path / "work", spec.search, cache=cache, families=TEST_FAMILIES),
                       after=lambda c, _: cache.record(c))
    assert again[0].status == "built" and again[0].build.cached and again[0].artifact == first[0].artifact
    assert again[1].status == "crashed" and again[1].reason == first[1].reason
    # A new route with the restored route's files reuses them; only a route with new files runs a child.
    assert again[2].status == "built" and again[2].artifact and again[0].artifact
    assert again[2].artifact.directory == again[0].artifact.directory
    assert again[3].status == "built"
    assert [p.name.split("-")[0] for p in (tmp_path / "work" / "logs").glob("*.log")] == ["onnxruntime"]
    assert Path(again[0].artifact.directory, "model.onnx").is_file()


def test_gpu_build_children_get_no_address_space_limit(context: BuildContext, tmp_path: Path) -> None:
    """CUDA reserves far more virtual memory than any RLIMIT_AS a build could have; GPU builds are capped on RSS."""
    spec = SearchSpec(build_memory_mb=2048)
    cpu, gpu = candidate("test_limits"), candidate("test_gpu_limits")
    apply_outcomes([cpu, gpu], build_candidates([cpu, gpu], context, tmp_path, spec, families=TEST_FAMILIES))
    assert cpu.artifact and cpu.artifact.notes == [f"RLIMIT_AS={2048 * 2**20}"]
    assert gpu.artifact and gpu.artifact.notes == [f"RLIMIT_AS={resource.RLIM_INFINITY}"]


def test_gpu_build_over_its_resident_memory_limit_is_killed(context: BuildContext, tmp_path: Path) -> None:
    hog = candidate("test_gpu_memory")
    spec = SearchSpec(build_memory_mb=256, build_timeout_s=120)
    apply_outcomes([hog], build_candidates([hog], context, tmp_path, spec, families=TEST_FAMILIES))
    assert hog.status == "crashed"
    assert (hog.reason or "").startswith("killed: resident memory reached") and "256 MB limit" in (hog.reason or "")
    assert no_temp_dirs(tmp_path)


def test_tensorrt_engines_are_built_for_their_serving_batch(context: BuildContext, tmp_path: Path) -> None:
    families = {**TEST_FAMILIES, "tensorrt": FakeTensorRtFamily()}
    wide = candidate("tensorrt", serving={"max_batch_size": 16})
    default = candidate("tensorrt")  # max_batch_size None: 8
    same_batch = candidate("tensorrt", serving={"instance_count": 2})
    batched = candidate("tensorrt", serving={"dynamic_batching": True, "preferred_batch_sizes": [4]})
    cands = [wide, default, same_batch, batched]
    apply_outcomes(cands, build_candidates(cands, context, tmp_path, SearchSpec(), families=families))
    assert [c.status for c in cands] == ["built"] * 4, [c.reason for c in cands]
    assert len(list((tmp_path / "logs").glob("tensorrt-*.log"))) == 3  # same_batch shares default's engine
    headers = {c.id: fake_tensorrt.describe_engine(Path(c.artifact.directory, "model.plan").read_bytes())
               for c in cands if c.artifact}
    assert headers[wide.id]["profiles"] == [{"x": {"min": [1, 16], "opt": [1, 16], "max": [16, 16]}}]
    assert headers[default.id]["profiles"] == [{"x": {"min": [1, 16], "opt": [1, 16], "max": [8, 16]}}]
    assert headers[batched.id]["profiles"] == [{"x": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}}]
    assert same_batch.artifact and default.artifact and same_batch.artifact.directory == default.artifact.directory
    assert batched.artifact and batched.artifact.engine["max_batch_size"] == 8 and batched.artifact.engine["opt_batch_size"] == 4
    # One timing cache for the run: the second child found the first one's timings (same opt shape).
    assert headers[default.id]["timing_cache"]["hits"] == headers[wide.id]["timing_cache"]["misses"] > 0
    caches = list((tmp_path / "artifacts" / "tensorrt-timing-cache").glob("*.cache"))
    assert [p.name for p in caches] == ["trt-10.13.3.9-sm89.cache"]


_TUNER = """
import sys
from pathlib import Path
from test_build import SlowFamily, candidate
from gpt_triton.build import build_candidates
from gpt_triton.core.routes import BuildContext
from gpt_triton.core.spec import SearchSpec

context = BuildContext.model_validate_json(Path(sys.argv[1]).read_text())
print("building", flush=True)
list(build_candidates([candidate("test_slow")], context, Path(sys.argv[2]), SearchSpec(build_timeout_s=600),
                      families={"test_slow": SlowFamily()}))
"""


def test_build_children_do_not_outlive_a_killed_tuner(context: BuildContext, tmp_path: Path) -> None:
    """SIGKILL the tuner mid-build: the build child and the worker it started end, and their temp directory
    and job files are removed (the child hears of its parent's death through PR_SET_PDEATHSIG)."""
    import time

    (tmp_path / "context.json").write_text(context.model_dump_json())
    work = tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *(p for p in sys.path if p)])}
    tuner = subprocess.Popen([sys.executable, "-c", _TUNER, str(tmp_path / "context.json"), str(work)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    descendants: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and tuner.poll() is None:
            descendants = psutil.Process(tuner.pid).children(recursive=True)
            if any(p.name() == "sleep" for p in descendants):
                break
            time.sleep(0.1)  # polling a condition with a deadline, not synchronising on time
        assert any(p.name() == "sleep" for p in descendants), tuner.stderr.read() if tuner.poll() is not None else ""
        assert [p for p in (work / "artifacts").iterdir() if p.name.startswith(".tmp-")], "mid-build: temp files exist"
        tuner.kill()
        tuner.wait(timeout=30)
        _gone, alive = psutil.wait_procs(descendants, timeout=30)
        assert not alive, f"build processes outlived the killed tuner: {alive}"
        assert no_temp_dirs(work), sorted(p.name for p in (work / "artifacts").iterdir())
    finally:
        for process in descendants:
            with contextlib.suppress(psutil.Error):
                process.kill()
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()


def test_stale_temp_files_of_a_dead_build_are_removed(context: BuildContext, tmp_path: Path) -> None:
    """What a build killed beyond cleaning left (a dead pid in the name) goes; a live process's stays."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / f".tmp-onnxruntime-abc-{dead.pid}").mkdir()
    (artifacts / f".tmp-onnxruntime-abc-{dead.pid}.job.json").write_text("{}")
    live = artifacts / f".tmp-onnxruntime-def-{os.getpid()}.job.json"
    live.write_text("{}")
    c = candidate("test_copy")
    apply_outcomes([c], build_candidates([c], context, tmp_path, SearchSpec(), families=TEST_FAMILIES))
    assert c.status == "built"
    assert sorted(p.name for p in artifacts.iterdir() if p.name.startswith(".tmp-")) == [live.name]


def test_build_children_get_no_signing_key(context: BuildContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpt_triton.build import SECRET_ENV
    from gpt_triton.promote.signing import KEY_ENV, KEY_FILE_ENV

    assert set(SECRET_ENV) == {KEY_ENV, KEY_FILE_ENV}
    monkeypatch.setenv(KEY_ENV, "00" * 32)
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "key"))
    c = candidate("test_env")
    apply_outcomes([c], build_candidates([c], context, tmp_path, SearchSpec(), families=TEST_FAMILIES))
    assert c.status == "built" and c.artifact is not None
    assert c.artifact.notes == ["env="], "the signing key must not reach a build child"
