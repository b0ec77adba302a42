"""The values of the tpujob-operator chart as pydantic models: the one source of values.schema.json
(scripts/generate_chart.py writes it). Defaults equal values.yaml's (tests/chart/test_chart.py checks);
a section refuses keys it does not know, as Helm then does through the schema.

Fields are snake_case here and camelCase in values.yaml (the alias generator); descriptions are the
schema's, the comments of values.yaml say more.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tpujob.api.spec import OAUTH_SCOPE_PATTERN
from tpujob.api.tenancy import TenancyPolicy
from tpujob.config import GOOGLE_IDENTITY_PATTERN

CHART = Path(__file__).resolve().parents[1] / "charts" / "tpujob-operator"

Port = Annotated[int, Field(ge=1, le=65535)]
NAMESPACE = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"
# `--set` passes a decimal as a string ("0.5"), so a number of seconds may come as a numeric string.
Seconds = Annotated[float, Field(gt=0)] | Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?$")]
SecondsOrZero = Annotated[float, Field(ge=0)] | Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?$")]
SECONDS_NOTE = "A number; `--set` passes decimals as strings, so numeric strings are accepted."
Duration = Annotated[str, Field(pattern="^([0-9]+(ms|s|m|h))+$")]  # a Prometheus duration
Labels = dict[str, str]


def alert_names(rules: dict[str, Any]) -> tuple[str, ...]:
    """The alerts of a Prometheus rule file (its recording rules have no name to give)."""
    return tuple(rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule)


# alerts.disabled takes only names files/alerts.yaml has: a typo fails `helm install`, not silently.
ALERTS = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
if TYPE_CHECKING:  # a Literal built at run time is no type to mypy
    AlertName = str
else:
    AlertName = Literal[alert_names(ALERTS)]


class Section(BaseModel):
    # validate_default: a default breaking its own constraint fails here (the defaults test), not in Helm.
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, validate_default=True
    )


class Image(Section):
    # Helm drops a key set to null: the schema then says which one is missing.
    model_config = ConfigDict(json_schema_extra={"required": ["repository"]})

    repository: str = Field("tpujob-operator", min_length=1, description="Image repository.")
    tag: str = Field("", description="Image tag; empty: the chart's appVersion.")
    digest: str = Field(
        "",
        pattern="^(sha256:[a-f0-9]{64})?$",
        description="Image digest, sha256:<64 hex>; set: the image is repository@digest, the tag unused.",
    )
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="Image pull policy."
    )


class PullSecret(Section):
    name: str = Field(min_length=1, description="Secret name.")


class Gke(Section):
    project: str = Field(
        "",
        pattern="^([a-z][-a-z0-9]{4,28}[a-z0-9]|[-a-z0-9.:]*)$",
        description="Google Cloud project of the cluster (TPUJOB_GKE_PROJECT).",
    )
    location: str = Field(
        "",
        pattern="^([a-z]+-[a-z]+[0-9]+(-(ai[0-9]+)?[a-z])?)?$",
        description="Cluster location: region or zone (TPUJOB_GKE_LOCATION).",
    )
    cluster: str = Field(
        "", pattern="^([a-z]([-a-z0-9]{0,38}[a-z0-9])?)?$", description="Cluster name (TPUJOB_GKE_CLUSTER)."
    )
    zone: str = Field(
        "",
        # Zones, comma-separated (TPUJOB_GKE_ZONE takes a list); AI zones too (us-central1-ai1a:
        # https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones).
        pattern="^([a-z]+-[a-z]+[0-9]+-(ai[0-9]+)?[a-z](,[a-z]+-[a-z]+[0-9]+-(ai[0-9]+)?[a-z])*)?$",
        description="Zone(s) of the TPU node pools of a job that names none, comma-separated; one must "
        "offer the job's TPU type (TPUJOB_GKE_ZONE).",
    )
    endpoint: str = Field("", description="GKE API endpoint override (TPUJOB_GKE_ENDPOINT).")
    identity: str = Field(
        "",
        pattern=f"({GOOGLE_IDENTITY_PATTERN})|^$",
        description="The Google identity the operator must act as, checked at start; empty: "
        "serviceAccount.gcpServiceAccount (TPUJOB_GKE_IDENTITY).",
    )
    node_service_account: str = Field(
        "",
        pattern=f"({GOOGLE_IDENTITY_PATTERN})|^$",
        description="The Google service account of the TPU pools' nodes: set it (least privilege: "
        "roles/container.defaultNodeServiceAccount); empty: the Compute Engine default account, with a "
        "warning (TPUJOB_GKE_NODE_SERVICE_ACCOUNT).",
    )
    node_o_auth_scopes: list[Annotated[str, Field(pattern=OAUTH_SCOPE_PATTERN)]] = Field(
        ["https://www.googleapis.com/auth/cloud-platform"],
        alias="nodeOAuthScopes",
        min_length=1,
        description="OAuth scopes of the TPU pools' nodes (TPUJOB_GKE_NODE_OAUTH_SCOPES).",
    )
    upgrade_shield: bool = Field(
        True,
        description="Create TPU pools with their own exclusion from node auto-upgrades "
        "(maintenancePolicy.exclusionUntilEndOfSupport; not on flex-start pools) "
        "(TPUJOB_GKE_UPGRADE_SHIELD).",
    )
    flex_start_zone_fallback: bool = Field(
        False,
        description="Let zoneFallbackSeconds move a queued flex-start request to the next zone, giving up "
        "its place in the queue (TPUJOB_GKE_FLEX_START_ZONE_FALLBACK).",
    )


class EnvVar(BaseModel):
    # A Kubernetes EnvVar: value or valueFrom, which the API server checks.
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)


class Operator(Section):
    resync_seconds: Seconds = Field(30, description=f"TPUJOB_RESYNC_SECONDS. {SECONDS_NOTE}")
    sweep_seconds: Seconds = Field(300, description=f"TPUJOB_SWEEP_SECONDS. {SECONDS_NOTE}")
    workers: int = Field(16, ge=1, le=256, description="TPUJOB_WORKERS.")
    api_qps: SecondsOrZero = Field(
        50, description=f"TPUJOB_API_QPS: requests per second; 0: no limit. {SECONDS_NOTE}"
    )
    api_burst: int = Field(100, ge=1, description="TPUJOB_API_BURST.")
    restart_backoff_seconds: SecondsOrZero = Field(
        10, description=f"TPUJOB_RESTART_BACKOFF_SECONDS. {SECONDS_NOTE}"
    )
    unschedulable_grace_seconds: SecondsOrZero = Field(
        30, description=f"TPUJOB_UNSCHEDULABLE_GRACE_SECONDS. {SECONDS_NOTE}"
    )
    startup_grace_seconds: SecondsOrZero = Field(
        30, description=f"TPUJOB_STARTUP_GRACE_SECONDS. {SECONDS_NOTE}"
    )
    poll_provisioning_seconds: Seconds = Field(
        5, description=f"TPUJOB_POLL_PROVISIONING_SECONDS. {SECONDS_NOTE}"
    )
    refused_backoff_seconds: Seconds = Field(
        30, description=f"TPUJOB_REFUSED_BACKOFF_SECONDS. {SECONDS_NOTE}"
    )
    max_hosts_per_job: int = Field(4096, ge=1, description="TPUJOB_MAX_HOSTS_PER_JOB.")
    progress_reads_per_second: Seconds = Field(
        10, description=f"TPUJOB_PROGRESS_READS_PER_SECOND. {SECONDS_NOTE}"
    )
    api_connect_timeout_seconds: Seconds = Field(
        10, description=f"TPUJOB_API_CONNECT_TIMEOUT_SECONDS. {SECONDS_NOTE}"
    )
    api_read_timeout_seconds: Seconds = Field(
        60, description=f"TPUJOB_API_READ_TIMEOUT_SECONDS. {SECONDS_NOTE}"
    )
    gke_timeout_seconds: Seconds = Field(30, description=f"TPUJOB_GKE_TIMEOUT_SECONDS. {SECONDS_NOTE}")
    verbose: bool = Field(False, description="Log every kopf step.")
    extra_env: list[EnvVar] = Field([], description="More environment variables.")


class MetricsReader(Section):
    name: str = Field(min_length=1, description="ServiceAccount name.")
    namespace: str = Field(min_length=1, pattern=NAMESPACE, description="Its namespace.")


class MetricsTls(Section):
    secret_name: str = Field(
        "",
        description="A kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) the operator serves and the "
        "ServiceMonitor verifies; empty: a self-signed certificate, scraped without verification.",
    )
    server_name: str = Field(
        "", description="The name verified; empty: the metrics Service's <fullname>-metrics.<namespace>.svc."
    )


class MetricsAuth(Section):
    enabled: bool = Field(
        False,
        description="Serve /metrics over HTTPS to authenticated, authorized bearer tokens only "
        "(TokenReview, SubjectAccessReview) (TPUJOB_METRICS_AUTH).",
    )
    readers: list[MetricsReader] = Field(
        [], description="ServiceAccounts bound to the -metrics-reader ClusterRole (your Prometheus')."
    )
    tls: MetricsTls = Field(default_factory=MetricsTls, description="The certificate /metrics serves.")


class MetricsService(Section):
    enabled: bool = Field(True, description="Create the metrics Service.")
    port: Port = Field(8000, description="Service port.")
    annotations: Labels = Field({}, description="Service annotations.")


class ServiceMonitor(Section):
    enabled: bool = Field(False, description="Create a ServiceMonitor (needs monitoring.coreos.com/v1).")
    interval: Duration = Field("30s", description="Scrape interval (a Prometheus duration: 30s, 1m)")
    scrape_timeout: Duration = Field("10s", description="Scrape timeout (a Prometheus duration: 30s, 1m)")
    labels: Labels = Field({}, description="Extra labels.")


class PodMonitor(ServiceMonitor):
    enabled: bool = Field(
        False, description="Create a PodMonitor for trainer pods (needs monitoring.coreos.com/v1)."
    )
    namespaces: list[Annotated[str, Field(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]] = Field(
        [], description="Namespaces of the trainer pods scraped."
    )
    sample_limit: int = Field(
        1000, ge=1, description="Most series per trainer scrape; over it, the scrape fails."
    )


class TpuDevicePluginMonitor(ServiceMonitor):
    enabled: bool = Field(
        False,
        description="Create a PodMonitor for GKE's TPU device plugin pods (needs monitoring.coreos.com/v1).",
    )
    namespace: str = Field(
        "kube-system",
        pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Namespace of the device plugin's pods.",
    )
    port: Port = Field(2112, description="Port of the device plugin's /metrics (GKE's: 2112).")


class TpuDevicePlugin(Section):
    pod_monitor: TpuDevicePluginMonitor = Field(
        default_factory=TpuDevicePluginMonitor, description="A PodMonitor for the device plugin's pods."
    )


class Metrics(Section):
    port: Port = Field(8000, description="Container port of /metrics (TPUJOB_METRICS_PORT).")
    auth: MetricsAuth = Field(default_factory=MetricsAuth, description="Authenticated /metrics.")
    service: MetricsService = Field(
        default_factory=MetricsService, description="The ClusterIP Service in front of /metrics."
    )
    service_monitor: ServiceMonitor = Field(
        default_factory=ServiceMonitor, description="A Prometheus Operator ServiceMonitor for the operator."
    )
    pod_monitor: PodMonitor = Field(
        default_factory=PodMonitor, description="A Prometheus Operator PodMonitor for the trainer pods."
    )
    tpu_device_plugin: TpuDevicePlugin = Field(
        default_factory=TpuDevicePlugin,
        description="GKE's TPU device plugin's /metrics: each chip's duty cycle, TensorCore use and HBM.",
    )


class GmpCollector(Section):
    name: str = Field("collector", min_length=1, description="ServiceAccount name.")
    namespace: str = Field("gmp-system", min_length=1, pattern=NAMESPACE, description="Its namespace.")


class Gmp(Section):
    collector: GmpCollector = Field(
        default_factory=GmpCollector,
        description="GMP's collector ServiceAccount, granted the read of the operator's scrape token Secret.",
    )


class Monitoring(Section):
    backend: Literal["prometheus-operator", "gmp", "none"] = Field(
        "prometheus-operator",
        description=(
            "The API of the scrape and alert objects: prometheus-operator (monitoring.coreos.com/v1), gmp "
            "(Managed Service for Prometheus, monitoring.googleapis.com/v1) or none."
        ),
    )
    gmp: Gmp = Field(default_factory=Gmp, description="Managed Service for Prometheus (backend gmp).")


class LivenessProbe(Section):
    initial_delay_seconds: int = Field(15, ge=0, description="Seconds before the first probe.")
    period_seconds: int = Field(20, ge=1, description="Seconds between probes.")
    timeout_seconds: int = Field(5, ge=1, description="Seconds a probe may take.")
    failure_threshold: int = Field(3, ge=1, description="Failed probes in a row before a restart.")


class Health(Section):
    port: Port = Field(8081, description="Container port of /healthz (TPUJOB_HEALTH_PORT).")
    liveness_probe: LivenessProbe = Field(
        default_factory=LivenessProbe, description="The liveness probe of /healthz."
    )


class ServiceAccount(Section):
    create: bool = Field(True, description="Create the ServiceAccount.")
    name: str = Field(
        "",
        pattern="^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$",
        description="Its name; empty: the full resource name.",
    )
    annotations: Labels = Field({}, description="Annotations on it.")
    gcp_service_account: str = Field(
        "",
        pattern=r"^([a-z][-a-z0-9]{4,28}[a-z0-9]@[-a-z0-9.:]+\.iam\.gserviceaccount\.com)?$",
        description="Workload Identity: the Google service account (NAME@PROJECT.iam.gserviceaccount.com).",
    )


class AggregatedRoles(Section):
    create: bool = Field(True, description="Create tpujob-edit and tpujob-view (once per cluster).")


class Rbac(Section):
    create: bool = Field(True, description="Create the (Cluster)Role and its binding.")
    protected_namespaces: list[Annotated[str, Field(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]] = Field(
        ["kube-system", "kube-public", "kube-node-lease"],
        description="Namespaces where a cluster-wide operator writes nothing (a ValidatingAdmissionPolicy, "
        "Kubernetes 1.30+).",
    )
    aggregated_roles: AggregatedRoles = Field(
        default_factory=AggregatedRoles,
        description="The users' ClusterRoles, aggregated into admin/edit and view.",
    )


class JobNetworkPolicy(Section):
    enabled: bool = Field(
        True,
        description="The TPUJob workers' NetworkPolicy, one per namespace with TPUJobs "
        "(TPUJOB_NETWORK_POLICY).",
    )


class OperatorNetworkPolicy(Section):
    enabled: bool = Field(False, description="A NetworkPolicy for the operator's pods.")


class NetworkPolicy(Section):
    jobs: JobNetworkPolicy = Field(default_factory=JobNetworkPolicy, description="Each TPUJob's policy.")
    operator: OperatorNetworkPolicy = Field(
        default_factory=OperatorNetworkPolicy, description="The operator's own policy."
    )
    # NetworkPolicyPeers, checked by the operator (config.NetworkPolicyPeer) and the API server.
    metrics_from: list[dict[str, Any]] = Field(
        [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
            }
        ],
        description="NetworkPolicyPeers of your Prometheus: who may scrape the operator and the trainers.",
    )


class Kueue(Section):
    enabled: bool = Field(
        False,
        description="Admit TPUJobs labelled kueue.x-k8s.io/queue-name through Kueue (TPUJOB_KUEUE): grants "
        "the Workload permissions. Needs Kueue, with TPUJob in its integrations.externalFrameworks.",
    )


class Crds(Section):
    install: bool = Field(False, description="Render the CRD as a template (with helm --skip-crds).")
    keep: bool = Field(True, description="Keep the CRD on helm uninstall.")
    cel: bool = Field(True, description="Include the CEL rules (false before Kubernetes 1.25).")


class Peering(Section):
    lifetime_seconds: int = Field(
        15,
        ge=5,
        le=600,
        description="A replica silent this long counts as dead: the standby takes over within this time "
        "(TPUJOB_PEERING_LIFETIME_SECONDS).",
    )
    renew_deadline_seconds: Seconds = Field(
        10,
        description="The active replica stops every write and GKE call when it has not confirmed its lead "
        "for this long; shorter than lifetimeSeconds (TPUJOB_PEERING_RENEW_DEADLINE_SECONDS). "
        f"{SECONDS_NOTE}",
    )


class PodDisruptionBudget(Section):
    enabled: bool = Field(True, description="Create it (when replicaCount > 1).")


class Dashboard(Section):
    enabled: bool = Field(False, description="Create the dashboard ConfigMap.")
    labels: Labels = Field({"grafana_dashboard": "1"}, description="Labels Grafana's sidecar looks for.")
    annotations: Labels = Field({}, description="Annotations, e.g. grafana_folder.")
    namespace: str = Field(
        "", pattern=NAMESPACE, description="Namespace of the ConfigMap; empty: the release's."
    )


class Alerts(Section):
    enabled: bool = Field(
        False, description="Create a PrometheusRule with the alerts (needs monitoring.coreos.com/v1)."
    )
    labels: Labels = Field({}, description="Extra labels.")
    disabled: list[AlertName] = Field([], description="Alerts of files/alerts.yaml left out, by name.")


# Kubernetes objects passed through as they are (resources, security contexts, tolerations, affinity) are
# free-form: the API server checks them.
class Values(Section):
    image: Image = Field(default_factory=Image, description="The operator image.")
    image_pull_secrets: list[PullSecret] = Field([], description="Secrets for pulling the image.")
    name_override: str = Field("", max_length=63, description="Replaces the chart name in resource names.")
    fullname_override: str = Field("", max_length=63, description="Replaces the full resource name prefix.")
    gke: Gke = Field(default_factory=Gke, description="The GKE cluster for TPU node pools (TPUJOB_GKE_*).")
    replica_count: int = Field(
        2, ge=1, le=5, description="Operator replicas: one reconciles, the others stand by (kopf peering)."
    )
    peering: Peering = Field(default_factory=Peering, description="Active and standby replicas.")
    pod_disruption_budget: PodDisruptionBudget = Field(
        default_factory=PodDisruptionBudget, description="Keeps one replica through node drains."
    )
    watch_namespace: str = Field(
        "",
        pattern=NAMESPACE,
        max_length=63,
        description="Watch only this namespace (TPUJOB_NAMESPACE); empty: every namespace.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description=(
            "The operator's log lines (TPUJOB_LOG_FORMAT): text, or json with Cloud Logging's fields "
            "(severity, message, time, the job's namespace and name as labels)."
        ),
    )
    operator: Operator = Field(default_factory=Operator, description="How the operator works (TPUJOB_*).")
    kueue: Kueue = Field(default_factory=Kueue, description="Kueue: queued TPUJobs admitted by its queues.")
    network_policy: NetworkPolicy = Field(
        default_factory=NetworkPolicy, description="NetworkPolicies of the jobs and the operator."
    )
    tenancy: TenancyPolicy = Field(
        default_factory=TenancyPolicy,
        description="What each namespace's TPUJobs may do (TPUJOB_TENANCY_POLICY; api/tenancy.py).",
    )
    metrics: Metrics = Field(
        default_factory=Metrics,
        description=(
            "The operator's /metrics endpoint, its Service, ServiceMonitor and the trainers' PodMonitor."
        ),
    )
    monitoring: Monitoring = Field(
        default_factory=Monitoring, description="Which monitoring API the scrape and alert objects use."
    )
    health: Health = Field(default_factory=Health, description="The liveness endpoint and probe.")
    service_account: ServiceAccount = Field(
        default_factory=ServiceAccount, description="The operator's ServiceAccount."
    )
    rbac: Rbac = Field(default_factory=Rbac, description="RBAC from tpujob.rbac.RULES.")
    crds: Crds = Field(default_factory=Crds, description="The TPUJob CRD as a template.")
    dashboard: Dashboard = Field(default_factory=Dashboard, description="The Grafana dashboard ConfigMap.")
    alerts: Alerts = Field(
        default_factory=Alerts,
        description="Prometheus alerting rules (files/alerts.yaml) in a PrometheusRule.",
    )
    resources: dict[str, Any] = Field(
        {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        description="CPU and memory of the operator container.",
    )
    pod_security_context: dict[str, Any] = Field(
        {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        description="Security context of the pod.",
    )
    security_context: dict[str, Any] = Field(
        {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        description="Security context of the container.",
    )
    pod_labels: Labels = Field({}, description="Extra labels on the pod.")
    pod_annotations: Labels = Field({}, description="Annotations on the pod.")
    priority_class_name: str = Field("", description="Priority class of the pod.")
    node_selector: Labels = Field({}, description="Node selector of the pod.")
    tolerations: list[dict[str, Any]] = Field([], description="Tolerations of the pod.")
    affinity: dict[str, Any] = Field({}, description="Affinity of the pod.")
    # Helm passes `global` to every chart; values.yaml has none, so dumps leave it out.
    global_: dict[str, Any] = Field(
        default_factory=dict, alias="global", exclude=True, description="Helm's global values (unused)."
    )
