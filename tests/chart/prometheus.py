"""A real Prometheus for one test module: loopback only, its own folder, stopped (with its process group)
when the test ends. Static targets stand in for the chart's ServiceMonitor and PodMonitor."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tpujob_sandbox import free_port, log_tail, start_process, stop_process, wait_for

SCRAPE_SECONDS = 1


@dataclass(frozen=True)
class Target:
    """One scrape job: a static address, or the targets a file lists (file_sd: the test writes the file when
    they exist, as Kubernetes discovery finds a DaemonSet's pod once its node is up)."""

    job: str
    address: str  # 127.0.0.1:PORT ("" with file_sd)
    labels: dict[str, str]
    file_sd: Path | None = None
    honor_labels: bool = False
    # A PodMonitor's metricRelabelings (camelCase), applied to the scraped series as Prometheus does.
    metric_relabelings: tuple[dict[str, Any], ...] = ()
    # Authenticated /metrics: HTTPS (a self-signed certificate, not verified, as the chart's ServiceMonitor
    # says) with the bearer token in this file (a ServiceAccount's, as Prometheus' own in a pod).
    bearer_token_file: Path | None = None

    def scrape_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"job_name": self.job, "honor_labels": self.honor_labels}
        if self.file_sd is not None:
            config["file_sd_configs"] = [{"files": [str(self.file_sd)], "refresh_interval": "1s"}]
        else:
            config["static_configs"] = [{"targets": [self.address], "labels": self.labels}]
        if self.bearer_token_file is not None:
            config["scheme"] = "https"
            config["tls_config"] = {"insecure_skip_verify": True}
            config["authorization"] = {"type": "Bearer", "credentials_file": str(self.bearer_token_file)}
        if self.metric_relabelings:
            config["metric_relabel_configs"] = [prometheus_relabel(r) for r in self.metric_relabelings]
        return config


def prometheus_relabel(rule: dict[str, Any]) -> dict[str, Any]:
    """A Prometheus Operator RelabelConfig (camelCase) as the relabel_config Prometheus reads."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(key, key): value for key, value in rule.items()}


class Prometheus:
    def __init__(
        self,
        binary: Path,
        folder: Path,
        targets: list[Target],
        scrape_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        """`scrape_configs`: whole scrape configurations besides the targets' (tests/chart/gmp.py's)."""
        self.binary, self.folder, self.targets = binary, folder, targets
        self.scrape_configs = scrape_configs or []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Any = None

    def config(self) -> dict[str, Any]:
        interval = f"{SCRAPE_SECONDS}s"
        return {
            "global": {
                "scrape_interval": interval,
                "evaluation_interval": interval,
                "scrape_timeout": interval,
            },
            "scrape_configs": [t.scrape_config() for t in self.targets] + self.scrape_configs,
        }

    def start(self) -> Prometheus:
        config = self.folder / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config()))
        self.process = start_process(
            [
                str(self.binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.folder / 'data'}",
                "--storage.tsdb.retention.time=1h",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            self.log,
            cwd=self.folder,
        )
        wait_for(
            self._ready, timeout=30, what="Prometheus to be ready", last_state=lambda: log_tail(self.log)
        )
        return self

    @property
    def log(self) -> Path:
        return self.folder / "prometheus.log"

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"Prometheus exited {self.process.returncode}: {log_tail(self.log)}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_seconds=10)

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH; the `data` of a success, else AssertionError with Prometheus' error."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as error:
            body = json.load(error)
        if body.get("status") != "success":
            raise AssertionError(f"{params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector's samples; a scalar as one sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def targets_health(self) -> dict[str, str]:
        """scrape job -> health (up, down, unknown)."""
        return {t["labels"]["job"]: t["health"] for t in self.api("targets")["activeTargets"]}
