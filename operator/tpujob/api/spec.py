"""The TPUJob spec as pydantic models: what the job runs and where (TPU slices, capacity, node pools, the
trainer). The one source of truth for the CRD's spec, validation and docs; run_policy.py holds the run policy.

Field names are camelCase on the wire (Kubernetes style) and snake_case in Python.
Cross-field rules that need the TPU catalog live in validation.py; the CEL rules here repeat the
ones a cluster can enforce at apply time.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field

from tpujob.api.base import ApiModel
from tpujob.api.pod import (
    KEYED_BY_MOUNT_PATH,
    KEYED_BY_NAME,
    MAX_ARGS,
    MAX_COMMAND,
    MAX_ENV,
    MAX_ENV_FROM,
    MAX_MOUNTS,
    ContainerSecurityContext,
    EnvFromSource,
    EnvVar,
    ResourceRequirements,
    VolumeMount,
    WorkerPodSpec,
)
from tpujob.api.run_policy import RunPolicy

# GCE resource names (node pools, reservations, resource policies): RFC 1035 labels.
GCE_NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
# A reservation by name, or shared from another project: projects/PROJECT/reservations/NAME, the form GKE
# takes in reservationAffinity.values for a shared reservation
# (https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations). PROJECT is a project ID:
# 6 to 30 characters, lowercase letters, digits and '-', starting with a letter.
RESERVATION_PATTERN = (
    r"^(projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
)
# Google's OAuth scope URLs (https://developers.google.com/identity/protocols/oauth2/scopes).
OAUTH_SCOPE_PATTERN = r"^https://www\.googleapis\.com/auth/[a-z0-9._-]+$"
# cloud-platform: every Google Cloud API, access then governed by IAM roles, as Google advises for VM
# service accounts (https://cloud.google.com/sdk/gcloud/reference/compute/instances/set-service-account).
# GKE's default node scopes (gke-default) read Cloud Storage only: no gs:// checkpoints without Workload
# Identity. xpk asks for storage-full, gke-default and cloud-platform on TPU pools
# (AI-Hypercomputer/xpk src/xpk/core/nodepool.py); cloud-platform alone already grants what the others do.
DEFAULT_OAUTH_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# A Compute Engine zone: region and letter (us-central1-a), or an AI zone: region, 'ai', a number and its
# parent zone's letter (us-central1-ai1a; https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones).
ZONE_PATTERN = r"^[a-z]+-[a-z]+[0-9]+-(ai[0-9]+)?[a-z]$"
MAX_ZONE_LENGTH = 63  # a GCE resource name
MAX_ZONES = 10
MAX_OAUTH_SCOPES = 16
# A slice's chips as a torus: dimensions joined by 'x' (the catalog in tpu.py says which exist). At most 4
# digits each (no slice is 10,000 chips long): the CRD's rules multiply them, and stay inside CEL's int64.
TOPOLOGY_PATTERN = r"^[1-9][0-9]{0,3}x[1-9][0-9]{0,3}(x[1-9][0-9]{0,3})?$"
MAX_SLICES = 64


class TPUType(enum.StrEnum):
    v4 = "v4"
    v5e = "v5e"
    v5p = "v5p"
    v6e = "v6e"
    tpu7x = "tpu7x"


class CapacityMode(enum.StrEnum):
    on_demand = "onDemand"
    spot = "spot"
    reservation = "reservation"
    flex_start = "flexStart"


# Flex-start VMs run at most 7 days, which is also the default (GKE "About flex-start provisioning mode").
FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600


class NodePoolPolicy(enum.StrEnum):
    create = "create"
    existing = "existing"


class TPUSpec(ApiModel):
    """Which TPUs: one slice is one node pool of `hosts` VMs; several slices make a multislice job."""

    type: TPUType = Field(description="TPU generation: v4, v5e, v5p, v6e or tpu7x.")
    topology: str = Field(
        description=(
            "Chips of one slice as a torus: AxB for v5e and v6e (e.g. 2x2, 4x4), AxBxC for v4, v5p "
            "and tpu7x (e.g. 2x2x1, 2x2x4). Sets the number of hosts (VMs) per slice."
        ),
        pattern=TOPOLOGY_PATTERN,
        max_length=14,
    )
    slices: int = Field(
        default=1,
        ge=1,
        le=MAX_SLICES,
        description="Number of slices (node pools). More than one needs multi-host slices (Multislice).",
    )
    machine_type: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9-]+$",
        max_length=40,
        description=(
            "GKE machine type where a generation offers a choice (v5e: ct5lp-hightpu-1t|4t|8t, "
            "v6e: ct6e-standard-1t|4t|8t). Default: a single host when one VM holds the slice, "
            "else 4-chip VMs."
        ),
    )


class CapacitySpec(ApiModel):
    """Where the TPUs come from: on-demand, spot VMs (cheaper, reclaimable), a reservation, or flex-start
    (Dynamic Workload Scheduler: the whole slice when capacity frees up, for up to 7 days)."""

    mode: CapacityMode = Field(
        default=CapacityMode.on_demand,
        description="onDemand, spot, reservation or flexStart.",
    )
    zones: list[Annotated[str, Field(pattern=ZONE_PATTERN, max_length=MAX_ZONE_LENGTH)]] = Field(
        default_factory=list,
        max_length=MAX_ZONES,
        description=(
            "Zones to try in order (create policy): a slice still in Stockout in one past "
            "zoneFallbackSeconds has its pools deleted and the next zone is tried, round the list. "
            "QuotaExceeded never moves (TPU quota is regional: every zone of the region meets it). A queued "
            "flex-start request (WaitingForCapacity) moves only if the operator allows it "
            "(TPUJOB_GKE_FLEX_START_ZONE_FALLBACK). All slices of a job share one zone. Default: "
            f"spec.nodePool.zone, else the operator's zones. At most {MAX_ZONES}."
        ),
    )
    zone_fallback_seconds: int = Field(
        default=1800,
        ge=10,
        description=(
            "How long a zone may leave the slices waiting for capacity before the next is tried. A move "
            "costs what the zone had: its pools are deleted, GKE's own retries of a stocked-out create "
            "with them, and a queued flex-start request loses its place in the queue (moved only where the "
            "operator allows it)."
        ),
    )
    max_run_duration_seconds: int | None = Field(
        default=None,
        ge=60,
        le=FLEX_START_MAX_RUN_SECONDS,
        description=(
            "flexStart only: how long the slice's VMs may run (GKE's limit and default: 7 days). Before it "
            "ends the workers checkpoint and the job restarts on a new slice, without spending maxRestarts."
        ),
    )
    reservation: str | None = Field(
        default=None,
        pattern=RESERVATION_PATTERN,
        max_length=128,
        description=(
            "The Compute Engine reservation to consume: its name, or projects/PROJECT/reservations/NAME for "
            "one shared from another project. Required when mode is reservation."
        ),
    )


class NodePoolSpec(ApiModel):
    """Who makes the TPU node pools."""

    policy: NodePoolPolicy = Field(
        default=NodePoolPolicy.create,
        description=(
            "create: the operator makes one GKE node pool per slice and deletes it when the job ends. "
            "existing: pods go to TPU nodes someone else made (or node auto-provisioning makes)."
        ),
    )
    zone: str | None = Field(
        default=None,
        pattern=ZONE_PATTERN,
        max_length=MAX_ZONE_LENGTH,
        description="Zone of the node pools (create policy). Default: the operator's configured zone.",
    )
    workload_policy: str | None = Field(
        default=None,
        pattern=GCE_NAME_PATTERN,
        max_length=63,
        description=(
            "Name of the workload (resource) policy that places multi-host tpu7x pools; GKE uses it "
            "instead of a TPU topology for Ironwood."
        ),
    )
    max_pods_per_node: int = Field(
        default=16,
        ge=8,
        le=256,
        description=(
            "Pods per node of the pools the operator makes. A TPU node runs one trainer pod plus system "
            "pods; the default 110 would reserve a /24 of the cluster's pod range per node and exhaust it "
            "on large slices (xpk uses 15)."
        ),
    )
    gvnic: bool = Field(
        default=True,
        description="Google Virtual NIC on the pools' nodes: the faster DCN path TPU docs advise.",
    )
    # Kept in the schema only to refuse it with its fix (messages.OAUTH_SCOPES_ARE_THE_OPERATORS): what a
    # node may do is the platform's choice, and a scope a job widens, every pod on its nodes holds.
    oauth_scopes: list[Annotated[str, Field(max_length=256)]] | None = Field(
        default=None,
        max_length=MAX_OAUTH_SCOPES,
        description=(
            "Refused: the pools' OAuth scopes and node service account are the operator's settings (the "
            "chart's gke.nodeOAuthScopes and gke.nodeServiceAccount). Give a trainer Google access through "
            "Workload Identity (spec.trainer.serviceAccountName)."
        ),
    )


# spec.trainer.terminationGracePeriodSeconds: 30 s as before it was a field (about a Spot VM's notice).
# The bound is what GKE honours when it drains a node of a pool it deletes: "the maximum
# terminationGracePeriodSeconds set on the Pods scheduled to the node, with a cap of one hour"
# (cloud.google.com/kubernetes-engine/docs/concepts/node-pools, "Deleting node pools").
DEFAULT_TERMINATION_GRACE_SECONDS = 30
MAX_TERMINATION_GRACE_SECONDS = 3600


class TrainerSpec(ApiModel):
    """The container that runs on every TPU host."""

    image: str = Field(min_length=1, max_length=512, description="Trainer container image.")
    image_pull_policy: str | None = Field(
        default=None,
        pattern=r"^(Always|IfNotPresent|Never)$",
        description="Always, IfNotPresent or Never. Default: the cluster's default for the tag.",
    )
    command: list[str] = Field(
        default_factory=list,
        max_length=MAX_COMMAND,
        description=f"Entrypoint; empty keeps the image's. At most {MAX_COMMAND} items.",
    )
    args: list[str] = Field(
        default_factory=list,
        max_length=MAX_ARGS,
        description=f"Arguments to the entrypoint. At most {MAX_ARGS}.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=MAX_ENV,
        json_schema_extra=KEYED_BY_NAME,
        description=(
            "Environment variables after the worker env the operator sets (TPU_*, MEGASCALE_* and its "
            "TPUJOB_* names are refused here: see the README's env contract): a value, or valueFrom a "
            f"Secret, ConfigMap or field. At most {MAX_ENV}."
        ),
    )
    env_from: list[EnvFromSource] = Field(
        default_factory=list,
        max_length=MAX_ENV_FROM,
        description=(
            "Every key of a Secret or ConfigMap as a variable. Variables in env (the operator's included) "
            f"win over these. At most {MAX_ENV_FROM}."
        ),
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        max_length=MAX_MOUNTS,
        json_schema_extra=KEYED_BY_MOUNT_PATH,
        description=f"Volumes of spec.pod.volumes to mount into the trainer. At most {MAX_MOUNTS}.",
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="CPU and memory besides the TPU chips."
    )
    security_context: ContainerSecurityContext | None = Field(
        default=None,
        description=(
            "The trainer's security context, field by field over the operator's defaults "
            "(allowPrivilegeEscalation: false, capabilities drop ALL, seccomp RuntimeDefault)."
        ),
    )
    checkpoint_dir: str | None = Field(
        default=None,
        max_length=1024,
        description=(
            "Durable checkpoint location (gs://bucket/path or a mounted path), passed to the trainer as "
            "TPUJOB_CHECKPOINT_DIR so a restart resumes from the last checkpoint."
        ),
    )
    export_dir: str | None = Field(
        default=None,
        max_length=1024,
        description=(
            "Where worker 0 writes the trained model for serving after a successful run (a SavedModel "
            "and model.json; gs://bucket/path or a mounted path), passed to the trainer as "
            "TPUJOB_EXPORT_DIR. Default: <checkpointDir>/export when checkpointDir is set, else no export."
        ),
    )
    service_account_name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        max_length=253,
        description="Kubernetes ServiceAccount of the pods (e.g. one bound to a Google service account).",
    )
    automount_service_account_token: bool = Field(
        default=False,
        description=(
            "Mount the ServiceAccount's Kubernetes API token into the pods. Off: a trainer needs no "
            "Kubernetes API, and a token it holds is one more credential to steal; Workload Identity and "
            "the Cloud Storage FUSE driver work without it. On: for code that calls the Kubernetes API."
        ),
    )
    host_network: bool = Field(
        default=False,
        description="Use the host network for faster DCN traffic. Breaks Workload Identity; off by default.",
    )
    termination_grace_period_seconds: int = Field(
        default=DEFAULT_TERMINATION_GRACE_SECONDS,
        ge=0,
        le=MAX_TERMINATION_GRACE_SECONDS,
        description=(
            "Seconds a worker has between SIGTERM and SIGKILL to save a checkpoint, whenever the operator "
            "stops it (suspend, preemption, eviction by Kueue, maintenance, a restart): the pods' "
            "terminationGracePeriodSeconds. At most the namespace's tenancy cap (maxTerminationGracePeriod"
            "Seconds). A Spot VM's reclaim still gives 15 s, whatever this says."
        ),
    )


class TPUJobSpec(ApiModel):
    """What the job runs and where: TPU slices, their capacity, node pools, trainer and run policy."""

    tpu: TPUSpec = Field(description="Which TPUs, in which shape.")
    capacity: CapacitySpec = Field(
        default_factory=CapacitySpec,
        description="Where the TPUs come from: on-demand, spot, a reservation or flex-start.",
    )
    node_pool: NodePoolSpec = Field(default_factory=NodePoolSpec, description="Who makes the node pools.")
    trainer: TrainerSpec = Field(description="The container that runs on every TPU host.")
    pod: WorkerPodSpec = Field(
        default_factory=WorkerPodSpec,
        description=(
            "What a worker pod carries besides the trainer: labels, annotations, volumes, sidecars, pull "
            "secrets, priority, extra node selector and tolerations, pod security context."
        ),
    )
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy, description="Restarts, failure policy, deadline, TTL, suspend."
    )

    @property
    def stop_lead_seconds(self) -> int:
        """How long before the infrastructure ends a slice (announced host maintenance, a flex-start run
        duration) the operator stops its workers: maintenanceLeadSeconds, and never less than the workers'
        grace period, or the host would go while they still save their checkpoint."""
        return max(self.run_policy.maintenance_lead_seconds, self.trainer.termination_grace_period_seconds)
