"""Google Cloud Managed Service for Prometheus (GMP) on the test bed: its real CRDs installed on the CRD
server, and its PodMonitoring and ClusterPodMonitoring objects turned into Prometheus scrape configurations
the way GMP's operator turns them for its collectors, so the real Prometheus here scrapes what GMP would.

The conversion follows prometheus-engine v0.17.2 (commit 7920a2a222af1c09535d8141684e2944670c5041, the tag of
the CRDs in ../shared/gmp), pkg/operator/apis/monitoring/v1/:
- pod_config.go, PodMonitoring.ScrapeConfigs / ClusterPodMonitoring.ScrapeConfigs: project_id, location and
  cluster forced; a PodMonitoring keeps its own namespace's pods only; endpointScrapeConfig: the selector's
  relabelings, the metadata labels, namespace (PodMonitoring: always), job = the object's name, Failed and
  Succeeded pods dropped (filterRunning), instance = <pod>:<port name> (a DaemonSet's pod: <node>:...), a
  named port keeps the candidates of that container port, a numeric one points every candidate at
  <pod IP>:<port> and drops container, then targetLabels.fromPod; the job name "<kind>/<ns>/<name>/<port>";
- common_types.go, relabelingsForSelector (matchLabels and matchExpressions as keep/drop rules) and
  buildPrometheusScrapeConfig (path default /metrics, timeout default the interval, limits, metric
  relabelings);
- http_types.go, the endpoint's authorization and tls: Secret references. GMP's collector is a Prometheus
  build that reads them from the API server (its Kubernetes secret provider); upstream Prometheus reads
  files, so `secret_file` writes each referenced key to a file (read as the collector would, with its
  ServiceAccount's token) and the configuration names it.

Discovery: GMP's collectors run Prometheus' Kubernetes service discovery, role pod, restricted to their own
node (a field selector); one Prometheus here stands for all of them. Pods that do not run as processes on the
test bed (the operator's Deployment, GKE's TPU device plugin DaemonSet) are described by file discovery with
the labels Prometheus' Kubernetes discovery gives a pod (prometheus/prometheus discovery/kubernetes/pod.go,
podLabels and buildPod): `discovery_labels`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tpujob_sandbox import crdfiles
from tpujob_sandbox.operators import ensure_crd

GROUP = "monitoring.googleapis.com"
VERSION = "v1"
ENV_GMP_CRDS = "TPUJOB_GMP_CRDS"
DEFAULT_GMP_CRDS = Path(__file__).resolve().parents[3] / "shared" / "gmp" / "crds"
GMP_CRDS_SOURCE = "https://github.com/GoogleCloudPlatform/prometheus-engine/tree/v0.17.2/charts/operator/crds"
# pod_config.go: the metadata labels each kind allows.
POD_MONITORING_METADATA = {
    "container",
    "node",
    "pod",
    "top_level_controller_name",
    "top_level_controller_type",
}


class GmpCrdsMissing(RuntimeError):
    pass


def crds_path() -> Path:
    """TPUJOB_GMP_CRDS, or ../shared/gmp/crds beside the repository."""
    configured = os.environ.get(ENV_GMP_CRDS)
    path = Path(configured) if configured else DEFAULT_GMP_CRDS
    if not path.is_dir() or not list(path.glob("*.yaml")):
        raise GmpCrdsMissing(
            f"Managed Service for Prometheus' CRDs are not at {path}: set {ENV_GMP_CRDS} to a folder holding "
            f"prometheus-engine v0.17.2's charts/operator/crds/*.yaml ({GMP_CRDS_SOURCE})"
        )
    return path


def install_crds(api_client: k8s.ApiClient) -> list[str]:
    """Every GMP CRD, created unless present and served before this returns; their names."""
    api = k8s.ApiextensionsV1Api(api_client)
    names = []
    for definition in crdfiles.crds(crds_path()):
        ensure_crd(api, definition)
        names.append(definition["metadata"]["name"])
    return names


# --- the conversion -------------------------------------------------------------------------------------


def _sanitize(name: str) -> str:
    """Prometheus' label name sanitizing (strutil.SanitizeLabelName): every invalid character becomes _."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _selector_rules(selector: dict[str, Any]) -> list[dict[str, Any]]:
    """common_types.go, relabelingsForSelector (pods)."""
    label, present = "__meta_kubernetes_pod_label_", "__meta_kubernetes_pod_labelpresent_"
    rules: list[dict[str, Any]] = [
        {"action": "keep", "source_labels": [label + _sanitize(key)], "regex": value}
        for key, value in sorted((selector.get("matchLabels") or {}).items())
    ]
    for expression in selector.get("matchExpressions") or []:
        key, operator = _sanitize(expression["key"]), expression["operator"]
        values = "|".join(expression.get("values") or [])
        rules.append(
            {
                "In": {"action": "keep", "source_labels": [label + key], "regex": values},
                "NotIn": {"action": "drop", "source_labels": [label + key], "regex": values},
                "Exists": {"action": "keep", "source_labels": [present + key], "regex": "true"},
                "DoesNotExist": {"action": "drop", "source_labels": [present + key], "regex": "true"},
            }[operator]
        )
    return rules


def _metadata_rules(keys: set[str]) -> list[dict[str, Any]]:
    """pod_config.go, relabelingsForMetadata (the top-level controller rules are not used by this chart)."""
    sources = {
        "namespace": "__meta_kubernetes_namespace",
        "pod": "__meta_kubernetes_pod_name",
        "container": "__meta_kubernetes_pod_container_name",
        "node": "__meta_kubernetes_pod_node_name",
    }
    unsupported = keys & {"top_level_controller_name", "top_level_controller_type"}
    assert not unsupported, f"not modelled here: {unsupported}"
    return [
        {"action": "replace", "source_labels": [source], "target_label": key}
        for key, source in sources.items()
        if key in keys
    ]


def scrape_configs(
    monitoring: dict[str, Any],
    project_id: str,
    location: str,
    cluster: str,
    secret_file: Callable[[str, str, str], Path],
) -> list[dict[str, Any]]:
    """A PodMonitoring or ClusterPodMonitoring (as the API server holds it: defaults applied) as the scrape
    configurations GMP's operator gives its collectors, one per endpoint. `secret_file(namespace, name, key)`
    gives the file holding a referenced Secret's key."""
    kind, meta, spec = monitoring["kind"], monitoring["metadata"], monitoring["spec"]
    namespaced = kind == "PodMonitoring"
    assert kind in ("PodMonitoring", "ClusterPodMonitoring"), kind
    base: list[dict[str, Any]] = [
        {"action": "replace", "target_label": "project_id", "replacement": project_id},
        {"action": "replace", "target_label": "location", "replacement": location},
        {"action": "replace", "target_label": "cluster", "replacement": cluster},
    ]
    if namespaced:
        base.append(
            {"action": "keep", "source_labels": ["__meta_kubernetes_namespace"], "regex": meta["namespace"]}
        )
    base += _selector_rules(spec["selector"])
    target_labels = spec.get("targetLabels") or {}
    metadata = target_labels.get("metadata")
    if metadata is None:
        keys = set() if namespaced else {"namespace"}
    else:
        keys = set(metadata)
        allowed = POD_MONITORING_METADATA | (set() if namespaced else {"namespace"})
        assert keys <= allowed, f"{kind} {meta['name']}: metadata {sorted(keys - allowed)} not allowed"
    base += _metadata_rules(keys)
    if namespaced:
        base.append(
            {
                "action": "replace",
                "source_labels": ["__meta_kubernetes_namespace"],
                "target_label": "namespace",
            }
        )
    base.append({"action": "replace", "target_label": "job", "replacement": meta["name"]})
    if spec.get("filterRunning", True):
        base.append(
            {
                "action": "drop",
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)",
            }
        )
    key = f"{kind}/{meta['namespace']}/{meta['name']}" if namespaced else f"{kind}/{meta['name']}"
    namespace = meta["namespace"] if namespaced else "default"  # http_types.go: a cluster object's default
    return [
        _endpoint(
            key,
            endpoint,
            list(base),
            target_labels.get("fromPod") or [],
            spec.get("limits"),
            namespace,
            secret_file,
        )
        for endpoint in spec["endpoints"]
    ]


def _endpoint(
    key: str,
    endpoint: dict[str, Any],
    rules: list[dict[str, Any]],
    from_pod: list[dict[str, Any]],
    limits: dict[str, Any] | None,
    namespace: str,
    secret_file: Callable[[str, str, str], Path],
) -> dict[str, Any]:
    """pod_config.go, endpointScrapeConfig, and common_types.go, buildPrometheusScrapeConfig."""
    rules += [
        {
            "action": "replace",
            "source_labels": ["__meta_kubernetes_pod_name"],
            "target_label": "__tmp_instance",
        },
        {
            "action": "replace",
            "source_labels": ["__meta_kubernetes_pod_controller_kind", "__meta_kubernetes_pod_node_name"],
            "regex": "DaemonSet;(.*)",
            "target_label": "__tmp_instance",
            "replacement": "$1",
        },
    ]
    port = endpoint["port"]
    if isinstance(port, str):
        rules += [
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port},
            {
                "action": "replace",
                "source_labels": ["__tmp_instance", "__meta_kubernetes_pod_container_port_name"],
                "regex": "(.+);(.+)",
                "replacement": "$1:$2",
                "target_label": "instance",
            },
        ]
    else:
        rules += [
            {"action": "labeldrop", "regex": "container"},
            {
                "action": "replace",
                "source_labels": ["__tmp_instance"],
                "replacement": f"$1:{port}",
                "target_label": "instance",
            },
            {
                "action": "replace",
                "source_labels": ["__meta_kubernetes_pod_ip"],
                "replacement": f"$1:{port}",
                "target_label": "__address__",
            },
        ]
    rules += [
        {
            "action": "replace",
            "source_labels": ["__meta_kubernetes_pod_label_" + _sanitize(mapping["from"])],
            "target_label": mapping.get("to") or mapping["from"],
        }
        for mapping in from_pod
    ]
    interval = endpoint["interval"]
    config: dict[str, Any] = {
        "job_name": f"{key}/{port}",
        "metrics_path": endpoint.get("path") or "/metrics",
        "scrape_interval": interval,
        "scrape_timeout": endpoint.get("timeout") or interval,
        "relabel_configs": rules,
        "metric_relabel_configs": [_metric_rule(rule) for rule in endpoint.get("metricRelabeling") or []],
    }
    if endpoint.get("scheme"):
        config["scheme"] = endpoint["scheme"]
    if endpoint.get("params"):
        config["params"] = endpoint["params"]
    for name, field in (("samples", "sample_limit"), ("labels", "label_limit")):
        if (limits or {}).get(name):
            config[field] = limits[name]  # type: ignore[index]

    def file_of(selector: dict[str, Any]) -> str:
        secret = selector["secret"]
        # http_types.go, toPrometheusSecretRef: a namespaced object may name its own namespace only.
        assert secret.get("namespace", namespace) == namespace, f"{key}: Secret outside {namespace}"
        return str(secret_file(secret.get("namespace") or namespace, secret["name"], secret["key"]))

    authorization = endpoint.get("authorization")
    if authorization:
        config["authorization"] = {"type": authorization.get("type") or "Bearer"}
        if authorization.get("credentials"):
            config["authorization"]["credentials_file"] = file_of(authorization["credentials"])
    tls = endpoint.get("tls")
    if tls:
        tls_config: dict[str, Any] = {"insecure_skip_verify": bool(tls.get("insecureSkipVerify"))}
        if tls.get("serverName"):
            tls_config["server_name"] = tls["serverName"]
        for field, name in (("ca", "ca_file"), ("cert", "cert_file"), ("key", "key_file")):
            if tls.get(field):
                tls_config[name] = file_of(tls[field])
        config["tls_config"] = tls_config
    return config


# pod_config.go, convertRelabelingRule: what may not be written, and which actions are refused.
PROTECTED = {"project_id", "location", "cluster", "namespace", "job", "instance", "__address__"}


def _metric_rule(rule: dict[str, Any]) -> dict[str, Any]:
    action = (rule.get("action") or "replace").lower()
    assert action in ("replace", "hashmod", "labeldrop", "labelkeep", "keep", "drop"), action
    if action in ("replace", "hashmod"):
        assert rule.get("targetLabel") not in PROTECTED, (
            f"GMP refuses to relabel onto {rule.get('targetLabel')}"
        )
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(key, key): value for key, value in rule.items()}


# --- discovery ------------------------------------------------------------------------------------------


def discovery_labels(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod (the API's JSON) as Prometheus' Kubernetes discovery, role pod, makes its target candidates: one
    per declared container port, one per container without any (its address the pod IP alone). File
    discovery's form: [{targets: [address], labels: {...}}]."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    ip = status.get("podIP", "")
    common = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_pod_name": meta["name"],
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_uid": meta.get("uid", ""),
    }
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            common["__meta_kubernetes_pod_controller_kind"] = owner["kind"]
            common["__meta_kubernetes_pod_controller_name"] = owner["name"]
    for name, value in (meta.get("labels") or {}).items():
        common["__meta_kubernetes_pod_label_" + _sanitize(name)] = value
        common["__meta_kubernetes_pod_labelpresent_" + _sanitize(name)] = "true"
    groups = []
    for container in spec["containers"]:
        labels = {**common, "__meta_kubernetes_pod_container_name": container["name"]}
        ports = container.get("ports") or []
        if not ports:
            groups.append({"targets": [ip], "labels": labels})
        for port in ports:
            groups.append(
                {
                    "targets": [f"{ip}:{port['containerPort']}"],
                    "labels": {
                        **labels,
                        "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                        "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                        "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP"),
                    },
                }
            )
    return groups
