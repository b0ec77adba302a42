"""Operator settings from TPUJOB_* environment variables (the Helm chart sets every one), through
pydantic-settings: each field's description is the documentation, and a bad value is refused at start
with the variable's name."""

from __future__ import annotations

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tpujob.render import Cluster
from tpujob.status import DEFAULT_POLL_PROVISIONING_SECONDS

ENV_PREFIX = "TPUJOB_"


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
    metrics_port: int = Field(8000, ge=0, le=65535, description="port of /metrics; 0 disables it")
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
        10, gt=0, description="first wait before an application restart; doubles, max 6 min"
    )
    poll_provisioning_seconds: float = Field(
        DEFAULT_POLL_PROVISIONING_SECONDS,
        gt=0,
        description="look at a node pool GKE is still creating or deleting this often (and ask again for "
        "one GKE refused for now)",
    )
    refused_backoff_seconds: float = Field(
        30,
        gt=0,
        description="first wait before asking GKE again for a pool it refused in a way asking soon cannot "
        "fix (quota, an invalid request); doubles, at most 20 times this",
    )
    unschedulable_grace_seconds: float = Field(
        30,
        ge=0,
        description="a pod unschedulable this long shows the scheduler's reason as the job's "
        "(reason Unschedulable)",
    )
    startup_grace_seconds: float = Field(
        30,
        ge=0,
        description="a worker whose container cannot start this long (an image pull that fails, a missing "
        "Secret) shows the kubelet's reason as the job's (ErrImagePull, CreateContainerConfigError, ...)",
    )
    progress_reads_per_second: float = Field(
        10,
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

    @property
    def cluster(self) -> Cluster:
        return Cluster(
            project=self.gke_project,
            location=self.gke_location,
            cluster=self.gke_cluster,
            zone=self.gke_zone or self.gke_location,
            upgrade_shield=self.gke_upgrade_shield,
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


def from_environment() -> OperatorConfig:
    """The settings from the process environment; a bad value stops the operator naming its variable."""
    try:
        return OperatorConfig()
    except ValidationError as error:
        problems = [
            f"{ENV_PREFIX}{str(e['loc'][0]).upper()}={e.get('input')!r}: {e['msg']}" if e["loc"] else e["msg"]
            for e in error.errors()
        ]
        raise InvalidSettings("; ".join(problems)) from None
