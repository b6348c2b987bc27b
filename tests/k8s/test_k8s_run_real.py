"""`gpt-triton k8s run` end to end, as the Job's tuner container runs it: a real `gpt-triton tune`
against a real Triton over gRPC (remote mode, like the sidecar), then the result bundle from its stdout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpt_triton.k8s import bundle
from gpt_triton.server import EmbeddedTriton

# The quickest whole tune: the baseline alone (so no finalist stage or re-measure either), short windows of 200
# requests (2 beyond the p99; 600+ over the 3 windows bound its tail). What is tested is the Job's side:
# remote mode, the run directory, the bundle of the promoted version.
SPEC = """\
search: {mode: fast, max_builds: 1}
families: {openvino: {enabled: false}, graph: {enabled: false}}
measure: {warmup_s: 0.2, window_s: 0.2, window_min_requests: 20, min_windows: 3, max_windows: 4,
          bootstrap_resamples: 200, tail_requests: 2}
accuracy: {synthetic_requests: 16}
"""


@pytest.mark.slow
def test_run_tunes_against_remote_triton_and_stores_bundle(tmp_path: Path, tiny_model_path: Path,
                                                           triton_server: EmbeddedTriton) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    shutil.copy(tiny_model_path, inputs / "tiny.onnx")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = {**os.environ, "JOB_NAME": "tune-tiny", "JOB_COMPLETION_INDEX": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "gpt_triton", "k8s", "run", "--model", "tiny", "--inputs", str(inputs),
         "--runs", str(tmp_path / "runs"), "--repository", str(tmp_path / "repo"), "--spec", str(spec),
         "--triton-url", triton_server.grpc_url],
        capture_output=True, text=True, env=env, timeout=540, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The result is on the (shared) volume, and the log says where.
    stored = tmp_path / "runs" / "tune-tiny" / "0" / "result.tar.gz"
    assert f"==> gpt-triton result {stored} sha256=" in proc.stdout
    data = bundle.read_result(stored.parent)
    assert data is not None
    manifest = bundle.extract_bundle(data, tmp_path / "collected")
    report = json.loads((tmp_path / "collected" / "report.json").read_text())
    assert report["status"] == "done" and report["triton_mode"] == "remote"
    # The run directory is RUNS/<job>/<index>, and the bundled artifact is the promoted version.
    assert (tmp_path / "runs" / "tune-tiny" / "0" / "report.json").is_file()
    promoted = Path(report["promoted_path"])
    assert promoted.is_relative_to(tmp_path / "repo" / "tiny")
    assert manifest["artifact"] == "artifact"
    expected = sorted(p.relative_to(promoted).as_posix() for p in promoted.rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)
    got_root = tmp_path / "collected" / "artifact"
    assert sorted(p.relative_to(got_root).as_posix() for p in got_root.rglob("*") if p.is_file()) == expected
