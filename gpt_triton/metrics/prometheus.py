"""A small client for Prometheus's HTTP API and the rendering of our bundled scrape configuration.

Only what the canary gates and the tests need: instant queries (``/api/v1/query``) and readiness.
The config template (``gpt_triton/monitoring/prometheus.yml``) is itself a valid Prometheus config,
so ``promtool check config`` runs on the shipped file; :func:`render_prometheus_config` fills in
the real targets instead of string-templating it.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpt_triton.core.errors import GptTritonError


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector."""

    labels: dict[str, str] = field(default_factory=dict)
    value: float = math.nan


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url if "://" in url else f"http://{url}"


class PrometheusClient:
    """Instant PromQL queries against one Prometheus server."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = _base(url)
        self.timeout_s = timeout_s

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            # Prometheus answers a bad query with 400 and a JSON body naming the parse error.
            try:
                body = json.loads(exc.read())
                detail = body.get("error", str(exc))
            except (ValueError, OSError):
                detail = str(exc)
            raise GptTritonError(f"Prometheus at {self.url} rejected {path}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise GptTritonError(
                f"Prometheus at {self.url} is unreachable ({exc}); check --prometheus URL"
            ) from exc

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=self.timeout_s) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def query(self, expr: str) -> list[Sample]:
        """Evaluate ``expr`` now; returns the instant vector (a scalar result becomes one sample)."""
        body = self._get("/api/v1/query", {"query": expr})
        if body.get("status") != "success":
            raise GptTritonError(f"Prometheus query failed: {body.get('error', body)}")
        data = body["data"]
        if data["resultType"] == "vector":
            return [Sample(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        raise GptTritonError(f"PromQL {expr!r} returned a {data['resultType']}; gates need an instant vector")

    def query_value(self, expr: str) -> float | None:
        """The single value of ``expr``, or None when there is no data (empty, NaN or infinite).

        "No data" is never a number: the caller decides whether it is inconclusive or a failure.
        """
        samples = self.query(expr)
        if len(samples) > 1:
            raise GptTritonError(f"PromQL {expr!r} returned {len(samples)} series; aggregate it to one with sum()")
        if not samples or not math.isfinite(samples[0].value):
            return None
        return samples[0].value


def monitoring_dir() -> Path:
    """The directory of the bundled monitoring assets (config template, rules, dashboard)."""
    return Path(str(resources.files("gpt_triton") / "monitoring"))


def render_prometheus_config(
    *,
    triton_targets: list[str],
    pushgateway_targets: list[str] | None = None,
    scrape_interval: str = "15s",
    evaluation_interval: str | None = None,
    rule_files: list[str] | None = None,
) -> str:
    """The bundled config with real targets: Triton metrics endpoints (HOST:PORT) and Pushgateways.

    Jobs keep the template's names ("triton", "pushgateway") so rules and dashboards match.
    """
    config: dict[str, Any] = yaml.safe_load((monitoring_dir() / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = scrape_interval
    config["global"]["evaluation_interval"] = evaluation_interval or scrape_interval
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["triton"]["static_configs"] = [{"targets": list(triton_targets)}]
    if pushgateway_targets:
        jobs["pushgateway"]["static_configs"] = [{"targets": list(pushgateway_targets)}]
    else:
        config["scrape_configs"] = [job for job in config["scrape_configs"] if job["job_name"] != "pushgateway"]
    if rule_files is not None:
        config["rule_files"] = list(rule_files)
    return yaml.safe_dump(config, sort_keys=False)
