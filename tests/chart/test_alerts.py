"""The chart's Prometheus alerts: files/alerts.yaml under the real promtool (its syntax, and the unit
cases of alerts_test.yaml: each alert fires, and stays quiet, when it should), the metrics it reads
against those the operator exports, the runbook it points to, and the PrometheusRule helm renders."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import dashboard, tools
from tests.chart.conftest import CHART, REPO
from tests.chart.test_chart import by_kind, render, run_helm
from tpujob_sandbox.gke import device_plugin

ALERTS = CHART / "files" / "alerts.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOK = REPO / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/tpujob/tpujob/blob/main/docs/runbook.md#runbook-{}"
RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
PROMETHEUS_METRICS = {"up"}  # Prometheus's own, per target


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return tools.prometheus()[1]
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_promtool_accepts_the_rule_file(promtool):
    result = run([str(promtool), "check", "rules", str(ALERTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool):
    result = run([str(promtool), "test", "rules", str(UNIT_TESTS)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_must_not():
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    assert {rule["alert"]: {True, False} for rule in alert_rules()} == cases


def test_every_alert_has_a_duration_severity_summary_description_and_runbook():
    anchors = {
        github_anchor(line.lstrip("#")) for line in RUNBOOK.read_text().splitlines() if line.startswith("## ")
    }
    for rule in alert_rules():
        name = rule["alert"]
        assert re.fullmatch(r"[0-9]+[smh]", rule.get("for", "")), f"{name}: no `for`"
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        assert annotations["runbook_url"] == RUNBOOK_URL.format(name.lower()), name
        assert f"runbook-{name.lower()}" in anchors, f"{name}: no `## Runbook: {name}` in docs/runbook.md"


def test_every_metric_the_alerts_read_is_exported_by_the_operator_or_gkes_tpu_device_plugin():
    """GKE's names as the simulated GKE serves them (tpujob_sandbox/gke/device_plugin.py cites sources)."""
    exported = dashboard.operator_metric_names() | PROMETHEUS_METRICS | device_plugin.METRIC_NAMES
    for rule in alert_rules():
        names = dashboard.metric_names(rule["expr"])
        assert names, f"{rule['alert']}: no metric in {rule['expr']!r}"
        assert names <= exported, f"{rule['alert']}: {sorted(names - exported)} exported by nobody"


def test_github_anchor():
    assert github_anchor(" Runbook: TPUJobOperatorDown") == "runbook-tpujoboperatordown"


# --- the PrometheusRule -------------------------------------------------------------------------------


def rendered_rules(helm: Path, *args: str) -> list[dict[str, Any]]:
    return by_kind(render(helm, *args, apis=[RULE_API])).get("PrometheusRule", [])


def test_alerts_enabled_renders_the_rule_files_groups(helm):
    (rule,) = rendered_rules(helm, "--set", "alerts.enabled=true,alerts.labels.release=kube-prometheus-stack")
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    assert rule["metadata"]["namespace"] == "tpujob-system"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_default_renders_no_rules(helm):
    assert rendered_rules(helm) == []


def test_disabled_alerts_are_left_out_and_unknown_names_refused(helm):
    (rule,) = rendered_rules(helm, "--set", "alerts.enabled=true,alerts.disabled={TPUJobStuckProvisioning}")
    names = [r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]]
    assert names == [r["alert"] for r in alert_rules() if r["alert"] != "TPUJobStuckProvisioning"]
    typo = run_helm(helm, "template", "rel", str(CHART), "--set", "alerts.disabled={TPUJobStuckProvisoning}")
    assert typo.returncode != 0
    assert "at '/alerts/disabled/0'" in typo.stderr, typo.stderr


def test_alerts_refuse_to_render_without_the_prometheus_operator_api(helm):
    result = run_helm(helm, "template", "rel", str(CHART), "--set", "alerts.enabled=true")
    assert result.returncode != 0
    assert "alerts.enabled=true needs the Prometheus Operator API monitoring.coreos.com/v1" in result.stderr
