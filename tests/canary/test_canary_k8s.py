"""`gpt-triton canary --k8s-deployments`: the chart's stable/canary Deployments driven through the Kubernetes API.

The API server is FakeKubernetesApiServer (no cluster runs here) holding the Deployments `helm template`
renders from charts/gpt-triton. Everything else is real: one Triton serves every version of "sleepy", a
real Prometheus scrapes it, and the test's traffic plays the chart's Service: each request lands on a pod
of either Deployment in proportion to its replicas in the fake cluster and is served by the version that
Deployment pins, so replica shifts and the promotion's re-pin really move the per-version metrics.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s.fake_apiserver import FakeKubernetesApiServer
from prom_fixtures import poll
from sleepy_model import SLEEP_MS, write_sleepy_model

from gpt_triton.canary import TrafficLoop, TritonVersions, WeightedRouter
from gpt_triton.canary.cli import synthetic_requests
from gpt_triton.canary.k8s_mode import _converged
from gpt_triton.canary.router import make_inputs
from gpt_triton.cli import main
from gpt_triton.server import EmbeddedTriton

ROOT = Path(__file__).resolve().parents[2]
NS, STABLE, CANARY = "gpt-triton", "gpt-triton-stable", "gpt-triton-canary"


def install_chart(fake: FakeKubernetesApiServer, helm: str, *, stable_version: int, candidate: int, stable_replicas: int) -> None:
    """What `helm install` would create: the chart's two Triton Deployments, converged (status = spec)."""
    proc = subprocess.run(
        [helm, "template", "gpt-triton", str(ROOT / "charts" / "gpt-triton"), "--namespace", NS,
         "--show-only", "templates/triton-deployments.yaml", "--set", "model.name=sleepy,canary.enabled=true",
         "--set", f"stable.replicas={stable_replicas}",
         "--set-string", f"stable.version={stable_version},canary.version={candidate}"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    for deployment in (d for d in yaml.safe_load_all(proc.stdout) if d):
        deployment["metadata"]["namespace"] = NS
        replicas = deployment["spec"]["replicas"]
        deployment["status"] = {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}
        fake.put("deployments", deployment)


def pinned(fake: FakeKubernetesApiServer, name: str) -> tuple[int, str]:
    """(replicas, pinned version) of a Deployment as stored in the fake cluster."""
    deployment = fake.get("deployments", NS, name)
    assert deployment is not None
    init = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["initContainers"]}
    env = {e["name"]: e["value"] for e in init["pin-version"]["env"]}
    return int(deployment["spec"].get("replicas") or 0), env["VERSION"]


class ChartService(WeightedRouter):
    """The Service over both Deployments: a request picks a pod (replicas as weights), then its pinned version."""

    def __init__(self, fake: FakeKubernetesApiServer) -> None:
        super().__init__("stable", "canary", seed=0)
        self.fake = fake

    def choose(self) -> str:
        pods = [pinned(self.fake, name) for name in (STABLE, CANARY)]
        with self._cond:
            pick = self._random.random() * max(1, sum(r for r, _ in pods))
            version = pods[0][1] if pick < pods[0][0] else pods[1][1]
            self._in_flight[version] = self._in_flight.get(version, 0) + 1
            self.sent[version] = self.sent.get(version, 0) + 1
            return version


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """One real Triton serving versions 1-3 of "sleepy": in a cluster each would be its own pod."""
    root = tmp_path_factory.mktemp("k8s-canary")
    write_sleepy_model(root / "repository")
    with EmbeddedTriton(root / "repository", workdir=root / "triton") as server:
        versions = TritonVersions.from_repository(server.client(), root / "repository", "sleepy")
        versions.serve([1, 2, 3])
        # Cold starts (first-request allocations) fall here, not in a gate's window.
        for version in ("1", "2", "3"):
            for request in synthetic_requests(versions.config, count=3):
                server.client().infer("sleepy", make_inputs(request), model_version=version)
        yield server


def canary_args(fake: FakeKubernetesApiServer, prometheus: str, candidate: int, log: Path, *extra: str) -> list[str]:
    return ["canary", "--model", "sleepy", "--candidate-version", str(candidate), "--prometheus", prometheus,
            "--k8s-deployments", f"{STABLE},{CANARY}", "--namespace", NS, "--kube-server", fake.url,
            "--kube-poll", "0.05", "--log", str(log), *extra]


def run_with_service_traffic(triton: EmbeddedTriton, prometheus_factory: Any, fake: FakeKubernetesApiServer,
                             tmp_path: Path, candidate: int, *extra: str) -> tuple[int, list[dict[str, Any]], TrafficLoop]:
    assert triton.metrics_url is not None and triton.repository is not None
    # The namespace label a ServiceMonitor's targets carry: the gates select by it.
    prom = prometheus_factory(triton_targets=[triton.metrics_url.removeprefix("http://").removesuffix("/metrics")],
                              labels={"namespace": NS})
    config = TritonVersions.from_repository(triton.client(), triton.repository, "sleepy").config
    log = tmp_path / "canary.jsonl"
    with TrafficLoop(triton.grpc_url, "sleepy", ChartService(fake), synthetic_requests(config), rate=40) as traffic:
        # A fresh Prometheus needs two scrapes of the stable traffic before a rate exists: wait for that, so
        # the first check judges the canary rather than an empty TSDB.
        stable_rate = 'sum(rate(nv_inference_request_success{model="sleepy",version="1"}[2500ms])) > 0'
        poll(lambda: prom.client.query_value(stable_rate), 30.0, "Prometheus to see the stable version's traffic")
        code = main(canary_args(fake, prom.url, candidate, log, "--steps", "25,50,100", "--interval", "2.5s",
                                "--scrape-interval", "1s", *extra))
    return code, [json.loads(line) for line in log.read_text().splitlines()], traffic


@pytest.mark.slow
def test_slower_canary_is_rolled_back_and_stable_untouched(triton, labelled_prometheus, fake_api, helm, tmp_path: Path) -> None:
    assert SLEEP_MS[3] > 1.1 * SLEEP_MS[1]
    install_chart(fake_api, helm, stable_version=1, candidate=3, stable_replicas=2)
    code, log, traffic = run_with_service_traffic(triton, labelled_prometheus, fake_api, tmp_path, 3,
                                                  "--total-replicas", "4")
    assert code == 1, log[-3:]
    failed = [e for e in log if e["event"] == "check_fail"]
    assert failed and log[-1]["event"] == "rolled_back"
    ratio = {g["gate"]: g for g in failed[0]["gates"]}["latency_ratio"]
    assert ratio["verdict"] == "fail" and ratio["value"] > 1.1
    # 25 % of 4 pods is one canary pod; the rollback brings stable back to its own 2 replicas, pin unchanged.
    assert [(n, b["spec"]["replicas"]) for n, b, _ in fake_api.patches if n == CANARY] == [(CANARY, 1), (CANARY, 0)]
    assert not [b for _, b, _ in fake_api.patches if "template" in b.get("spec", {})]
    # Every replica change went through the deployments/scale subresource, never a PATCH of the Deployment.
    assert [r for r in fake_api.scale_requests if r[1] == CANARY] == [("PATCH", CANARY)] * 2
    assert not [path for method, path in fake_api.requests
                if method == "PATCH" and not path.split("?")[0].endswith("/scale")]
    assert pinned(fake_api, STABLE) == (2, "1") and pinned(fake_api, CANARY) == (0, "3")
    assert traffic.total_failed == 0, traffic.errors
    assert traffic.ok.get("3", 0) > 0 and traffic.ok["1"] > 0


@pytest.mark.slow
def test_faster_canary_is_promoted_by_repinning_stable(triton, labelled_prometheus, fake_api, helm, tmp_path: Path) -> None:
    assert SLEEP_MS[2] < SLEEP_MS[1]
    install_chart(fake_api, helm, stable_version=1, candidate=2, stable_replicas=4)
    code, log, traffic = run_with_service_traffic(triton, labelled_prometheus, fake_api, tmp_path, 2)
    assert code == 0, log[-3:]
    checks = [e for e in log if e["event"].startswith("check_")]
    assert checks and all(e["event"] == "check_pass" for e in checks) and log[-1]["event"] == "promoted"
    assert [e["weight"] for e in log if e["event"] == "shift"] == [0.25, 0.5, 1.0]
    assert pinned(fake_api, STABLE) == (4, "2") and pinned(fake_api, CANARY) == (0, "2")
    # Stable was re-pinned while the canary carried all 4 pods, and the canary retired only after that.
    order = [(n, b["spec"].get("replicas"), "template" in b["spec"]) for n, b, _ in fake_api.patches]
    repin = order.index((STABLE, 4, True))
    assert (CANARY, 4, False) in order[:repin] and order[repin + 1:] == [(CANARY, 0, False)]
    stable = fake_api.get("deployments", NS, STABLE)
    assert stable is not None and [c["name"] for c in stable["spec"]["template"]["spec"]["initContainers"]][0] == "pin-version"
    assert traffic.total_failed == 0, traffic.errors
    assert traffic.ok["1"] > 0 and traffic.ok["2"] > 0


@pytest.mark.parametrize("problem", ["missing", "forbidden", "wrong_pin"])
def test_kubernetes_problems_are_one_line_errors(problem: str, fake_api: FakeKubernetesApiServer, helm: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    if problem != "missing":
        install_chart(fake_api, helm, stable_version=1, candidate=3, stable_replicas=2)
    if problem == "forbidden":
        fake_api.fail("GET", "deployments", 403, message='deployments.apps "gpt-triton-stable" is forbidden')
    # Nothing listens on this Prometheus: the Kubernetes checks come first and change nothing.
    code = main(canary_args(fake_api, "http://127.0.0.1:1", 2 if problem == "wrong_pin" else 3, tmp_path / "log.jsonl"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err, err
    expected = {"missing": ["not found", STABLE, "helm install"], "forbidden": ["forbidden", "Role"],
                "wrong_pin": ["pins version 3", "--candidate-version 2", "canary.version=2"]}[problem]
    assert all(part in err for part in expected), err
    assert fake_api.patches == [] and not (tmp_path / "log.jsonl").exists()


def test_rollout_is_complete_only_when_the_controller_has_seen_the_new_template() -> None:
    fresh = {"metadata": {"generation": 3}, "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": 2}}
    assert not _converged(fresh, 2)  # the status still describes the old template
    old_pods = {"metadata": {"generation": 3},
                "status": {"observedGeneration": 3, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 2}}
    assert not _converged(old_pods, 2)  # an old-template pod is still running
    done = {"metadata": {"generation": 3},
            "status": {"observedGeneration": 3, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}}
    assert _converged(done, 2) and _converged({"metadata": {"generation": 4}, "status": {"observedGeneration": 4}}, 0)
