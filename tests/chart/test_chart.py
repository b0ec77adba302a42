"""The Helm chart with the real helm binary, no cluster: lint, render each scenario, check what it
promises (least-privilege RBAC from tpujob.rbac.RULES, the operator's settings, monitoring), the values
schema, generated files, and the dashboard's PromQL against the metrics the code exports."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from scripts.chart_values import Values

from tests.chart import dashboard, tools
from tests.chart.conftest import CHART, REPO
from tpujob.api import constants as c
from tpujob.api.tenancy import NamespacePolicy
from tpujob.config import ENVIRONMENT, OperatorConfig
from tpujob.rbac import CLUSTER_RULES, KUEUE_CLUSTER_RULES, KUEUE_RULES, RULES

SCENARIOS = {
    "default": None,
    **{p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*"))},
}
MONITORING_APIS = [
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    *(
        f"monitoring.googleapis.com/v1/{kind}"
        for kind in ("PodMonitoring", "ClusterPodMonitoring", "ClusterRules")
    ),
]


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)


def render(helm: Path, *args: str, apis: list[str] | None = None) -> list[dict[str, Any]]:
    command = ["template", "rel", str(CHART), "--namespace", "tpujob-system", *args]
    for api in apis if apis is not None else MONITORING_APIS:
        command += ["--api-versions", api]
    result = run_helm(helm, *command)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(documents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def values_args(scenario: str) -> list[str]:
    path = SCENARIOS[scenario]
    return ["-f", str(path)] if path else []


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_lint_and_template_pass(helm, scenario):
    lint = run_helm(helm, "lint", "--strict", str(CHART), *values_args(scenario))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert render(helm, *values_args(scenario))


def test_default_install_is_cluster_wide_least_privilege_and_restricted(helm):
    kinds = by_kind(render(helm))
    assert sorted(kinds) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]
    role = named(kinds["ClusterRole"], "rel-tpujob-operator")
    assert sorted(r["metadata"]["name"] for r in kinds["ClusterRole"]) == [
        "rel-tpujob-operator",
        "tpujob-edit",
        "tpujob-view",
    ]
    assert role["rules"] == RULES + CLUSTER_RULES
    (binding,) = kinds["ClusterRoleBinding"]
    (account,) = kinds["ServiceAccount"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "rel-tpujob-operator",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "tpujob-system"}
    ]
    (deployment,) = kinds["Deployment"]
    spec = deployment["spec"]
    assert (spec["replicas"], spec["strategy"]["type"]) == (2, "RollingUpdate")
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["args"] == ["operator"]
    assert env_of(kinds["Deployment"][0])["TPUJOB_KUEUE"] == "false"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8000, "health": 8081}
    (service,) = kinds["Service"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()


def test_kueue_grants_the_workload_rules_cluster_wide_and_in_a_namespace(helm):
    """kueue.enabled adds tpujob.rbac.KUEUE_RULES; the cluster-scoped KUEUE_CLUSTER_RULES only to a
    ClusterRole (a Role cannot grant them)."""
    role = named(by_kind(render(helm, "--set", "kueue.enabled=true"))["ClusterRole"], "rel-tpujob-operator")
    assert role["rules"] == RULES + CLUSTER_RULES + KUEUE_RULES + KUEUE_CLUSTER_RULES
    (role,) = by_kind(render(helm, "--set", "kueue.enabled=true,watchNamespace=ml"))["Role"]
    assert role["rules"] == RULES + KUEUE_RULES


def env_of(deployment: dict) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_every_operator_setting_is_a_value(helm):
    """The Deployment sets every TPUJOB_* variable of config.ENVIRONMENT, each from a value."""
    documents = render(
        helm,
        "--set", "gke.project=p-123456,gke.location=europe-west4,gke.cluster=c1,gke.zone=europe-west4-a",
        "--set", "gke.endpoint=http://gke.local,watchNamespace=ml,logFormat=json",
        "--set", "gke.upgradeShield=false,gke.flexStartZoneFallback=true",
        "--set", "kueue.enabled=true",
        "--set", "metrics.port=9100,health.port=9101",
        "--set", "operator.resyncSeconds=7,operator.sweepSeconds=8,operator.workers=9",
        "--set", "operator.restartBackoffSeconds=3,operator.unschedulableGraceSeconds=4",
        "--set", "operator.startupGraceSeconds=6",
        "--set", "operator.pollProvisioningSeconds=0.5",
        "--set", "operator.apiQps=12.5,operator.apiBurst=25",
        "--set", "operator.apiConnectTimeoutSeconds=2,operator.apiReadTimeoutSeconds=15",
        "--set", "operator.gkeTimeoutSeconds=45,operator.refusedBackoffSeconds=40",
        "--set", "operator.progressReadsPerSecond=2.5,operator.maxHostsPerJob=512",
        "--set", "peering.lifetimeSeconds=20,peering.renewDeadlineSeconds=12",
        "--set", "gke.identity=tpujob-ops@p-123456.iam.gserviceaccount.com",
        "--set", "gke.nodeServiceAccount=tpu-nodes@p-123456.iam.gserviceaccount.com",
        "--set", "gke.nodeOAuthScopes={https://www.googleapis.com/auth/devstorage.read_write,"
        "https://www.googleapis.com/auth/logging.write}",
        "--set", "metrics.auth.enabled=true,networkPolicy.jobs.enabled=false",
        "--set", "metrics.auth.tls.secretName=operator-metrics-tls",
        "--set", "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prom",
        "--set", "tenancy.namespaces.ml.hostNetwork=true,tenancy.namespaces.ml.maxChips=256",
    )  # fmt: skip
    (deployment,) = by_kind(documents)["Deployment"]
    container_env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    env = {e["name"]: e["value"] for e in container_env if e["name"].startswith("TPUJOB_")}
    assert set(env) == set(ENVIRONMENT)
    # The tenancy value, as the operator reads it: the defaults, and team ml's overrides over them.
    policy = OperatorConfig(tenancy_policy=env.pop("TPUJOB_TENANCY_POLICY")).tenancy
    assert policy.for_namespace("ml").host_network and policy.for_namespace("ml").max_chips == 256
    assert policy.for_namespace("other") == NamespacePolicy()
    # kopf's identity of the replica in the peering object: the pod's name.
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container_env
    assert env == {
        "TPUJOB_LOG_FORMAT": "json",
        "TPUJOB_GKE_PROJECT": "p-123456",
        "TPUJOB_GKE_LOCATION": "europe-west4",
        "TPUJOB_GKE_CLUSTER": "c1",
        "TPUJOB_GKE_ZONE": "europe-west4-a",
        "TPUJOB_GKE_ENDPOINT": "http://gke.local",
        "TPUJOB_GKE_UPGRADE_SHIELD": "false",
        "TPUJOB_GKE_FLEX_START_ZONE_FALLBACK": "true",
        "TPUJOB_KUEUE": "true",
        "TPUJOB_NAMESPACE": "ml",
        "TPUJOB_METRICS_PORT": "9100",
        "TPUJOB_HEALTH_PORT": "9101",
        "TPUJOB_API_QPS": "12.5",
        "TPUJOB_API_BURST": "25",
        "TPUJOB_RESYNC_SECONDS": "7",
        "TPUJOB_SWEEP_SECONDS": "8",
        "TPUJOB_WORKERS": "9",
        "TPUJOB_RESTART_BACKOFF_SECONDS": "3",
        "TPUJOB_UNSCHEDULABLE_GRACE_SECONDS": "4",
        "TPUJOB_STARTUP_GRACE_SECONDS": "6",
        "TPUJOB_POLL_PROVISIONING_SECONDS": "0.5",
        "TPUJOB_PEERING": "rel-tpujob-operator",
        "TPUJOB_PEERING_LIFETIME_SECONDS": "20",
        "TPUJOB_PEERING_RENEW_DEADLINE_SECONDS": "12",
        "TPUJOB_API_CONNECT_TIMEOUT_SECONDS": "2",
        "TPUJOB_API_READ_TIMEOUT_SECONDS": "15",
        "TPUJOB_GKE_TIMEOUT_SECONDS": "45",
        "TPUJOB_REFUSED_BACKOFF_SECONDS": "40",
        "TPUJOB_PROGRESS_READS_PER_SECOND": "2.5",
        "TPUJOB_GKE_IDENTITY": "tpujob-ops@p-123456.iam.gserviceaccount.com",
        "TPUJOB_GKE_NODE_SERVICE_ACCOUNT": "tpu-nodes@p-123456.iam.gserviceaccount.com",
        "TPUJOB_GKE_NODE_OAUTH_SCOPES": "https://www.googleapis.com/auth/devstorage.read_write,"
        "https://www.googleapis.com/auth/logging.write",
        "TPUJOB_METRICS_AUTH": "true",
        "TPUJOB_METRICS_CERT_DIR": "/etc/tpujob/metrics-tls",
        "TPUJOB_NETWORK_POLICY": "false",
        "TPUJOB_NETWORK_POLICY_METRICS_FROM": json.dumps(
            [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tpujob-system"}},
                    "podSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/instance": "rel",
                            "app.kubernetes.io/name": "tpujob-operator",
                        }
                    },
                },
                {"podSelector": {"matchLabels": {"app": "prom"}}},
            ],
            separators=(",", ":"),
        ),
        "TPUJOB_MAX_HOSTS_PER_JOB": "512",
        # Each replica draws its own: one value shared by the Deployment's replicas would pause them all.
        "TPUJOB_PEERING_PRIORITY": "",
    }


def test_two_replicas_roll_one_at_a_time_keep_one_through_a_drain_and_share_a_peering(helm):
    """The chart ships kopf's peering CRDs; the replicas' operator creates its peering object."""
    for plural in ("clusterkopfpeerings", "kopfpeerings"):
        crd = yaml.safe_load((CHART / f"crds/kopf.dev_{plural}.yaml").read_text())
        assert crd["spec"]["names"]["plural"] == plural
    kinds = by_kind(render(helm))
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == (
        "kubernetes.io/hostname"
    )
    (budget,) = kinds["PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TPUJOB_PEERING"] == "rel-tpujob-operator"  # the operator creates it in kopf's CRD
    # One replica: no budget (it would block every drain).
    assert "PodDisruptionBudget" not in by_kind(render(helm, "--set", "replicaCount=1"))


def test_namespace_scoped_uses_a_role_and_the_crd_without_cel(helm):
    kinds = by_kind(render(helm, *values_args("namespaced")))
    # Only the users' aggregated roles are cluster-wide; the operator's own rules sit in a Role.
    assert sorted(r["metadata"]["name"] for r in kinds["ClusterRole"]) == ["tpujob-edit", "tpujob-view"]
    assert "ClusterRoleBinding" not in kinds
    (role,) = kinds["Role"]
    (binding,) = kinds["RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "ml-team"
    assert role["rules"] == RULES
    assert binding["subjects"][0]["namespace"] == "tpujob-system"
    crds = {crd["metadata"]["name"]: crd for crd in kinds["CustomResourceDefinition"]}
    assert sorted(crds) == sorted([c.CRD_NAME, "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"])
    crd = crds[c.CRD_NAME]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "x-kubernetes-validations" not in json.dumps(crd)
    assert crd["spec"] == yaml.safe_load((CHART / "files/crd-no-cel.yaml").read_text())["spec"]


def test_crd_template_with_cel_is_the_crds_folder_copy(helm):
    documents = by_kind(render(helm, "--set", "crds.install=true,crds.keep=false"))[
        "CustomResourceDefinition"
    ]
    (crd,) = [d for d in documents if d["metadata"]["name"] == c.CRD_NAME]
    assert crd["spec"] == yaml.safe_load((CHART / "crds/tpujob.dev_tpujobs.yaml").read_text())["spec"]
    assert "x-kubernetes-validations" in json.dumps(crd)
    assert "annotations" not in crd["metadata"]


def test_workload_identity_annotates_the_service_account(helm):
    kinds = by_kind(render(helm, *values_args("workload-identity")))
    (account,) = kinds["ServiceAccount"]
    annotation = account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    assert annotation == "tpujob-operator@my-project.iam.gserviceaccount.com"
    (deployment,) = kinds["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "us-docker.pkg.dev/my-project/tpujob/tpujob-operator:0.1.0"


def test_monitoring_scrapes_the_operator_service_and_the_trainer_pods(helm):
    from tests.manifests import base_job
    from tpujob.api import parse_tpujob
    from tpujob.render import Cluster
    from tpujob.render import plan as render_plan

    kinds = by_kind(render(helm, *values_args("monitoring")))
    (service,) = kinds["Service"]
    (monitor,) = kinds["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The PodMonitor selects the pods the operator renders, by their port named "metrics".
    pod_monitor = named(kinds["PodMonitor"], "rel-tpujob-operator-trainers")
    job = parse_tpujob({**base_job("train"), "metadata": {"name": "train", "namespace": "ml", "uid": "u1"}})
    pod = render_plan.pod(job, Cluster(), 0, 0, 0)
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    endpoint = pod_monitor["spec"]["podMetricsEndpoints"][0]
    port_names = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    assert endpoint["port"] in port_names
    relabeled = {r["targetLabel"]: r["sourceLabels"][0] for r in endpoint["relabelings"]}
    assert relabeled == {
        "tpujob": "__meta_kubernetes_pod_label_tpujob_dev_job_name",
        "slice": "__meta_kubernetes_pod_label_tpujob_dev_slice",
        "worker": "__meta_kubernetes_pod_label_tpujob_dev_worker",
    }
    for label in (c.LABEL_JOB_NAME, c.LABEL_SLICE, c.LABEL_WORKER):  # what Prometheus calls them
        source = "__meta_kubernetes_pod_label_" + label.replace(".", "_").replace("/", "_").replace("-", "_")
        assert source in relabeled.values() and label in pod["metadata"]["labels"]
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    (config_map,) = kinds["ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["tpujob.json"]) == dashboard.load()


def named(documents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [doc for doc in documents if doc["metadata"]["name"] == name]
    return found


def relabel(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """One Prometheus `replace` relabeling (a PodMonitor's camelCase fields): the regex is anchored at both
    ends (Prometheus), an unmatched one leaves the labels as they are."""
    assert rule.get("action", "replace") == "replace"
    value = rule.get("separator", ";").join(labels.get(name, "") for name in rule["sourceLabels"])
    match = re.fullmatch(rule.get("regex", "(.*)"), value)
    if match is None:
        return labels
    replacement = re.sub(r"\$(\d+)", lambda m: match.group(int(m.group(1))), rule.get("replacement", "$1"))
    return {**labels, rule["targetLabel"]: replacement}


def test_the_tpu_device_plugin_monitor_scrapes_gkes_plugin_and_names_the_job_of_a_workers_chips(helm):
    from tests.manifests import base_job
    from tpujob.api import parse_tpujob
    from tpujob.render import Cluster
    from tpujob.render import plan as render_plan
    from tpujob_sandbox.gke import device_plugin

    kinds = by_kind(render(helm, *values_args("monitoring")))
    monitor = named(kinds["PodMonitor"], "rel-tpujob-operator-tpu-device-plugin")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    # GKE's DaemonSet (as the simulated GKE's device_plugin.py cites it): its pods' labels and namespace.
    assert spec["selector"] == {"matchLabels": device_plugin.POD_LABELS}
    assert spec["namespaceSelector"] == {"matchNames": [device_plugin.NAMESPACE]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert "port" not in endpoint and "portNumber" not in endpoint  # the plugin declares no port
    assert endpoint["path"] == device_plugin.PATH and endpoint["honorLabels"] is True
    keep, address, node = endpoint["relabelings"]
    assert (keep["action"], keep["regex"]) == ("keep", device_plugin.CONTAINER)
    target = relabel(address, {"__meta_kubernetes_pod_ip": "10.128.0.4"})
    assert target["__address__"] == f"10.128.0.4:{device_plugin.PORT}"
    assert node["targetLabel"] == "node"

    def stored(labels: dict[str, str]) -> dict[str, str]:
        for rule in endpoint["metricRelabelings"]:
            labels = relabel(rule, labels)
        return labels

    # Every worker pod the operator renders, whatever its job is called: the job, slice and worker come out
    # as the pod's own labels say (what the trainers' PodMonitor gives the trainer's series).
    for name in ("train", "a-s1-w2-a3", "x", "job-s0"):
        manifest = base_job(name, tpu={"type": "v5p", "topology": "2x2x4", "slices": 2})
        job = parse_tpujob({**manifest, "metadata": {"name": name, "namespace": "ml", "uid": "u1"}})
        for slice_index, worker, attempt in ((0, 0, 0), (1, 3, 12)):
            pod = render_plan.pod(job, Cluster(), slice_index, worker, attempt)
            labels = pod["metadata"]["labels"]
            (container,) = [
                x["name"] for x in pod["spec"]["containers"] if c.TPU_RESOURCE in x["resources"]["limits"]
            ]
            got = stored({"namespace": "ml", "pod": pod["metadata"]["name"], "container": container})
            assert (got["tpujob"], got["slice"], got["worker"]) == (
                labels[c.LABEL_JOB_NAME],
                labels[c.LABEL_SLICE],
                labels[c.LABEL_WORKER],
            ), pod["metadata"]["name"]
    # Chips of anything else keep their labels: a serving pod, another container, the node's own series.
    for other in (
        {"pod": "server-s0-w0-a0", "container": "server"},
        {"pod": "web-5d8f7", "container": "trainer"},
        {"pod": "tpu-device-plugin-x2k9z", "namespace": "kube-system"},
    ):
        assert stored(other) == other


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("ServiceMonitor", "metrics.serviceMonitor.enabled"),
        ("PodMonitor", "metrics.podMonitor.enabled"),
        ("PodMonitor", "metrics.tpuDevicePlugin.podMonitor.enabled"),
    ],
)
def test_monitoring_refuses_to_render_without_the_prometheus_operator_api(helm, kind, value):
    result = run_helm(helm, "template", "rel", str(CHART), "--set", f"{value}=true")
    assert result.returncode != 0
    assert (
        f"{value}=true needs the Prometheus Operator API monitoring.coreos.com/v1 (kind {kind})"
        in result.stderr
    )
    # With the API present it renders.
    assert kind in by_kind(render(helm, "--set", f"{value}=true", apis=[f"monitoring.coreos.com/v1/{kind}"]))


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("metrics.port=70000", "at '/metrics/port': maximum: got 70,000, want 65,535"),
        ("operator.workers=0", "at '/operator/workers': minimum: got 0, want 1"),
        ("operator.resyncSeconds=soon", "at '/operator/resyncSeconds'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("operator.wrokers=3", "additional properties 'wrokers' not allowed"),
        ("watchNamespace=ML_Team", "at '/watchNamespace'"),
        ("serviceAccount.gcpServiceAccount=operator@gmail.com", "at '/serviceAccount/gcpServiceAccount'"),
        ("metrics.serviceMonitor.interval=30", "at '/metrics/serviceMonitor/interval'"),
        ("monitoring.backend=datadog", "at '/monitoring/backend'"),
    ],
)
def test_schema_rejects_a_bad_value_naming_it(helm, setting, message):
    result = run_helm(helm, "template", "rel", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def _leaves(
    values: dict[str, Any], schema: dict[str, Any], path: str = ""
) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for key, value in values.items():
        node = schema.get("properties", {}).get(key)
        assert node is not None, f"{path}{key} is not in values.schema.json"
        found.append((f"{path}{key}", node))
        if isinstance(value, dict) and "properties" in node:
            found += _leaves(value, node, f"{path}{key}.")
    return found


def test_every_value_is_in_the_schema_with_a_description_and_commented():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path, node in _leaves(values, schema):
        assert node.get("description"), f"{path}: no description in values.schema.json"
    # In values.yaml, a comment above every top-level key (nested ones: see the schema's descriptions).
    lines = (CHART / "values.yaml").read_text().splitlines()
    for number, line in enumerate(lines):
        if line and line[0].isalpha():
            assert lines[number - 1].startswith("#"), f"values.yaml line {number + 1}: {line} has no comment"


def test_the_values_model_defaults_are_values_yaml():
    """scripts/chart_values.py (the schema's source) holds what values.yaml holds, defaults included."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert Values.model_validate(values).model_dump(by_alias=True) == values
    assert Values().model_dump(by_alias=True) == values


def test_generated_files_match_their_sources():
    """files/rbac-rules.yaml (tpujob.rbac.RULES), files/crd-no-cel.yaml, the dashboard and values.schema.json
    (scripts/chart_values.py): `make generate`."""
    generator = runpy.run_path(str(REPO / "scripts" / "generate_chart.py"))
    for relative, content in generator["generated"]().items():
        path = CHART / relative
        assert path.exists() and path.read_text() == content, (
            f"{path.relative_to(REPO)} drifted: run `make generate`"
        )
    assert yaml.safe_load((CHART / "files/rbac-rules.yaml").read_text()) == RULES
    assert yaml.safe_load((CHART / "files/rbac-cluster-rules.yaml").read_text()) == CLUSTER_RULES


# --- the dashboard ------------------------------------------------------------------------------------


def test_dashboard_has_the_promised_panels_and_variables():
    board = dashboard.load()
    titles = {p["title"] for p in board["panels"] if p["type"] != "row"}
    assert {
        "Jobs by phase", "Node pool provisioning time", "Time to Running", "Restarts by reason",
        "GKE errors by reason", "TPU chip-hours in the time range", "Training throughput", "Step time",
        "Loss", "Input wait", "Last checkpoint age", "TPU duty cycle", "TensorCore utilization", "HBM used",
    } <= titles  # fmt: skip
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert {"namespace", "job"} <= variables.keys()
    for panel in board["panels"]:
        if panel["type"] not in ("row", "text"):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_dashboard_is_a_complete_grafana_model():
    """grafana-foundation-sdk (scripts/dashboard.py) does not validate what it builds: the fields Grafana
    needs are here, every query panel queries the data source variable, text panels query nothing."""
    board = dashboard.load()
    assert board["schemaVersion"] >= 39
    assert board["uid"] == "tpujob-overview" and board["title"] == "TPUJob"
    assert board["tags"] == ["tpujob", "tpu", "gke"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == [
        "Jobs", "GKE node pools", "TPU capacity and cost", "Operator", "Per job: $job",
        "TPU utilization: $job", "Goodput",
    ]  # fmt: skip
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)
    source = {"type": "prometheus", "uid": "${datasource}"}
    kinds = set()
    for panel in board["panels"]:
        where, kind = panel["title"], panel["type"]
        kinds.add(kind)
        position = panel["gridPos"]
        assert position["w"] > 0 and position["h"] > 0 and position["x"] + position["w"] <= 24, where
        if kind == "row":
            assert not panel["collapsed"] and panel["panels"] == [], where  # its panels follow it
        elif kind == "text":
            assert "targets" not in panel and "datasource" not in panel, where
            assert panel["options"]["content"].strip(), where
        else:
            assert panel["datasource"] == source and panel["description"], where
            assert panel["fieldConfig"]["defaults"]["unit"], where
            assert panel["targets"], where
            for target in panel["targets"]:
                assert target["datasource"] == source and target["expr"].strip(), where
                assert target["refId"] and target["legendFormat"], where
    assert kinds == {"row", "timeseries", "bargauge", "stat"}
    titles = [p["title"] for p in board["panels"]]
    goodput = titles[titles.index("Goodput") + 1 :]
    assert goodput == ["Goodput in the time range", "Badput by category in the time range",
                       "Finished jobs' goodput ratio"]  # fmt: skip
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for name in ("namespace", "job"):
        variable = variables[name]
        assert variable["datasource"] == source
        assert variable["definition"] == variable["query"]["query"]  # the SDK's model lacks `definition`


def test_every_metric_the_dashboard_queries_is_exported_by_the_code_or_gkes_tpu_device_plugin():
    """GKE's names as the simulated GKE serves them (tpujob_sandbox/gke/device_plugin.py cites sources)."""
    from tpujob_sandbox.gke import device_plugin

    operator, trainer = dashboard.operator_metric_names(), dashboard.trainer_metric_names()
    gke = device_plugin.METRIC_NAMES
    assert "tpujob_build_info" in operator and "tpujob_jobs" in operator
    assert "tpujob_trainer_examples_total" in trainer
    used = set()
    for query in dashboard.queries():
        names = dashboard.metric_names(dashboard.substitute(query.expr))
        assert names, f"{query.where}: no metric in {query.expr!r}"
        unknown = names - operator - trainer - gke
        assert not unknown, (
            f"{query.where}: {sorted(unknown)} exported by neither the operator, the trainer nor GKE's plugin"
        )
        used |= names
    # Each per-job panel filters by the labels the PodMonitors add; the device plugin's series of chips no
    # TPUJob holds have no tpujob label, which the "All" value (.*) would match.
    for query in dashboard.queries():
        names = dashboard.metric_names(query.expr)
        per_job = not query.where.startswith("variable ")
        if per_job and (names & gke or any(n.startswith("tpujob_trainer_") for n in names)):
            assert 'namespace=~"$namespace"' in query.expr and 'tpujob=~"$job"' in query.expr, query.where
        if names & gke:
            assert 'tpujob!=""' in query.expr, query.where
    assert used & operator and used & trainer
    assert {"duty_cycle", "tensorcore_utilization", "memory_used", "memory_total"} <= used


def test_metric_name_extraction():
    expr = (
        'histogram_quantile(0.9, sum by (le, tpujob) (rate(a_bucket{x="b c", le!="1e3"}[5m])))'
        " / on(tpujob) group_left b > 0"
    )
    assert dashboard.metric_names(expr) == {"a_bucket", "b"}
    assert dashboard.metric_names("time() - max(c) * 1e3") == {"c"}


def test_every_dashboard_expression_parses_under_promtool(tmp_path):
    """promtool parses each query (with Grafana's variables filled in) as a recording rule."""
    try:
        _, promtool = tools.prometheus()
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    rules = [
        {"record": f"dashboard:query_{i}", "expr": dashboard.substitute(q.expr)}
        for i, q in enumerate(dashboard.queries())
    ]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
