"""`gpt-triton canary --emit argo|flagger`: the canary's gates as Argo Rollouts and Flagger objects.

Validated against those projects' real CRD schemas (tests/k8s/crd_schemas/README.md says where they come
from), strictly: unknown fields are errors, as `kubectl apply --validate=strict` makes them. The PromQL in
them is the gates' own (same text once the controllers' placeholders are filled) and promtool parses it.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpt_triton.canary import GateConfig, PromQLGates
from gpt_triton.canary.controller import CanaryPolicy
from gpt_triton.canary.emit import argo_analysis_template, flagger_objects
from gpt_triton.cli import main
from gpt_triton.metrics.prometheus import PrometheusClient

SCHEMAS = Path(__file__).parent / "crd_schemas"
DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PROMETHEUS = "http://prometheus-operated.monitoring:9090"


def strict(schema: Any) -> Any:
    """The CRD's openAPIV3Schema with unknown fields rejected where the API server would prune them.

    A structural schema without ``additionalProperties`` or ``x-kubernetes-preserve-unknown-fields``
    drops unknown fields silently; strict field validation (kubectl's default since 1.27 warns, `--validate=strict`
    fails) reports them. A typo'd field must fail here, not be pruned on the cluster.
    """
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def load_schema(name: str) -> dict[str, Any]:
    return strict(json.loads((SCHEMAS / name).read_text()))


ANALYSIS_TEMPLATE = load_schema("analysistemplate-argoproj-v1alpha1.json")
METRIC_TEMPLATE = load_schema("metrictemplate-flagger-v1beta1.json")
CANARY_ANALYSIS = load_schema("canary-flagger-v1beta1.json")["properties"]["spec"]["properties"]["analysis"]


def validate(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(schema).validate(obj)
    if "metadata" in obj:  # CRD schemas leave metadata to the API server: check the name as it would
        assert DNS_NAME.match(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63, obj["metadata"]


def emit(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["canary", "--model", "sleepy", "--prometheus", PROMETHEUS, *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def argo_doc(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    code, out, err = emit(capsys, "--emit", "argo", *extra)
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert len(docs) == 1
    return docs[0]


def test_argo_analysis_template_validates_against_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    template = argo_doc(capsys, "--namespace", "team-a")
    validate(template, ANALYSIS_TEMPLATE)
    assert (template["apiVersion"], template["kind"]) == ("argoproj.io/v1alpha1", "AnalysisTemplate")
    metrics = {m["name"]: m for m in template["spec"]["metrics"]}
    assert set(metrics) == {"latency-ratio", "failure-rate"}
    ratio = metrics["latency-ratio"]
    # The CLI's defaults: 1 m interval (Flagger's), one measurement per step, rollback at the first failure,
    # halt at the third inconclusive, p99 at most 1.1x stable, a 1 m window (4 scrapes of 15 s).
    assert (ratio["interval"], ratio["count"], ratio["failureLimit"], ratio["inconclusiveLimit"]) == ("1m", 4, 0, 2)
    assert ratio["successCondition"].endswith("result[0] <= 1.1") and "len(result) > 0" in ratio["successCondition"]
    assert ratio["failureCondition"].endswith("result[0] > 1.1")
    query = ratio["provider"]["prometheus"]["query"]
    assert 'quantile="0.99"' in query and 'namespace="{{args.namespace}}"' in query
    assert "[1m]" in metrics["failure-rate"]["provider"]["prometheus"]["query"]
    assert template["spec"]["args"][:2] == [{"name": "namespace", "value": "team-a"}, {"name": "model", "value": "sleepy"}]
    assert {"name": "candidate-version"} in template["spec"]["args"]  # supplied by the Rollout


def test_argo_schema_check_is_not_vacuous(capsys: pytest.CaptureFixture[str]) -> None:
    template = argo_doc(capsys)
    typo = copy.deepcopy(template)
    typo["spec"]["metrics"][0]["sucessCondition"] = typo["spec"]["metrics"][0].pop("successCondition")
    with pytest.raises(jsonschema.ValidationError, match="sucessCondition"):
        validate(typo, ANALYSIS_TEMPLATE)
    unnamed = copy.deepcopy(template)
    del unnamed["spec"]["metrics"][0]["provider"]
    with pytest.raises(jsonschema.ValidationError, match="provider"):
        validate(unnamed, ANALYSIS_TEMPLATE)


def test_missing_data_fail_leaves_argo_no_inconclusive_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    template = argo_doc(capsys, "--missing-data", "fail", "--failure-limit", "2", "--max-latency-ms", "250")
    validate(template, ANALYSIS_TEMPLATE)
    metrics = {m["name"]: m for m in template["spec"]["metrics"]}
    # Only a successCondition: an empty result does not satisfy it, so Argo counts a failure (Flagger's rule).
    assert all("failureCondition" not in m and m["failureLimit"] == 1 for m in metrics.values())
    assert metrics["latency-ms"]["successCondition"].endswith("result[0] <= 250")


def flagger_output(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    code, out, err = emit(capsys, "--emit", "flagger", "--stable-version", "1", "--candidate-version", "2", *extra)
    assert code == 0, err
    templates = [d for d in yaml.safe_load_all(out) if d]
    snippet = "\n".join(line[4:] for line in out.splitlines() if line.startswith("#   "))
    return templates, yaml.safe_load(snippet)


def test_flagger_metric_templates_and_canary_analysis_validate(capsys: pytest.CaptureFixture[str]) -> None:
    templates, snippet = flagger_output(capsys, "--max-queue-ratio", "0.5", "--steps", "10,25,50")
    assert [t["kind"] for t in templates] == ["MetricTemplate"] * 3
    for template in templates:
        validate(template, METRIC_TEMPLATE)
        assert template["apiVersion"] == "flagger.app/v1beta1"
        assert template["spec"]["provider"] == {"type": "prometheus", "address": PROMETHEUS}
        assert 'namespace="{{ namespace }}"' in template["spec"]["query"]
    analysis = snippet["analysis"]
    validate(analysis, CANARY_ANALYSIS)
    assert (analysis["interval"], analysis["threshold"], analysis["stepWeights"]) == ("1m", 1, [10, 25, 50])
    refs = {m["templateRef"]["name"] for m in analysis["metrics"]}
    assert refs == {t["metadata"]["name"] for t in templates}
    ratio = {m["name"]: m for m in analysis["metrics"]}["latency-ratio"]
    assert ratio["thresholdRange"] == {"max": 1.1} and ratio["interval"] == "1m"
    assert ratio["templateVariables"] == {"model": "sleepy", "stable_version": "1", "candidate_version": "2"}
    # The printed snippet is the function's own.
    _, analysis_direct = flagger_objects(
        model="sleepy", namespace="gpt-triton", prometheus=PROMETHEUS,
        config=GateConfig(max_queue_ratio=0.5), policy=CanaryPolicy(steps=[0.1, 0.25, 0.5], interval_s=60.0),
        window_s=60.0, stable="1", candidate="2")
    assert analysis_direct == analysis
    broken = copy.deepcopy(analysis)
    broken["metrics"][0]["thresholdRange"] = {"maximum": 1.1}
    with pytest.raises(jsonschema.ValidationError, match="maximum"):
        validate(broken, CANARY_ANALYSIS)


def fill_argo(query: str, values: dict[str, str]) -> str:
    return re.sub(r"\{\{args\.([a-z-]+)\}\}", lambda m: values[m.group(1)], query)


def fill_flagger(query: str, namespace: str, interval: str, variables: dict[str, str]) -> str:
    query = query.replace("{{ namespace }}", namespace).replace("{{ interval }}", interval)
    return re.sub(r"\{\{ variables\.([a-z_]+) \}\}", lambda m: variables[m.group(1)], query)


def gate_queries(config: GateConfig, window_s: float, namespace: str) -> dict[str, str]:
    gates = PromQLGates(PrometheusClient("http://127.0.0.1:1"), model="sleepy", stable="1", candidate="2",
                        window_s=window_s, config=config, namespace=namespace)
    return {
        "latency_ratio": f"({gates.latency_ms_query('2')}) / ({gates.latency_ms_query('1')})",
        "latency_ms": gates.latency_ms_query("2"),
        "failure_rate": gates.failure_rate_query("2"),
        "queue_ratio": gates.queue_ratio_query("2"),
    }


@pytest.mark.parametrize("latency", ["p99", "mean"])
def test_emitted_queries_are_the_gates_queries(latency: str) -> None:
    config = GateConfig(max_latency_ratio=1.1, max_latency_ms=200.0, max_failure_rate=0.01, max_queue_ratio=0.5,
                        latency=latency)  # type: ignore[arg-type]
    policy = CanaryPolicy(steps=[0.25, 1.0], interval_s=30.0)
    expected = gate_queries(config, 120.0, "team-a")
    argo = argo_analysis_template(model="sleepy", namespace="team-a", prometheus=PROMETHEUS, config=config,
                                  policy=policy, window_s=120.0)
    values = {"namespace": "team-a", "model": "sleepy", "stable-version": "1", "candidate-version": "2"}
    argo_queries = {m["name"].replace("-", "_"): fill_argo(m["provider"]["prometheus"]["query"], values)
                    for m in argo["spec"]["metrics"]}
    assert argo_queries == expected
    templates, analysis = flagger_objects(model="sleepy", namespace="team-a", prometheus=PROMETHEUS, config=config,
                                          policy=policy, window_s=120.0, stable="1", candidate="2")
    variables = analysis["metrics"][0]["templateVariables"]
    assert all(m["interval"] == "2m" for m in analysis["metrics"])
    flagger_queries = {m["name"].replace("-", "_"): fill_flagger(t["spec"]["query"], "team-a", m["interval"], variables)
                       for m, t in zip(analysis["metrics"], templates, strict=True)}
    assert flagger_queries == expected


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(binary).is_file():
        pytest.fail("promtool not found: run `make setup`", pytrace=False)
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=cwd, timeout=60, check=False)


def test_emitted_promql_parses_with_promtool(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argo = argo_doc(capsys, "--max-latency-ms", "200", "--max-queue-ratio", "0.5")
    templates, snippet = flagger_output(capsys, "--max-latency-ms", "200", "--max-queue-ratio", "0.5")
    values = {"namespace": "gpt-triton", "model": "sleepy", "stable-version": "1", "candidate-version": "2"}
    exprs = [fill_argo(m["provider"]["prometheus"]["query"], values) for m in argo["spec"]["metrics"]]
    for metric, template in zip(snippet["analysis"]["metrics"], templates, strict=True):
        exprs.append(fill_flagger(template["spec"]["query"], "gpt-triton", metric["interval"], metric["templateVariables"]))
    assert len(exprs) == 8

    def check(expressions: list[str]) -> subprocess.CompletedProcess[str]:
        rules = {"groups": [{"name": "emitted", "rules": [{"record": f"emitted:gate{i}", "expr": e}
                                                          for i, e in enumerate(expressions)]}]}
        (tmp_path / "emitted.yml").write_text(yaml.safe_dump(rules))
        return promtool("check", "rules", "emitted.yml", cwd=tmp_path)

    result = check(exprs)
    assert result.returncode == 0 and "SUCCESS: 8 rules found" in result.stdout, result.stdout + result.stderr
    # Not vacuous: an unfilled placeholder (or any broken PromQL) is refused.
    assert check([argo["spec"]["metrics"][0]["provider"]["prometheus"]["query"].replace('"{{args.model}}"', "{{args.model}}")]).returncode != 0


def test_emit_writes_out_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "analysis.yaml"
    code, stdout, err = emit(capsys, "--emit", "argo", "--out", str(out))
    assert code == 0 and stdout == "" and str(out) in err
    validate(yaml.safe_load(out.read_text()), ANALYSIS_TEMPLATE)
    assert [p.name for p in tmp_path.iterdir()] == ["analysis.yaml"]  # no temp file left behind


@pytest.mark.parametrize(("extra", "message"), [
    (["--emit", "flagger"], "--stable-version and --candidate-version"),
    (["--emit", "argo", "--window", "30s"], "fewer than 4 scrape intervals"),
    (["--emit", "argo", "--out", "/nonexistent-dir/x.yaml"], "does not exist"),
    (["--emit", "flagger", "--stable-version", "1", "--candidate-version", "2", "--scrape-interval", "1s",
      "--window", "4500ms"], "not whole seconds"),
])
def test_emit_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    code, out, err = emit(capsys, *extra)
    assert code == 2 and out == "" and err.startswith("error: ") and message in err and err.count("\n") == 1, err
