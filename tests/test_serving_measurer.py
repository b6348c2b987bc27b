"""serving.measurer, the one builder of every stage's measurer: what it hands the Measurer from the spec."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gpt_triton import serving
from gpt_triton.core.spec import TuneSpec
from gpt_triton.measure.crowding import RepeatCrowded
from gpt_triton.measure.machine_load import WatchedClient
from gpt_triton.measure.server_watch import ServerWatch
from gpt_triton.measure.window_log import WindowLog


def _alive(_wait_s: float) -> str | None:
    return None


def _run(tmp_path: Path, spec: TuneSpec) -> SimpleNamespace:
    inputs = [{"x": np.zeros((1, 4), np.float32)}]
    return SimpleNamespace(spec=spec, tuning=SimpleNamespace(inputs=inputs),
                           windows=WindowLog(tmp_path / "windows.csv", "run-1"))


@pytest.mark.parametrize("scrape", [False, True])
def test_metrics_are_read_around_windows_only_when_asked(tmp_path: Path, scrape: bool) -> None:
    """A production Prometheus reads /metrics every 15-30 s; reading it twice a window is opt-in."""
    server = SimpleNamespace(mode="embedded", grpc_url="127.0.0.1:1", http_url="127.0.0.1:2", exit_note=_alive,
                             metrics_url="http://127.0.0.1:3/metrics")
    spec = TuneSpec.model_validate({"measure": {"scrape_metrics": scrape}})
    measurer = serving.measurer(_run(tmp_path, spec), server, lambda _m: None, "search")  # type: ignore[arg-type]
    assert measurer.metrics_url == (server.metrics_url if scrape else None)
    # A stage's own measure spec decides for that stage (the finalist stage passes one).
    stage_spec = spec.measure.model_copy(update={"scrape_metrics": not scrape})
    staged = serving.measurer(_run(tmp_path, spec), server, lambda _m: None, "finalists",  # type: ignore[arg-type]
                              measure=stage_spec)
    assert staged.metrics_url == (None if scrape else server.metrics_url)


def test_only_an_embedded_server_s_measurer_measures_crowded_windows_again(tmp_path: Path) -> None:
    """A remote server's own CPU is among the other processes /proc/stat shows (a sidecar shares the node): there
    the rule would read a spinning candidate as a crowd (gpt_triton/measure/crowding.py)."""
    clients = {}
    for mode in ("embedded", "remote"):
        server = SimpleNamespace(mode=mode, grpc_url="127.0.0.1:1", http_url="", metrics_url=None, exit_note=_alive)
        clients[mode] = serving.measurer(_run(tmp_path, TuneSpec()), server, lambda _m: None,  # type: ignore[arg-type]
                                         "search").client
    # The embedded server's client is watched for the server's death (gpt_triton/measure/server_watch.py).
    assert isinstance(clients["embedded"], ServerWatch) and clients["embedded"].exit_note is _alive
    crowded = clients["embedded"].inner
    assert isinstance(crowded, RepeatCrowded) and crowded.share == 0.25
    assert isinstance(crowded.inner, WatchedClient)
    assert isinstance(clients["remote"], WatchedClient)
    off = TuneSpec.model_validate({"measure": {"repeat_crowded": 0}})
    server = SimpleNamespace(mode="embedded", grpc_url="127.0.0.1:1", http_url="", metrics_url=None, exit_note=_alive)
    watched = serving.measurer(_run(tmp_path, off), server, lambda _m: None, "search").client  # type: ignore[arg-type]
    assert isinstance(watched, ServerWatch) and isinstance(watched.inner, WatchedClient)
