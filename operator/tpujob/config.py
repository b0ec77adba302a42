"""Operator settings from TPUJOB_* environment variables (the Helm chart sets every one), through
pydantic-settings: each field's description is the documentation, and a bad value is refused at start
with the variable's name."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tpujob import status as s
from tpujob.api.spec import DEFAULT_OAUTH_SCOPES, OAUTH_SCOPE_PATTERN
from tpujob.api.tenancy import TenancyPolicy, parse_policy
from tpujob.render import Cluster

ENV_PREFIX = "TPUJOB_"
# A Google service account's email, or a Workload Identity Federation pool (PROJECT.svc.id.goog: what the
# GKE metadata server is reported to name a Kubernetes ServiceAccount that acts as itself, with no Google
# account; not verified here: a refused start names the identity found, to be set if it is the one meant).
GOOGLE_IDENTITY_PATTERN = (
    r"^([a-z][-a-z0-9]{4,28}[a-z0-9]@[-a-z0-9.:]+\.iam\.gserviceaccount\.com"
    r"|[0-9]+-compute@developer\.gserviceaccount\.com|[-a-z0-9.:]+\.svc\.id\.goog)$"
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SelectorRequirement(_Strict):
    key: str = Field(min_length=1, max_length=317)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class LabelSelector(_Strict):
    matchLabels: dict[str, str] = {}
    matchExpressions: list[SelectorRequirement] = []


class IPBlock(_Strict):
    cidr: str = Field(min_length=1)
    except_: list[str] = Field([], alias="except")


class NetworkPolicyPeer(_Strict):
    """networking.k8s.io/v1 NetworkPolicyPeer: who may reach the trainers' metrics port."""

    podSelector: LabelSelector | None = None
    namespaceSelector: LabelSelector | None = None
    ipBlock: IPBlock | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> NetworkPolicyPeer:
        if self.ipBlock is not None and (self.podSelector or self.namespaceSelector):
            raise ValueError("a peer is an ipBlock or selectors, not both")
        if self.ipBlock is None and self.podSelector is None and self.namespaceSelector is None:
            raise ValueError("a peer needs podSelector, namespaceSelector or ipBlock")
        return self

    def manifest(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)


class OperatorConfig(BaseSettings):
    # The chart renders an unset value as an empty string: that means the default.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="ignore", env_ignore_empty=True
    )

    gke_project: str = Field("", description="Google Cloud project of the GKE cluster")
    gke_location: str = Field("", description="GKE cluster location: a region or a zone")
    gke_cluster: str = Field("", description="GKE cluster name")
    gke_zone: str = Field(
        "", description="zone(s) for TPU node pools, comma-separated; default: TPUJOB_GKE_LOCATION (zonal)"
    )
    gke_endpoint: str | None = Field(
        None, description="GKE API endpoint override (a simulated GKE); empty: Google's"
    )
    gke_identity: str = Field(
        "",
        pattern=f"({GOOGLE_IDENTITY_PATTERN})|^$",
        description="the Google identity the operator must act as for GKE calls: a service account's email "
        "(Workload Identity, or a key in GOOGLE_APPLICATION_CREDENTIALS), or PROJECT.svc.id.goog (Workload "
        "Identity Federation, no Google account); checked at start, which is refused when the credentials "
        "found are another identity or when this is empty: the operator never acts as its node's service "
        "account unless named here (not checked with TPUJOB_GKE_ENDPOINT: a simulated GKE takes no "
        "credentials)",
    )
    gke_node_service_account: str = Field(
        "",
        pattern=f"({GOOGLE_IDENTITY_PATTERN})|^$",
        description="the Google service account the TPU pools' nodes run as (config.serviceAccount): give "
        "them their own, with only roles/container.defaultNodeServiceAccount (GKE's least-privilege node "
        "role) and roles/artifactregistry.reader; empty: GKE's default, the project's Compute Engine "
        "default service account (Editor)",
    )
    gke_node_oauth_scopes: str = Field(
        ",".join(DEFAULT_OAUTH_SCOPES),
        description="OAuth scopes of the TPU pools' nodes, comma-separated https://www.googleapis.com/auth/ "
        "URLs (the operator's choice, never a job's); cloud-platform leaves access to the node account's "
        "IAM roles, as Google advises",
    )
    gke_upgrade_shield: bool = Field(
        True,
        description="create TPU pools with their own exclusion from node auto-upgrades "
        "(maintenancePolicy.exclusionUntilEndOfSupport), never on flex-start pools; a create GKE refuses "
        "with it is asked again without it, once, and said (event, log, metric)",
    )
    gke_flex_start_zone_fallback: bool = Field(
        False,
        description="let spec.capacity.zoneFallbackSeconds move a queued flex-start request to the next zone "
        "(its pool is deleted, and its place in the queue with it); off: it stays queued in its zone",
    )
    kueue: bool = Field(
        False,
        description="admit TPUJobs labelled kueue.x-k8s.io/queue-name through Kueue: the operator creates "
        "each one's Workload and runs nothing until Kueue admits it (needs Kueue's CRDs and the chart's "
        "kueue.enabled RBAC); off: such jobs wait, never run around their queue",
    )
    namespace: str | None = Field(None, description="watch only this namespace; empty: the whole cluster")
    network_policy: bool = Field(
        True,
        description="guard TPUJob workers with one NetworkPolicy per namespace (tpujob-workers, made by the "
        "namespace's first job before its pods, made again if deleted): the workers admit the namespace's "
        "TPUJob workers on every port and TPUJOB_NETWORK_POLICY_METRICS_FROM on the metrics port, nothing "
        "else",
    )
    network_policy_metrics_from: list[NetworkPolicyPeer] = Field(
        [],
        description="JSON list of NetworkPolicyPeers that may read the trainers' metrics port (9090): the "
        "operator itself (it reads worker 0's step counter there) and Prometheus; the chart sets both",
    )
    tenancy_policy: str = Field(
        "",
        description="the tenancy policy, YAML: what each namespace's TPUJobs may do beyond the safe default "
        "(host network, privilege, capabilities, existing pools, chips, reservations, priority classes, "
        "startup timeout); `defaults`, and `namespaces.<name>` overriding them field by field; empty: the "
        "defaults (docs: concepts/multi-tenancy.md)",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="text: one readable line per record; json: one JSON object per line with Cloud "
        "Logging's fields (severity, message, time, the job's namespace and name as labels)",
    )
    metrics_port: int = Field(8000, ge=0, le=65535, description="port of /metrics; 0 disables it")
    metrics_auth: bool = Field(
        False,
        description="serve /metrics over HTTPS (a self-signed certificate) to callers whose bearer token the "
        "API server authenticates (TokenReview) and authorizes for GET /metrics (SubjectAccessReview) only",
    )
    metrics_cert_dir: str = Field(
        "",
        description="with metrics_auth: a folder holding tls.crt and tls.key (a kubernetes.io/tls Secret "
        "mounted, e.g. cert-manager's) that /metrics serves, so a scraper can verify it; empty: a "
        "self-signed certificate made at start (a scraper must then skip verification)",
    )
    health_port: int = Field(8081, ge=1, le=65535, description="port of the liveness endpoint /healthz")
    resync_seconds: float = Field(
        30,
        gt=0,
        description="a resync round gives a pass to every TPUJob that had none within this interval (so each "
        "job gets one at least every two intervals)",
    )
    sweep_seconds: float = Field(300, gt=0, description="delete node pools whose TPUJob is gone this often")
    workers: int = Field(16, ge=1, description="threads for Kubernetes and GKE calls")
    restart_backoff_seconds: float = Field(
        s.DEFAULT_RESTART_BACKOFF_SECONDS,
        gt=0,
        description="first wait before an application restart; doubles, max 6 min",
    )
    poll_provisioning_seconds: float = Field(
        s.DEFAULT_POLL_PROVISIONING_SECONDS,
        gt=0,
        description="look at a node pool GKE is still creating or deleting this often (and ask again for "
        "one GKE refused for now)",
    )
    refused_backoff_seconds: float = Field(
        s.REJECTED_BACKOFF_BASE_SECONDS,
        gt=0,
        description="first wait before asking GKE again for a pool it refused in a way asking soon cannot "
        "fix (quota, an invalid request), and the API server again for pods it refused (an admission "
        "webhook, quota); doubles with each refusal in a row, at most 20 times this",
    )
    unschedulable_grace_seconds: float = Field(
        s.DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
        ge=0,
        description="a pod unschedulable this long shows the scheduler's reason as the job's "
        "(reason Unschedulable)",
    )
    startup_grace_seconds: float = Field(
        s.DEFAULT_STARTUP_GRACE_SECONDS,
        ge=0,
        description="a worker whose container cannot start this long (an image pull that fails, a missing "
        "Secret) shows the kubelet's reason as the job's (ErrImagePull, CreateContainerConfigError, ...)",
    )
    max_hosts_per_job: int = Field(
        4096,
        ge=1,
        description="a job of more TPU hosts (pods: slices x hosts per slice) than this is refused at "
        "validation, naming spec.tpu and this setting",
    )
    progress_reads_per_second: float = Field(
        s.DEFAULT_PROGRESS_READS_PER_SECOND,
        gt=0,
        description="read running trainers' step counters (status.progress) at most this often in all: each "
        "job every (running jobs / this) seconds, at once when its progressDeadlineSeconds comes",
    )

    # client-go's defaults are 5 / 10 for a client and 20 / 30 for kube-controller-manager; an operator that
    # writes a few objects per job on a shared API server sits between those and an unlimited client.
    api_qps: float = Field(
        50, ge=0, description="Kubernetes API requests per second, sustained (client-side limit); 0: no limit"
    )
    api_burst: int = Field(100, ge=1, description="Kubernetes API requests let through at once")
    # A dead connection (a node gone, a proxy black-holing) must not hang a pass thread for good: every
    # Kubernetes request of the operator and of kopf (watch streams have their own, longer, timeouts), and
    # every GKE call, gives up after these.
    api_connect_timeout_seconds: float = Field(
        10, gt=0, description="give up connecting to the Kubernetes API server after this long"
    )
    api_read_timeout_seconds: float = Field(
        60, gt=0, description="give up on a Kubernetes API answer after this long (not the watch streams)"
    )
    gke_timeout_seconds: float = Field(30, gt=0, description="give up on a GKE API call after this long")

    peering: str | None = Field(
        None,
        description="kopf peering object the operator's replicas share (one active, the rest standby); "
        "empty: standalone, for a single replica",
    )
    peering_lifetime_seconds: int = Field(
        15, ge=5, le=600, description="a replica silent this long is dead: a standby takes over after it"
    )
    peering_renew_deadline_seconds: float = Field(
        10,
        gt=0,
        description="an active replica that has not confirmed its lead in the peering object for this long "
        "stops every write and GKE call and stands by; shorter than the lifetime, so it stops before a "
        "standby may take over",
    )
    peering_priority: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description="this replica's priority in the peering (kopf's --priority: the highest live one works); "
        "empty: a random one, so no two replicas share it",
    )

    @model_validator(mode="after")
    def _renew_deadline_within_lifetime(self) -> OperatorConfig:
        if self.peering_renew_deadline_seconds >= self.peering_lifetime_seconds:
            raise ValueError(
                f"{ENV_PREFIX}PEERING_RENEW_DEADLINE_SECONDS={self.peering_renew_deadline_seconds:g} must "
                f"be shorter than {ENV_PREFIX}PEERING_LIFETIME_SECONDS={self.peering_lifetime_seconds}: a "
                "replica cut off from the API server must stop before a standby may take over"
            )
        return self

    @field_validator("gke_node_oauth_scopes")
    @classmethod
    def _scopes(cls, value: str) -> str:
        scopes = [scope.strip() for scope in value.split(",") if scope.strip()]
        wrong = [scope for scope in scopes if not re.match(OAUTH_SCOPE_PATTERN, scope)]
        if wrong or not scopes:
            raise ValueError(
                f"{', '.join(wrong) or 'no scope'}: give https://www.googleapis.com/auth/... URLs, "
                "comma-separated (e.g. https://www.googleapis.com/auth/cloud-platform)"
            )
        return ",".join(scopes)

    @model_validator(mode="after")
    def _tenancy_policy_valid(self) -> OperatorConfig:
        self.tenancy  # noqa: B018  (refused at start, naming the field, not at the first job)
        return self

    @property
    def tenancy(self) -> TenancyPolicy:
        return parse_policy(self.tenancy_policy, f"{ENV_PREFIX}TENANCY_POLICY")

    @property
    def cluster(self) -> Cluster:
        return Cluster(
            project=self.gke_project,
            location=self.gke_location,
            cluster=self.gke_cluster,
            zone=self.gke_zone or self.gke_location,
            upgrade_shield=self.gke_upgrade_shield,
            node_service_account=self.gke_node_service_account,
            node_oauth_scopes=tuple(self.gke_node_oauth_scopes.split(",")),
            network_policy=self.network_policy,
            metrics_from=tuple(peer.manifest() for peer in self.network_policy_metrics_from),
        )

    @property
    def gke_configured(self) -> bool:
        return bool(self.gke_project and self.gke_location and self.gke_cluster)


# Every setting's variable and description (the chart sets each one; its test checks that).
ENVIRONMENT: dict[str, str] = {
    f"{ENV_PREFIX}{name.upper()}": field.description or ""
    for name, field in OperatorConfig.model_fields.items()
}


class InvalidSettings(ValueError):
    """A TPUJOB_* variable holds a value the operator cannot use; the message names each one."""


def _inside(path: tuple[int | str, ...]) -> str:
    """Where in a JSON setting: [0].podSelector."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)


def from_environment() -> OperatorConfig:
    """The settings from the process environment; a bad value stops the operator naming its variable."""
    try:
        return OperatorConfig()
    except ValidationError as error:
        problems = [
            f"{ENV_PREFIX}{str(e['loc'][0]).upper()}{_inside(e['loc'][1:])}={e.get('input')!r}: {e['msg']}"
            if e["loc"]
            else e["msg"]
            for e in error.errors()
        ]
        raise InvalidSettings("; ".join(problems)) from None
