"""submit / watch / collect against FakeKubernetesApiServer, including the failures clusters produce."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from gpt_triton.cli import main
from gpt_triton.k8s import bundle
from gpt_triton.k8s.render import TuneJobParams, render_job

from .fake_apiserver import FakeKubernetesApiServer

NS = "gpt-triton"
RUNNING = {"active": 1, "startTime": "2026-01-01T00:00:00Z"}
COMPLETE = {"succeeded": 1, "conditions": [
    {"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}
FAILED = {"failed": 1, "conditions": [
    {"type": "FailureTarget", "status": "True"},
    {"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
     "message": "Container tuner for pod tune-x-0 failed with exit code 2 matching FailJob rule at index 0"}]}


def _k8s(fake: FakeKubernetesApiServer, *argv: str) -> int:
    return main(["k8s", *argv, "--server", fake.url, "-n", NS])


def _job(fake: FakeKubernetesApiServer, name: str, status: dict[str, Any] | None = None) -> None:
    fake.put("jobs", {"metadata": {"name": name, "namespace": NS}, "spec": {}, "status": status or {}})


def _spec(tmp_path: Path) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text("search:\n  mode: fast\n  max_builds: 4\n")
    return spec


# -- submit ----------------------------------------------------------------------------------------

def test_submit_creates_job_then_owned_configmap(fake_api: FakeKubernetesApiServer, tmp_path: Path) -> None:
    rc = _k8s(fake_api, "submit", "--model", "resnet50", "--spec", str(_spec(tmp_path)), "--gpu-product", "NVIDIA-L4")
    assert rc == 0
    job = fake_api.get("jobs", NS, "tune-resnet50-nvidia-l4")
    assert job is not None
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    # The client's models must not drop fields newer than they are (native sidecar, podFailurePolicy).
    rendered = render_job(TuneJobParams(models=("resnet50",), gpu_product="NVIDIA-L4"))
    assert job["spec"] == rendered["spec"]
    cm = fake_api.get("configmaps", NS, "tune-resnet50-nvidia-l4-spec")
    assert cm is not None and "max_builds: 4" in cm["data"]["spec.yaml"]
    # Garbage-collected with the Job it belongs to.
    assert cm["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    posts = [path for method, path in fake_api.requests if method == "POST"]
    assert posts[0].endswith("/jobs") and posts[1].endswith("/configmaps")


def test_submit_one_job_per_gpu_product(fake_api: FakeKubernetesApiServer) -> None:
    assert _k8s(fake_api, "submit", "--model", "m", "--gpu-product", "NVIDIA-A100-SXM4-80GB",
                "--gpu-product", "NVIDIA-L4", "--no-signing") == 0
    names = sorted(n for (r, _, n) in fake_api.objects if r == "jobs")
    assert names == ["tune-m-nvidia-a100-sxm4-80gb", "tune-m-nvidia-l4"]


def test_submit_conflict_is_one_line_exit_2(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-m-cpu")
    assert _k8s(fake_api, "submit", "--model", "m") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: conflict while creating Job gpt-triton/tune-m-cpu") and "kubectl delete job" in err
    assert len(err.splitlines()) == 1
    assert fake_api.get("configmaps", NS, "tune-m-cpu-spec") is None  # nothing half-created


def test_submit_forbidden(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake_api.fail("POST", "jobs", 403, message='jobs.batch is forbidden: User "dev" cannot create resource "jobs"')
    assert _k8s(fake_api, "submit", "--model", "m") == 2
    err = capsys.readouterr().err
    assert "forbidden while creating Job" in err and "cannot create resource" in err and "rbac" in err
    assert fake_api.get("jobs", NS, "tune-m-cpu") is None


def test_submit_missing_namespace(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["k8s", "submit", "--model", "m", "--server", fake_api.url, "-n", "nope"]) == 2
    assert "kubectl create namespace nope" in capsys.readouterr().err


def test_submit_bad_spec_fails_before_contacting_the_cluster(fake_api: FakeKubernetesApiServer, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("search:\n  mode: sideways\n")
    assert _k8s(fake_api, "submit", "--model", "m", "--spec", str(spec)) == 2
    assert "search.mode" in capsys.readouterr().err
    assert fake_api.requests == []


def test_unreachable_api_server(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["k8s", "watch", "tune-x", "--server", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the Kubernetes API" in err and f"127.0.0.1:{port}" in err and len(err.strip().splitlines()) == 1


# -- watch -----------------------------------------------------------------------------------------

def test_watch_follows_job_to_completion(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-x")
    fake_api.add_pod(NS, "tune-x-abcde", "tune-x", "Running")
    fake_api.script_job(NS, "tune-x", [RUNNING, COMPLETE])
    assert _k8s(fake_api, "watch", "tune-x") == 0
    out = capsys.readouterr().out
    assert "job tune-x: running active=1" in out and "job tune-x: complete" in out
    assert "pod tune-x-abcde: Running" in out
    assert fake_api.watch_connections == 1


@pytest.mark.parametrize("abrupt", [False, True], ids=["clean-close", "broken-stream"])
def test_watch_survives_disconnect_and_resumes(fake_api: FakeKubernetesApiServer, abrupt: bool,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-x")
    fake_api.script_job(NS, "tune-x", [RUNNING, {"active": 1, "ready": 1}, COMPLETE])
    fake_api.disconnect_watch(after_events=1, abrupt=abrupt)
    assert _k8s(fake_api, "watch", "tune-x") == 0
    assert "complete" in capsys.readouterr().out
    watches = [path for _, path in fake_api.requests if "watch=true" in path]
    assert len(watches) == 2
    # The second watch resumes from a resourceVersion, after a re-list, instead of starting over.
    assert "resourceVersion=" in watches[1]
    lists = [path for m, path in fake_api.requests if m == "GET" and "/jobs?" in path and "watch=true" not in path]
    assert len(lists) == 2


def test_watch_relists_after_410_gone(fake_api: FakeKubernetesApiServer) -> None:
    _job(fake_api, "tune-x")
    fake_api.script_job(NS, "tune-x", [COMPLETE])
    fake_api.expire_next_watch()
    assert _k8s(fake_api, "watch", "tune-x") == 0
    assert fake_api.watch_connections == 2


def test_watch_failed_job_exits_1(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-x")
    fake_api.script_job(NS, "tune-x", [RUNNING, FAILED])
    assert _k8s(fake_api, "watch", "tune-x") == 1
    assert "exit code 2 matching FailJob" in capsys.readouterr().err


def test_watch_already_finished_job_returns_without_watching(fake_api: FakeKubernetesApiServer) -> None:
    _job(fake_api, "tune-x", COMPLETE)
    assert _k8s(fake_api, "watch", "tune-x") == 0
    assert fake_api.watch_connections == 0


def test_watch_missing_job(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert _k8s(fake_api, "watch", "nope") == 2
    assert "job gpt-triton/nope not found" in capsys.readouterr().err


def test_watch_forbidden(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake_api.fail("GET", "jobs", 403, message="cannot list jobs")
    assert _k8s(fake_api, "watch", "tune-x") == 2
    assert "forbidden while listing job" in capsys.readouterr().err


# -- collect ---------------------------------------------------------------------------------------

def _run_dir(tmp_path: Path, name: str, version: int, artifact_size: int = 1000) -> str:
    run = tmp_path / name / "run"
    version_dir = tmp_path / name / "repo" / name / str(version)
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(bytes(range(256)) * (artifact_size // 256 + 1))
    run.mkdir(parents=True)
    (run / "report.json").write_text(json.dumps({
        "status": "done", "model": {"name": name}, "promoted_version": version, "promoted_path": str(version_dir)}))
    data = bundle.make_bundle(run, version_dir)
    return f"tuning {name}...\nselected winner\n" + bundle.format_bundle(data)


def test_collect_indexed_job(fake_api: FakeKubernetesApiServer, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-fan", COMPLETE)
    # Index 0 failed once (disruption) and was retried: the succeeded pod's bundle wins.
    fake_api.add_pod(NS, "tune-fan-0-aaaaa", "tune-fan", "Failed", index=0, logs={"tuner": "killed\n"},
                     created="2026-01-01T00:00:00Z")
    fake_api.add_pod(NS, "tune-fan-0-bbbbb", "tune-fan", "Succeeded", index=0,
                     logs={"tuner": _run_dir(tmp_path, "resnet", 3)}, created="2026-01-01T00:10:00Z")
    fake_api.add_pod(NS, "tune-fan-1-ccccc", "tune-fan", "Succeeded", index=1,
                     logs={"tuner": _run_dir(tmp_path, "bert", 1)})
    out = tmp_path / "collected"
    assert _k8s(fake_api, "collect", "tune-fan", "--out", str(out)) == 0
    assert json.loads((out / "0" / "report.json").read_text())["promoted_version"] == 3
    assert json.loads((out / "1" / "report.json").read_text())["model"]["name"] == "bert"
    src = tmp_path / "resnet" / "repo" / "resnet" / "3" / "model.onnx"
    assert (out / "0" / "artifact" / "model.onnx").read_bytes() == src.read_bytes()
    text = capsys.readouterr().out
    assert "index 0 (tune-fan-0-bbbbb)" in text and "artifact included" in text
    # Collecting again replaces the results and leaves no temporary directories.
    assert _k8s(fake_api, "collect", "tune-fan", "--out", str(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["0", "1"]


def test_collect_without_bundle_names_the_index(fake_api: FakeKubernetesApiServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-x", RUNNING)
    fake_api.add_pod(NS, "tune-x-zzzzz", "tune-x", "Running", logs={"tuner": "building route 3/20\n"})
    assert _k8s(fake_api, "collect", "tune-x", "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "no result bundle in the log of index 0 (tune-x-zzzzz: Running)" in err


def test_collect_truncated_log_is_an_error(fake_api: FakeKubernetesApiServer, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-x", COMPLETE)
    log = _run_dir(tmp_path, "m", 1)
    cut = log[: len(log) - 200]  # the kubelet rotated the log mid-bundle
    fake_api.add_pod(NS, "tune-x-zzzzz", "tune-x", "Succeeded", logs={"tuner": cut})
    out = tmp_path / "o"
    assert _k8s(fake_api, "collect", "tune-x", "--out", str(out)) == 2
    assert "truncated" in capsys.readouterr().err
    assert not (out / "0").exists()


def test_collect_missing_job(fake_api: FakeKubernetesApiServer, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _k8s(fake_api, "collect", "nope", "--out", str(tmp_path)) == 2
    assert "not found while reading job gpt-triton/nope" in capsys.readouterr().err


def test_collect_after_pods_were_cleaned_up(fake_api: FakeKubernetesApiServer, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _job(fake_api, "tune-x", COMPLETE)
    assert _k8s(fake_api, "collect", "tune-x", "--out", str(tmp_path / "o")) == 2
    assert "collect from the volume with --from RUNS" in capsys.readouterr().err


def _volume_run(runs: Path, job: str, index: int, name: str, version: int, size: int = 3 << 20) -> Path:
    """What `k8s run` leaves on the PVC: RUNS/<job>/<index>/report.json and result.tar.gz."""
    version_dir = runs.parent / "repository" / name / str(version)
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(bytes(range(256)) * (size // 256))
    run = runs / job / str(index)
    run.mkdir(parents=True)
    (run / "report.json").write_text(json.dumps({
        "status": "done", "model": {"name": name}, "promoted_version": version, "promoted_path": str(version_dir)}))
    bundle.write_result(run, bundle.make_bundle(run, version_dir, max_bytes=1 << 40))
    return version_dir


def test_collect_from_the_volume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Results come from the shared volume (no API call, no log pipeline), artifacts whole at any size."""
    runs = tmp_path / "pvc" / "runs"
    big = _volume_run(runs, "tune-fan", 0, "resnet", 3, size=12 << 20)  # over the old 6 MiB log cap
    _volume_run(runs, "tune-fan", 1, "bert", 1)
    out = tmp_path / "collected"
    assert main(["k8s", "collect", "tune-fan", "--from", str(runs), "--out", str(out),
                 "--server", "http://127.0.0.1:9"]) == 0  # never contacted
    assert (out / "0" / "artifact" / "model.onnx").read_bytes() == (big / "model.onnx").read_bytes()
    assert json.loads((out / "1" / "report.json").read_text())["model"]["name"] == "bert"
    assert "artifact included" in capsys.readouterr().out
    # An index still running (no result yet) is named; a corrupt result is one line, nothing installed.
    (runs / "tune-fan" / "2").mkdir()
    assert main(["k8s", "collect", "tune-fan", "--from", str(runs), "--out", str(out)]) == 2
    assert "no result.tar.gz for index 2" in capsys.readouterr().err
    (runs / "tune-fan" / "2" / "result.tar.gz").write_bytes(b"\x1f\x8b truncated")
    assert main(["k8s", "collect", "tune-fan", "--from", str(runs), "--out", str(tmp_path / "o2")]) == 2
    assert "is not a complete result bundle" in capsys.readouterr().err
    assert not (tmp_path / "o2" / "2").exists()
    assert main(["k8s", "collect", "tune-nope", "--from", str(runs), "--out", str(out)]) == 2
    assert "pass the PVC's runs/ directory as --from" in capsys.readouterr().err


def test_watch_reports_fanout_progress(fake_api: FakeKubernetesApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake_api.put("jobs", {"metadata": {"name": "tune-fan", "namespace": NS},
                          "spec": {"completionMode": "Indexed", "completions": 3}, "status": {}})
    fake_api.script_job(NS, "tune-fan", [
        {"active": 2, "completedIndexes": "0"},
        {"succeeded": 2, "failed": 1, "completedIndexes": "0,2", "failedIndexes": "1",
         "conditions": [{"type": "Failed", "status": "True", "reason": "FailedIndexes"}]},
    ])
    assert _k8s(fake_api, "watch", "tune-fan") == 1
    out = capsys.readouterr()
    assert "done-indexes=0/3 failed-indexes=-" in out.out and "done-indexes=0,2/3 failed-indexes=1" in out.out
    assert "FailedIndexes" in out.err
