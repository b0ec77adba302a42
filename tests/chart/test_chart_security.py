"""The chart's multi-tenant parts, rendered by real helm: the users' aggregated roles, the operator's
NetworkPolicy, who may read the trainers' metrics port, the trainers' sample limit and authenticated /metrics.
tests/chart/test_install.py installs them into the test bed and scrapes through the authentication."""

from __future__ import annotations

import json

from tests.chart.conftest import CHART
from tests.chart.test_chart import MONITORING_APIS, by_kind, named, render, run_helm
from tpujob.api import constants as c
from tpujob.config import NetworkPolicyPeer
from tpujob.rbac import (
    KUEUE_RULES,
    METRICS_AUTH_RULES,
    METRICS_READER_RULES,
    RULES,
    USER_EDIT_RULES,
    USER_VIEW_RULES,
)

MONITORING = ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"]
PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def selects(selector: dict, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def env_of(kinds: dict) -> dict[str, str]:
    (deployment,) = kinds["Deployment"]
    return {
        e["name"]: e.get("value", "") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }


def test_users_get_tpujob_edit_and_view_aggregated_into_the_default_roles(helm):
    kinds = by_kind(render(helm))
    edit, view = named(kinds["ClusterRole"], "tpujob-edit"), named(kinds["ClusterRole"], "tpujob-view")
    assert edit["rules"] == USER_EDIT_RULES and view["rules"] == USER_VIEW_RULES
    aggregation = "rbac.authorization.k8s.io/aggregate-to-"
    assert {
        k for k, v in edit["metadata"]["labels"].items() if k.startswith(aggregation) and v == "true"
    } == {
        f"{aggregation}admin",
        f"{aggregation}edit",
    }
    assert {
        k for k, v in view["metadata"]["labels"].items() if k.startswith(aggregation) and v == "true"
    } == {f"{aggregation}view"}
    # Users never get the status subresource's writes (the operator's), nor anything but TPUJobs.
    assert all(rule["apiGroups"] == ["tpujob.dev"] for rule in edit["rules"] + view["rules"])
    (status,) = [r for r in edit["rules"] if r["resources"] == ["tpujobs/status"]]
    assert status["verbs"] == ["get", "list", "watch"]
    assert {v for r in view["rules"] for v in r["verbs"]} == {"get", "list", "watch"}
    # A second release in the same cluster leaves them to the first.
    others = by_kind(render(helm, "--set", "rbac.aggregatedRoles.create=false"))["ClusterRole"]
    assert [r["metadata"]["name"] for r in others] == ["rel-tpujob-operator"]


def test_the_operator_networkpolicy_admits_only_prometheus_to_metrics(helm):
    assert "NetworkPolicy" not in by_kind(render(helm))  # optional, off by default
    kinds = by_kind(render(helm, "--set", "networkPolicy.operator.enabled=true,metrics.port=9100"))
    (policy,) = kinds["NetworkPolicy"]
    (deployment,) = kinds["Deployment"]
    assert policy["metadata"]["namespace"] == "tpujob-system"
    spec = policy["spec"]
    assert selects(spec["podSelector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule == {"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": 9100}]}
    # The probe's port is not listed: the kubelet comes from the pod's node, which a policy always admits.
    # No scrapers named: nothing may reach the pods but their node.
    none = by_kind(
        render(
            helm, "--set", "networkPolicy.operator.enabled=true", "--set", "networkPolicy.metricsFrom=null"
        )
    )
    assert none["NetworkPolicy"][0]["spec"]["ingress"] == []


def test_the_jobs_metrics_port_admits_this_operator_and_prometheus(helm):
    kinds = by_kind(render(helm))
    env = env_of(kinds)
    assert env["TPUJOB_NETWORK_POLICY"] == "true"
    peers = [
        NetworkPolicyPeer.model_validate(p) for p in json.loads(env["TPUJOB_NETWORK_POLICY_METRICS_FROM"])
    ]
    operator, prometheus = (peer.manifest() for peer in peers)
    # The operator's own pods (it reads worker 0's step counter there), in its namespace, and Prometheus.
    (deployment,) = kinds["Deployment"]
    assert selects(operator["podSelector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert operator["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "tpujob-system"}}
    assert prometheus == PROMETHEUS


def test_the_trainers_podmonitor_has_a_sample_limit(helm):
    args = [
        "--set",
        "metrics.podMonitor.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1/PodMonitor",
    ]
    (monitor,) = by_kind(render(helm, *args))["PodMonitor"]
    assert monitor["spec"]["sampleLimit"] == 1000
    (monitor,) = by_kind(render(helm, *args, "--set", "metrics.podMonitor.sampleLimit=250"))["PodMonitor"]
    assert monitor["spec"]["sampleLimit"] == 250
    refused = run_helm(
        helm, "template", "rel", str(CHART), *args, "--set", "metrics.podMonitor.sampleLimit=0"
    )
    assert refused.returncode != 0 and "sampleLimit" in refused.stderr


def test_authenticated_metrics_grant_the_reviews_and_a_reader_role(helm):
    plain = by_kind(render(helm, "--set", "metrics.serviceMonitor.enabled=true", *MONITORING))
    assert env_of(plain)["TPUJOB_METRICS_AUTH"] == "false"
    (endpoint,) = plain["ServiceMonitor"][0]["spec"]["endpoints"]
    assert "scheme" not in endpoint and "bearerTokenFile" not in endpoint
    assert not [r for r in plain["ClusterRole"] if "metrics" in r["metadata"]["name"]]

    kinds = by_kind(
        render(
            helm,
            "--set", "metrics.auth.enabled=true,metrics.serviceMonitor.enabled=true,watchNamespace=ml",
            "--set", "metrics.auth.readers[0].name=prometheus-k8s",
            "--set", "metrics.auth.readers[0].namespace=monitoring",
            *MONITORING,
        )
    )  # fmt: skip
    assert env_of(kinds)["TPUJOB_METRICS_AUTH"] == "true"
    # Reviews are cluster-scoped: a ClusterRole even for a namespace-scoped operator, bound to its account.
    reviews = named(kinds["ClusterRole"], "rel-tpujob-operator-metrics-auth")
    assert reviews["rules"] == METRICS_AUTH_RULES
    (account,) = kinds["ServiceAccount"]
    binding = named(kinds["ClusterRoleBinding"], "rel-tpujob-operator-metrics-auth")
    assert binding["roleRef"]["name"] == "rel-tpujob-operator-metrics-auth"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "tpujob-system"}
    ]
    reader = named(kinds["ClusterRole"], "rel-tpujob-operator-metrics-reader")
    assert reader["rules"] == METRICS_READER_RULES == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    readers = named(kinds["ClusterRoleBinding"], "rel-tpujob-operator-metrics-reader")
    assert readers["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    ]
    # The ServiceMonitor scrapes over HTTPS with Prometheus' own token.
    (endpoint,) = kinds["ServiceMonitor"][0]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}


def test_identity_values_reach_the_operator_and_bad_ones_are_refused(helm):
    env = env_of(
        by_kind(
            render(
                helm,
                "--set",
                "serviceAccount.gcpServiceAccount=tpujob-ops@my-project.iam.gserviceaccount.com",
            )
        )
    )
    assert (
        env["TPUJOB_GKE_IDENTITY"] == "tpujob-ops@my-project.iam.gserviceaccount.com"
    )  # Workload Identity's account
    assert env["TPUJOB_GKE_NODE_SERVICE_ACCOUNT"] == ""
    assert env["TPUJOB_GKE_NODE_OAUTH_SCOPES"] == "https://www.googleapis.com/auth/cloud-platform"
    federated = env_of(by_kind(render(helm, "--set", "gke.identity=my-project.svc.id.goog")))
    assert federated["TPUJOB_GKE_IDENTITY"] == "my-project.svc.id.goog"
    for value in (
        "gke.identity=ops",
        "gke.nodeServiceAccount=nodes@example.com",
        "gke.nodeOAuthScopes={storage-full}",
    ):
        refused = run_helm(helm, "template", "rel", str(CHART), "--set", value)
        assert refused.returncode != 0, value
        assert value.split("=")[0].split(".")[-1] in refused.stderr, refused.stderr


def test_the_install_notes_warn_when_the_operator_would_refuse_to_start_for_want_of_an_identity(helm):
    gke = "gke.project=my-project,gke.location=us-central1,gke.cluster=c"

    def notes(*values: str) -> str:
        result = run_helm(helm, "install", "--dry-run=client", "rel", str(CHART), "--set", ",".join(values))
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    assert "WARNING: no Google identity is set" in notes(gke)
    assert "WARNING: no Google identity" not in notes(
        gke, "serviceAccount.gcpServiceAccount=tpujob-ops@my-project.iam.gserviceaccount.com"
    )
    assert "WARNING: no Google identity" not in notes(gke, "gke.endpoint=http://gke.local")  # a simulated GKE


def test_the_install_notes_warn_when_the_tpu_nodes_would_run_as_the_default_compute_account(helm):
    gke = "gke.project=my-project,gke.location=us-central1,gke.cluster=c"

    def notes(*values: str) -> str:
        result = run_helm(helm, "install", "--dry-run=client", "rel", str(CHART), "--set", ",".join(values))
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    warned = notes(gke)
    assert "WARNING: gke.nodeServiceAccount is empty" in warned
    assert "scopes https://www.googleapis.com/auth/cloud-platform" in warned
    assert "roles/container.defaultNodeServiceAccount" in warned
    own = "gke.nodeServiceAccount=tpu-nodes@my-project.iam.gserviceaccount.com"
    assert "gke.nodeServiceAccount is empty" not in notes(gke, own)
    assert "gke.nodeServiceAccount is empty" not in notes(gke, "gke.endpoint=http://gke.local")  # simulated


VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def test_the_cluster_wide_operator_writes_nothing_in_the_system_namespaces(helm):
    """RBAC grants and never subtracts: the ClusterRole lets the operator write pods and ConfigMaps in every
    namespace. A ValidatingAdmissionPolicy takes the system namespaces back, for the operator's own
    ServiceAccount only, covering every resource of its rules with a write verb but its own TPUJobs, the
    peering and Events (a job there still says why it gets no pods)."""
    kinds = by_kind(render(helm, "--set", "kueue.enabled=true", apis=[*MONITORING_APIS, VAP]))
    (policy,), (binding,) = kinds["ValidatingAdmissionPolicy"], kinds["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (selector,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": ["kube-system", "kube-public", "kube-node-lease"],
    }
    (account,) = kinds["ServiceAccount"]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        f"request.userInfo.username == 'system:serviceaccount:tpujob-system:{account['metadata']['name']}'"
    )
    assert [v["expression"] for v in policy["spec"]["validations"]] == ["false"]
    covered = {
        (group, resource)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    writes = {
        (group, resource)
        for rule in RULES + KUEUE_RULES
        if set(rule["verbs"]) - {"get", "list", "watch"}
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    kept = {(g, r) for g, r in writes if g in (c.GROUP, "kopf.dev") or r == "events"}
    assert covered == writes - kept
    assert {
        ("", "pods"),
        ("", "configmaps"),
        ("", "services"),
        ("networking.k8s.io", "networkpolicies"),
    } <= covered
    # Where it cannot be: no such API (before 1.30), a namespace-scoped operator (its Role is its namespace
    # only), or switched off.
    assert "ValidatingAdmissionPolicy" not in by_kind(render(helm))
    for values in ("watchNamespace=team-a", "rbac.protectedNamespaces=null"):
        assert "ValidatingAdmissionPolicy" not in by_kind(render(helm, "--set", values, apis=[VAP]))


def test_the_metrics_certificate_is_verified_when_a_secret_gives_one_and_said_unverified_when_not(helm):
    on = ["--set", "metrics.auth.enabled=true,metrics.serviceMonitor.enabled=true"]
    (monitor,) = by_kind(render(helm, *on))["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["tlsConfig"] == {"insecureSkipVerify": True}  # the default
    kinds = by_kind(render(helm, *on, "--set", "metrics.auth.tls.secretName=operator-metrics-tls"))
    (monitor,) = kinds["ServiceMonitor"]
    (service,) = kinds["Service"]
    assert monitor["spec"]["endpoints"][0]["tlsConfig"] == {
        "ca": {"secret": {"name": "operator-metrics-tls", "key": "ca.crt"}},
        "serverName": f"{service['metadata']['name']}.tpujob-system.svc",
    }
    (deployment,) = kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "metrics-tls"]
    assert volume["secret"]["secretName"] == "operator-metrics-tls"
    assert {"key": "tls.key", "path": "tls.key"} in volume["secret"]["items"]  # ca.crt is not the pod's
    (container,) = pod["containers"]
    assert {"name": "metrics-tls", "mountPath": "/etc/tpujob/metrics-tls", "readOnly": True} in container[
        "volumeMounts"
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TPUJOB_METRICS_CERT_DIR"] == "/etc/tpujob/metrics-tls"
    named_one = render(
        helm,
        *on,
        "--set",
        "metrics.auth.tls.secretName=s,metrics.auth.tls.serverName=metrics.example.internal",
    )
    (monitor,) = by_kind(named_one)["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["tlsConfig"]["serverName"] == "metrics.example.internal"


def test_the_image_can_be_pinned_by_digest(helm):
    digest = "sha256:" + "ab" * 32

    def image(*values: str) -> str:
        (deployment,) = by_kind(render(helm, *values))["Deployment"]
        return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])

    assert image() == "tpujob-operator:0.1.0"  # by tag (the chart's appVersion) unless a digest is given
    assert image("--set", f"image.digest={digest},image.tag=v9") == f"tpujob-operator@{digest}"
    refused = run_helm(helm, "template", "rel", str(CHART), "--set", "image.digest=latest")
    assert refused.returncode != 0 and "digest" in refused.stderr
