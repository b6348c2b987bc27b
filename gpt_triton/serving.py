"""Serving candidates for a run: the server (embedded, started and always stopped; or the user's, never
stopped), the families it can serve, candidates deployed on it and unloaded afterwards, and the measurer
that drives them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

from gpt_triton.core.records import Candidate
from gpt_triton.core.spec import MeasureSpec, ObjectiveSpec, TuneSpec
from gpt_triton.deploy import deploy_candidates, unload_candidates, unservable_runtimes
from gpt_triton.measure.crowding import RepeatCrowded
from gpt_triton.measure.harness import Measurer
from gpt_triton.measure.perf_analyzer import load_client
from gpt_triton.measure.server_watch import ServerWatch
from gpt_triton.routes import FAMILIES
from gpt_triton.run import Advance, Run
from gpt_triton.server import EmbeddedTriton, RemoteTriton, TritonServer
from gpt_triton.tensorrt_support import builder_version, check_builder


@contextlib.contextmanager
def open_server(run: Run, label: str) -> Iterator[TritonServer]:
    """The embedded server (started and always stopped) or the user's server (never stopped)."""
    server: TritonServer
    if run.options.triton_url:
        server = RemoteTriton(run.options.triton_url, native_backends=run.spec.server.native_backends)
    else:  # staging serves unsigned candidates: the server gets no signing key (the adapter would refuse them)
        server = EmbeddedTriton(repository=run.staging, workdir=run.run_dir / "triton",
                                log_path=run.run_dir / f"triton-{label}.log", signing_key=False)
    began = time.monotonic()
    server.start()  # an embedded server that fails to start stops what it started
    run.budget.observe_server_start(time.monotonic() - began)
    try:
        yield server
    finally:
        began = time.monotonic()
        server.stop()  # the user's server is only disconnected from
        run.budget.observe_server_stop(time.monotonic() - began)


@contextlib.contextmanager
def deployed(run: Run, server: TritonServer, candidates: Sequence[Candidate], suffix: str = "",
             advance: Advance | None = None) -> Iterator[list[Candidate]]:
    """Load ``candidates`` (a load failure marks that candidate failed), yield those loaded, unload them."""
    loaded: list[Candidate] = []
    try:
        began = time.monotonic()
        run.apply(candidates, deploy_candidates(server, run.staging, candidates, run.info, run.shapes, suffix, advance),
                  after=lambda c, o: loaded.append(c) if o.status != "failed" else None)
        run.budget.observe_loads(time.monotonic() - began, len(candidates))
        yield loaded
    finally:
        began = time.monotonic()
        unload_candidates(server, loaded)
        run.budget.observe_unloads(time.monotonic() - began, len(loaded))


@contextlib.contextmanager
def serve(run: Run, candidates: Sequence[Candidate], label: str, suffix: str) -> Iterator[tuple[TritonServer, list[Candidate]]]:
    """A fresh server with ``candidates`` loaded (as ``c_<id><suffix>``), for one separate step."""
    with open_server(run, label) as server, deployed(run, server, candidates, suffix) as loaded:
        yield server, loaded


def measurer(run: Run, server: TritonServer, advance: Advance, stage: str,
             measure: MeasureSpec | None = None, objective: ObjectiveSpec | None = None, seed: int = 0,
             at_round: Callable[[], None] | None = None) -> Measurer:
    """The one way a run builds its measurer: the tuning split's inputs, the run's measure and objective
    specs (or a stage's own), the server's /metrics only with ``measure.scrape_metrics``, and the run's
    windows.csv, whose rows name ``stage``; ``at_round`` is called as each round of windows starts (a
    stage in turns with another waits there: gpt_triton/measure/relay.py)."""
    spec = run.spec
    measure = measure or spec.measure
    metrics_url = server.metrics_url if measure.scrape_metrics else None
    http_url = server.http_url or None
    client = load_client(measure.client, spec.measure.client_processes, measure.protocol, http_url)
    if server.mode == "embedded":  # a remote server is not this run's process:
        if measure.repeat_crowded > 0:  # its CPU is among the "other processes" (gpt_triton/measure/crowding.py)
            client = RepeatCrowded(client, measure.repeat_crowded)
        client = ServerWatch(client, server.exit_note)  # and its end shows only as failed requests
    return Measurer(server.grpc_url, run.tuning.inputs, measure, objective or spec.objective,
                    metrics_url=metrics_url, progress=advance, processes=spec.measure.client_processes, seed=seed,
                    client=client, http_url=http_url,
                    on_window=run.windows.sink(stage), at_round=at_round)


def unusable_families(spec: TuneSpec, server: TritonServer) -> dict[str, str]:
    """Families this run cannot use with ``server``, and why: their artifacts need a backend it lacks (a
    TensorRT plan has no python-backend path), or their plans would not load on the serving image (the
    builder's TensorRT must be the one ``spec.server.image`` ships; unknown counts as not)."""
    by_runtime = unservable_runtimes(server.native_backends)
    out = {name: by_runtime[f.runtime] for name, f in FAMILIES.items() if f.runtime in by_runtime}
    for name, family in FAMILIES.items():
        if family.runtime == "tensorrt" and name not in out and family.availability()[0]:
            reason = check_builder(builder_version(), spec.server.image, spec.server.tensorrt_version)
            if reason:
                out[name] = reason
    return out
