"""The TPUJob API as pydantic models: the one source of truth for the CRD, validation and docs.

Field names are camelCase on the wire (Kubernetes style) and snake_case in Python.
Cross-field rules that need the TPU catalog live in validation.py; the CEL rules here repeat the
ones a cluster can enforce at apply time.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tpujob.api.base import ApiModel
from tpujob.api.constants import API_VERSION, EXIT_CODE_BAD_CONFIG, KIND
from tpujob.api.pod import (
    KEYED_BY_MOUNT_PATH,
    KEYED_BY_NAME,
    ContainerSecurityContext,
    EnvFromSource,
    EnvVar,
    ResourceRequirements,
    VolumeMount,
    WorkerPodSpec,
)

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
ZONE_PATTERN = r"^[a-z]+-[a-z]+[0-9]+-[a-z]$"
# Longest TPUJob name: pod hostnames append "-s<slice>-w<worker>" and must stay a 63-character label.
MAX_JOB_NAME_LENGTH = 48


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
        pattern=r"^[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?$",
        max_length=20,
    )
    slices: int = Field(
        default=1,
        ge=1,
        le=64,
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

    cel_rules = (
        (
            "self.type in ['v5e', 'v6e'] ? self.topology.matches('^[0-9]+x[0-9]+$')"
            " : self.topology.matches('^[0-9]+x[0-9]+x[0-9]+$')",
            "topology must be AxB for v5e and v6e, AxBxC for v4, v5p and tpu7x",
        ),
    )


class CapacitySpec(ApiModel):
    """Where the TPUs come from: on-demand, spot VMs (cheaper, reclaimable), a reservation, or flex-start
    (Dynamic Workload Scheduler: the whole slice when capacity frees up, for up to 7 days)."""

    mode: CapacityMode = Field(
        default=CapacityMode.on_demand,
        description="onDemand, spot, reservation or flexStart.",
    )
    zones: list[Annotated[str, Field(pattern=ZONE_PATTERN)]] = Field(
        default_factory=list,
        max_length=10,
        description=(
            "Zones to try in order (create policy): a slice still in Stockout or WaitingForCapacity in one "
            "past zoneFallbackSeconds has its pools deleted and the next zone is tried, round the list. All "
            "slices of a job share one zone. Default: spec.nodePool.zone, else the operator's zones."
        ),
    )
    zone_fallback_seconds: int = Field(
        default=1800,
        ge=10,
        description="How long a zone may leave the slices waiting for capacity before the next is tried.",
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

    cel_rules = (
        (
            "self.mode == 'reservation' ? has(self.reservation) : !has(self.reservation)",
            "reservation is required when mode is reservation, and only then",
        ),
        (
            "!has(self.maxRunDurationSeconds) || self.mode == 'flexStart'",
            "maxRunDurationSeconds is only used with mode flexStart",
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
    oauth_scopes: list[Annotated[str, Field(pattern=OAUTH_SCOPE_PATTERN)]] = Field(
        # A plain default (pydantic copies it per instance) reaches the CRD; a default_factory would not.
        default=list(DEFAULT_OAUTH_SCOPES),
        min_length=1,
        description=(
            "OAuth scopes of the nodes' service account. The default (cloud-platform, IAM decides) lets a "
            "trainer without Workload Identity write gs:// checkpoints; GKE's default scopes are read-only "
            "for Cloud Storage."
        ),
    )


class TrainerSpec(ApiModel):
    """The container that runs on every TPU host."""

    image: str = Field(min_length=1, max_length=512, description="Trainer container image.")
    image_pull_policy: str | None = Field(
        default=None,
        pattern=r"^(Always|IfNotPresent|Never)$",
        description="Always, IfNotPresent or Never. Default: the cluster's default for the tag.",
    )
    command: list[str] = Field(default_factory=list, description="Entrypoint; empty keeps the image's.")
    args: list[str] = Field(default_factory=list, description="Arguments to the entrypoint.")
    env: list[EnvVar] = Field(
        default_factory=list,
        json_schema_extra=KEYED_BY_NAME,
        description=(
            "Environment variables after the worker env the operator sets (TPU_*, MEGASCALE_* and its "
            "TPUJOB_* names are refused here: see the README's env contract): a value, or valueFrom a "
            "Secret, ConfigMap or field."
        ),
    )
    env_from: list[EnvFromSource] = Field(
        default_factory=list,
        description=(
            "Every key of a Secret or ConfigMap as a variable. Variables in env (the operator's included) "
            "win over these."
        ),
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        json_schema_extra=KEYED_BY_MOUNT_PATH,
        description="Volumes of spec.pod.volumes to mount into the trainer.",
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
    host_network: bool = Field(
        default=False,
        description="Use the host network for faster DCN traffic. Breaks Workload Identity; off by default.",
    )


class ExitCodeOperator(enum.StrEnum):
    in_ = "In"
    not_in = "NotIn"


class FailureAction(enum.StrEnum):
    fail_job = "FailJob"
    ignore = "Ignore"
    count_ = "Count"  # `count` is a str method


# Kubernetes' podFailurePolicy bounds: at most 20 rules, 255 exit codes per rule, 20 pod conditions per rule.
MAX_FAILURE_RULES = 20
MAX_EXIT_CODES = 255
MAX_POD_CONDITIONS = 20


class OnExitCodes(ApiModel):
    """Which exit codes of the worker's container a rule matches (as Kubernetes' podFailurePolicy)."""

    operator: ExitCodeOperator = Field(
        description=(
            "In: the exit code is one of values; NotIn: it is none of them. Exit code 0 (success) never "
            "matches."
        )
    )
    values: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        min_length=1,
        max_length=MAX_EXIT_CODES,
        description="Exit codes (0 to 255), each listed once; 0 is not allowed with In.",
    )

    cel_rules = (
        (
            "self.operator == 'NotIn' || !(0 in self.values)",
            "0 is not allowed in an In list (exit code 0 is success and never matches); remove it",
        ),
    )


class OnPodCondition(ApiModel):
    """A pod condition a rule matches."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description=(
            "Pod condition type, e.g. DisruptionTarget: the pod was stopped by a disruption (node shutdown "
            "on spot reclaim or maintenance, eviction, preemption). It also matches a pod the operator sees "
            "as stopped by the infrastructure (a node-loss reason, or exit code 143) without the condition."
        ),
    )
    status: str = Field(
        default="True",
        pattern=r"^(True|False|Unknown)$",
        description="The condition's status to match: True (default), False or Unknown.",
    )


class FailurePolicyRule(ApiModel):
    """One rule: what a failed worker pod shows (an exit code or a pod condition), and what the job does."""

    action: FailureAction = Field(
        description=(
            "FailJob: fail the job at once (reason FailedByPolicy), no restart. Ignore: restart the job "
            "without counting it against maxRestarts (IgnoredByPolicy). Count: restart it and count it "
            "(WorkerFailed), as for a failure no rule matches."
        )
    )
    on_exit_codes: OnExitCodes | None = Field(
        default=None,
        description=(
            "Match the exit code of the worker's container. Pods the infrastructure stopped (preemption, "
            "maintenance, node loss: exit code 143 or a node-loss reason) are matched by onPodConditions "
            "DisruptionTarget only. Set this or onPodConditions."
        ),
    )
    on_pod_conditions: list[OnPodCondition] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_POD_CONDITIONS,
        description="Match when the pod has any of these conditions. Set this or onExitCodes.",
    )

    cel_rules = (
        (
            "has(self.onExitCodes) != has(self.onPodConditions)",
            "set exactly one of onExitCodes or onPodConditions",
        ),
    )


# The rules of a job that gives none: the trainer's bad-settings exit code fails the job at once. Exit code
# 143 (SIGTERM on a reclaimed or maintained node) stays a preemption: a restart that does not count.
DEFAULT_FAILURE_RULES: tuple[FailurePolicyRule, ...] = (
    FailurePolicyRule(
        action=FailureAction.fail_job,
        on_exit_codes=OnExitCodes(operator=ExitCodeOperator.in_, values=[EXIT_CODE_BAD_CONFIG]),
    ),
)


class FailurePolicy(ApiModel):
    """What a failed worker means for the job, rule by rule (as Kubernetes' podFailurePolicy and JobSet's
    failurePolicy). The first rule a failed pod matches decides; a pod no rule matches restarts the job as
    before: counted for an application failure, not counted for preemption, maintenance or node loss."""

    rules: list[FailurePolicyRule] | None = Field(
        default=None,
        max_length=MAX_FAILURE_RULES,
        description=(
            "Rules in order; the first match wins. Unset: one rule, exit code 2 (the trainer's bad "
            "settings) -> FailJob. An empty list: no rules."
        ),
    )

    def rules_in_effect(self) -> tuple[FailurePolicyRule, ...]:
        return DEFAULT_FAILURE_RULES if self.rules is None else tuple(self.rules)


class RunPolicy(ApiModel):
    """How the job behaves on failure, over time and when it ends."""

    max_restarts: int = Field(
        default=3,
        ge=0,
        le=1000,
        description=(
            "Restarts of the whole job after application failures (a non-zero exit). Preemption, "
            "maintenance and node loss restart the job without counting."
        ),
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Fail the job (DeadlineExceeded) after this many seconds from start."
    )
    provisioning_timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Fail the job (ProvisioningTimeout) and delete its node pools when its pools are not all "
            "running this many seconds after the job started waiting for them; unset: wait for capacity "
            "as long as it takes."
        ),
    )
    startup_timeout_seconds: int = Field(
        # Ten minutes: room for a multi-GB TPU image to pull; Kueue gives a job's pods 5 minutes by default
        # (waitForPodsReady.timeout) before it evicts the job.
        default=600,
        ge=0,
        description=(
            "Fail the job (StartupTimeout) and delete its node pools when its workers are not all running "
            "this many seconds after an attempt began starting them on ready pools (an image that cannot "
            "be pulled, a missing Secret, a pod that cannot be scheduled): no TPU slice is held by pods "
            "that cannot start. The kubelet's reason shows in the status meanwhile. 0: no limit."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Delete the TPUJob this many seconds after it succeeded or failed."
    )
    suspend: bool = Field(
        default=False, description="true: remove the pods and node pools and hold; false: run or resume."
    )
    maintenance_lead_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description=(
            "How long before the infrastructure ends a running slice (host maintenance GKE announced, or a "
            "flex-start run duration) the workers are told to checkpoint (SIGTERM) and the job restarts, "
            "without spending maxRestarts."
        ),
    )
    failure_policy: FailurePolicy = Field(
        default_factory=FailurePolicy,
        description=(
            "Rules on a worker's exit code or pod conditions: fail the job at once, restart it without "
            "counting, or count. Default: exit code 2 (the trainer's bad settings) fails the job at once."
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


class ConditionStatus(enum.StrEnum):
    true = "True"
    false = "False"
    unknown = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(description="Ready, Provisioned, Running, Succeeded, Failed, Suspended, ...")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str | None = Field(default=None, description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(default=None, description="spec generation this is based on.")


class NodePoolStatus(ApiModel):
    """One slice's GKE node pool as the operator last saw it."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="GKE node pool name.")
    slice: int = Field(description="Slice index the pool holds.")
    state: str = Field(description="GKE state (PROVISIONING, RUNNING, ERROR, ...) or Deleted.")
    message: str = Field(default="", description="GKE's last message about the pool.")
    condition: str | None = Field(
        default=None, description="GKE's condition code for the pool (GCE_STOCKOUT, GCE_QUOTA_EXCEEDED, ...)."
    )
    operation: str | None = Field(
        default=None, description="The GKE create or delete operation being waited on (its name)."
    )
    zone: str | None = Field(default=None, description="The pool's zone.")


class WorkerCounts(ApiModel):
    """The job's pods of the current attempt, by state."""

    model_config = ConfigDict(extra="ignore")

    expected: int = Field(default=0, description="Pods the job runs (hosts x slices).")
    pending: int = Field(default=0, description="Pods created, not yet running.")
    running: int = Field(default=0, description="Pods running.")
    succeeded: int = Field(default=0, description="Pods that exited 0 in this attempt.")
    failed: int = Field(default=0, description="Pods that failed in this attempt.")


class GoodputRun(ApiModel):
    """When one attempt was Running, as the operator saw it."""

    model_config = ConfigDict(extra="ignore")

    attempt: int = Field(description="The attempt.")
    since: str = Field(description="When the job's phase became Running in this attempt (RFC 3339).")
    until: str | None = Field(
        default=None, description="When it left Running (RFC 3339); unset while running."
    )


class Goodput(ApiModel):
    """How the job's time on its TPUs was spent (wall-clock seconds the job held or waited for its slices),
    in the categories of Google's goodput definitions (ml-goodput-measurement). Accounted when the phase
    changes and when an attempt ends, from the status' own timestamps and the trainer's progress line."""

    model_config = ConfigDict(extra="ignore")

    ratio: float | None = Field(
        default=None, description="productiveSeconds over all accounted seconds (0 to 1)."
    )
    productive_seconds: float = Field(default=0.0, description="Time spent on training steps kept.")
    badput_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Lost time per category: tpuInitialization, trainingPrep, programStartup, dataLoading, "
        "checkpointSave, checkpointRestore, wastedProgressFromDisruption, other.",
    )
    steps_lost: int = Field(
        default=0, description="Training steps redone because a disruption came after the last checkpoint."
    )
    accounted_until: str | None = Field(
        default=None, description="Time up to which the job's time is accounted (RFC 3339)."
    )
    accounted_attempt: int = Field(
        default=-1, description="The last attempt whose trainer progress was accounted."
    )
    unreported_attempts: int = Field(
        default=0,
        description="Attempts that ran but ended without a trainer progress line (e.g. their pods vanished "
        "with their node): their time after the checkpoint the next attempt resumed from is "
        "wastedProgressFromDisruption, but their steps lost and start-up are unknown (not in stepsLost).",
    )
    runs: list[GoodputRun] = Field(
        default_factory=list,
        description="When the attempts not yet accounted were Running (the latest few), to account an "
        "attempt that reports no progress.",
    )


class TPUJobStatus(ApiModel):
    """Written by the operator only."""

    model_config = ConfigDict(extra="ignore")

    phase: str | None = Field(
        default=None,
        description="Pending, Provisioning, Starting, Running, Restarting, Succeeded, Failed or Suspended.",
    )
    reason: str | None = Field(default=None, description="Why the job is in this phase.")
    message: str | None = Field(default=None, description="Details for a human.")
    conditions: list[Condition] = Field(default_factory=list, description="Latest observations.")
    observed_generation: int | None = Field(default=None, description="spec generation last acted on.")
    node_pools: list[NodePoolStatus] = Field(default_factory=list, description="One entry per slice.")
    workers: WorkerCounts = Field(default_factory=WorkerCounts, description="Pods of the current attempt.")
    attempt: int = Field(default=0, description="Current attempt; each restart recreates all pods.")
    restarts: int = Field(default=0, description="All restarts, whatever the cause.")
    application_restarts: int = Field(
        default=0, description="Restarts caused by the application; these count against maxRestarts."
    )
    restarts_by_reason: dict[str, int] = Field(default_factory=dict, description="Restarts per reason.")
    last_restart_time: str | None = Field(default=None, description="When the last restart began (RFC 3339).")
    start_time: str | None = Field(default=None, description="When the operator first acted (RFC 3339).")
    zone: str | None = Field(
        default=None, description="The zone the job's node pools are in, or asked for in."
    )
    zone_since: str | None = Field(
        default=None, description="Since when the job waits in that zone (RFC 3339)."
    )
    maintenance_time: str | None = Field(
        default=None,
        description="The earliest host maintenance GKE announced for the job's nodes (RFC 3339).",
    )
    run_deadline: str | None = Field(
        default=None,
        description="flexStart: when the current slice's VMs reach their run duration (RFC 3339).",
    )
    provisioning_since: str | None = Field(
        default=None,
        description="When the job began waiting for its node pools (RFC 3339); unset once they run.",
    )
    starting_since: str | None = Field(
        default=None,
        description="When the current attempt began starting its workers on ready pools (RFC 3339); unset "
        "once they all run. spec.runPolicy.startupTimeoutSeconds counts from it.",
    )
    running_time: str | None = Field(default=None, description="When all workers first ran (RFC 3339).")
    completion_time: str | None = Field(default=None, description="When the job finished (RFC 3339).")
    goodput: Goodput | None = Field(default=None, description="How the job's TPU time was spent.")


class ObjectMeta(BaseModel):
    """The metadata fields the operator reads; the API server owns the rest."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, alias_generator=to_camel)

    name: str = Field(default="", max_length=MAX_JOB_NAME_LENGTH, pattern=r"^([a-z]([-a-z0-9]*[a-z0-9])?)?$")
    namespace: str = Field(default="default")
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class TPUJob(ApiModel):
    """A TPU training job: TPU slices, capacity, the trainer and how to behave on failure."""

    api_version: str = Field(default=API_VERSION, pattern=f"^{API_VERSION}$")
    kind: str = Field(default=KIND, pattern=f"^{KIND}$")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TPUJobSpec
    status: TPUJobStatus | None = None
