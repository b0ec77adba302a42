"""monitoring.backend: which API the chart's scrape and alert objects use. gmp renders Managed Service for
Prometheus' objects (monitoring.googleapis.com/v1), checked as helm renders them and as GMP's operator
would turn them into a Prometheus configuration (promtool checks it); test_install.py installs them on the
test bed and scrapes with them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import gmp, tools
from tests.chart.conftest import CHART
from tests.chart.test_chart import MONITORING_APIS, by_kind, render, run_helm

EVERYTHING = [
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "metrics.podMonitor.enabled=true",
    "--set", "metrics.tpuDevicePlugin.podMonitor.enabled=true",
    "--set", "alerts.enabled=true",
]  # fmt: skip
WITH_RULES = [*MONITORING_APIS, "monitoring.coreos.com/v1/PrometheusRule"]
PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
GMP_KINDS = {"PodMonitoring", "ClusterPodMonitoring", "ClusterRules"}


def gmp_render(helm: Path, *args: str) -> dict[str, list[dict[str, Any]]]:
    return by_kind(render(helm, "--set", "monitoring.backend=gmp", *EVERYTHING, *args))


def test_the_default_backend_is_the_prometheus_operator_and_none_makes_no_monitoring_object(helm):
    default = by_kind(render(helm, *EVERYTHING, apis=WITH_RULES))
    assert set(default) >= PROMETHEUS_OPERATOR_KINDS and not GMP_KINDS & set(default)
    none = by_kind(render(helm, "--set", "monitoring.backend=none", *EVERYTHING))
    assert not (PROMETHEUS_OPERATOR_KINDS | GMP_KINDS) & set(none)


def test_gmp_scrapes_the_operator_pods_the_trainers_everywhere_and_the_device_plugin(helm):
    kinds = gmp_render(helm)
    assert not PROMETHEUS_OPERATOR_KINDS & set(kinds)
    monitorings = {m["metadata"]["name"]: m for m in kinds["PodMonitoring"]}
    operator = monitorings["rel-tpujob-operator-metrics"]  # GMP's job label: what TPUJobOperatorDown reads
    assert operator["metadata"]["namespace"] == "tpujob-system"
    deployment = by_kind(render(helm))["Deployment"][0]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert operator["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert operator["spec"]["endpoints"][0]["port"] in {p["name"] for p in ports}
    (trainers,) = kinds["ClusterPodMonitoring"]
    assert trainers["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "tpujob-operator"}
    }
    assert trainers["spec"]["targetLabels"]["metadata"] == ["namespace", "pod", "container"]
    assert [m["to"] for m in trainers["spec"]["targetLabels"]["fromPod"]] == ["tpujob", "slice", "worker"]
    assert trainers["spec"]["limits"] == {"samples": 1000}
    plugin = monitorings["rel-tpujob-operator-tpu-device-plugin"]
    assert plugin["metadata"]["namespace"] == "kube-system"
    assert plugin["spec"]["endpoints"][0]["port"] == 2112  # undeclared: a number
    # The alerts: the same groups as the PrometheusRule's.
    (rules,) = kinds["ClusterRules"]
    rule = by_kind(render(helm, "--set", "alerts.enabled=true", apis=WITH_RULES))
    assert rules["spec"]["groups"] == rule["PrometheusRule"][0]["spec"]["groups"]


def test_gmp_with_named_namespaces_makes_a_podmonitoring_in_each(helm):
    kinds = gmp_render(
        helm, "--set", "metrics.podMonitor.namespaces={team-a,team-b}", "--set", "alerts.enabled=false"
    )
    assert "ClusterPodMonitoring" not in kinds
    trainers = [m for m in kinds["PodMonitoring"] if m["metadata"]["name"].endswith("-trainers")]
    assert [m["metadata"]["namespace"] for m in trainers] == ["team-a", "team-b"]
    # A PodMonitoring always sets namespace; GMP refuses it in its metadata list.
    assert all(m["spec"]["targetLabels"]["metadata"] == ["pod", "container"] for m in trainers)
    watched = gmp_render(helm, "--set", "watchNamespace=ml")
    assert [
        m["metadata"]["namespace"] for m in watched["PodMonitoring"] if "trainers" in m["metadata"]["name"]
    ] == ["ml"]


def test_gmp_scrapes_the_authenticated_operator_with_a_token_secret_only_the_collector_may_read(helm):
    documents = render(
        helm, "--set", "monitoring.backend=gmp", *EVERYTHING, "--set", "metrics.auth.enabled=true"
    )
    kinds = by_kind(documents)
    (operator,) = [
        m for m in kinds["PodMonitoring"] if m["metadata"]["name"] == "rel-tpujob-operator-metrics"
    ]
    endpoint = operator["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["tls"] == {"insecureSkipVerify": True}
    secret_name = endpoint["authorization"]["credentials"]["secret"]["name"]
    (secret,) = [s for s in kinds["Secret"] if s["metadata"]["name"] == secret_name]
    assert secret["type"] == "kubernetes.io/service-account-token"
    scraper = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    binding = [
        b
        for b in kinds["ClusterRoleBinding"]
        if b["metadata"]["name"] == "rel-tpujob-operator-metrics-scraper"
    ]
    assert binding[0]["roleRef"]["name"] == "rel-tpujob-operator-metrics-reader"
    assert binding[0]["subjects"][0]["name"] == scraper
    (role,) = [r for r in kinds["Role"] if r["metadata"]["name"].endswith("-secret-read")]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "list", "watch"],
            "resourceNames": [secret_name],
        }
    ]
    (read,) = [b for b in kinds["RoleBinding"] if b["metadata"]["name"].endswith("-secret-read")]
    assert read["subjects"] == [{"kind": "ServiceAccount", "name": "collector", "namespace": "gmp-system"}]
    # A verified certificate: GMP verifies the Secret's CA under the Service's name.
    verified = gmp_render(
        helm, "--set", "metrics.auth.enabled=true", "--set", "metrics.auth.tls.secretName=metrics-cert"
    )
    (operator,) = [
        m for m in verified["PodMonitoring"] if m["metadata"]["name"] == "rel-tpujob-operator-metrics"
    ]
    assert operator["spec"]["endpoints"][0]["tls"] == {
        "ca": {"secret": {"name": "metrics-cert", "key": "ca.crt"}},
        "serverName": "rel-tpujob-operator-metrics.tpujob-system.svc",
    }


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("PodMonitoring", "metrics.serviceMonitor.enabled"),
        ("ClusterPodMonitoring", "metrics.podMonitor.enabled"),
        ("PodMonitoring", "metrics.tpuDevicePlugin.podMonitor.enabled"),
        ("ClusterRules", "alerts.enabled"),
    ],
)
def test_gmp_refuses_to_render_without_its_api(helm, kind, value):
    result = run_helm(
        helm, "template", "rel", str(CHART), "--set", "monitoring.backend=gmp", "--set", f"{value}=true"
    )
    assert result.returncode != 0
    assert (
        f"{value}=true with monitoring.backend=gmp needs Managed Service for Prometheus' API" in result.stderr
    )
    assert f"monitoring.googleapis.com/v1 (kind {kind})" in result.stderr


def test_the_gmp_objects_convert_to_a_configuration_prometheus_accepts(helm, tmp_path):
    """As GMP's operator converts them (tests/chart/gmp.py), checked by promtool: relabelings, limits, TLS."""
    kinds = gmp_render(helm, "--set", "metrics.auth.enabled=true")
    secret = tmp_path / "secret"
    secret.write_text("token")
    configs = [
        config
        for monitoring in kinds["PodMonitoring"] + kinds["ClusterPodMonitoring"]
        for config in gmp.scrape_configs(monitoring, "p", "us-east5", "c", lambda *_: secret)
    ]
    for config in configs:
        config["file_sd_configs"] = [{"files": [str(tmp_path / "pods.json")]}]
    assert {c["job_name"] for c in configs} == {
        "PodMonitoring/tpujob-system/rel-tpujob-operator-metrics/metrics",
        "ClusterPodMonitoring/rel-tpujob-operator-trainers/metrics",
        "PodMonitoring/kube-system/rel-tpujob-operator-tpu-device-plugin/2112",
    }
    (tmp_path / "pods.json").write_text("[]")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": configs}))
    try:
        _, promtool = tools.prometheus()
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    check = subprocess.run(
        [str(promtool), "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_conversion_follows_gmps_operator():
    """A table of what prometheus-engine's pod_config.go gives: the namespace kept for a PodMonitoring, the
    selector as keep rules, instance and address by port name or number, fromPod last, protected labels."""
    monitoring = {
        "kind": "PodMonitoring",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {
            "selector": {
                "matchLabels": {"app.kubernetes.io/name": "x"},
                "matchExpressions": [{"key": "a", "operator": "Exists"}],
            },
            "targetLabels": {
                "metadata": ["pod"],
                "fromPod": [{"from": "tpujob.dev/job-name", "to": "tpujob"}],
            },
            "endpoints": [
                {"port": 2112, "interval": "30s"},
                {"port": "metrics", "interval": "10s", "timeout": "5s"},
            ],
        },
    }
    numeric, named = gmp.scrape_configs(monitoring, "p", "l", "c", lambda *_: Path("/dev/null"))
    rules = numeric["relabel_configs"]
    assert rules[3] == {"action": "keep", "source_labels": ["__meta_kubernetes_namespace"], "regex": "ns"}
    assert rules[4] == {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
        "regex": "x",
    }
    assert rules[5] == {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_labelpresent_a"],
        "regex": "true",
    }
    assert {"action": "replace", "target_label": "job", "replacement": "m"} in rules
    assert rules[-2]["target_label"] == "__address__" and rules[-2]["replacement"] == "$1:2112"
    assert rules[-1] == {
        "action": "replace",
        "source_labels": ["__meta_kubernetes_pod_label_tpujob_dev_job_name"],
        "target_label": "tpujob",
    }
    assert (numeric["scrape_timeout"], named["scrape_timeout"]) == ("30s", "5s")
    assert {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": "metrics",
    } in named["relabel_configs"]
    monitoring["spec"]["endpoints"][0]["metricRelabeling"] = [
        {"sourceLabels": ["x"], "targetLabel": "namespace"}
    ]
    with pytest.raises(AssertionError, match="GMP refuses to relabel onto namespace"):
        gmp.scrape_configs(monitoring, "p", "l", "c", lambda *_: Path("/dev/null"))
