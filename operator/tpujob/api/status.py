"""The TPUJob status as pydantic models: written by the operator only, read by users, `kubectl` and the
operator's next pass. The CRD's status schema is generated from them."""

from __future__ import annotations

import enum

from pydantic import ConfigDict, Field

from tpujob.api.base import ApiModel

# Bounds on the status' lists and maps (the API server takes an unbounded one as long as a request): each
# holds one entry per condition type, reason, badput category or recent attempt (goodput keeps 4), well under
# 64; node pools one per slice, and spec.tpu.slices is at most 64 (twice that while a changed spec's pools
# replace the old ones).
MAX_STATUS_ENTRIES = 64
MAX_STATUS_POOLS = 128


class Phase(enum.StrEnum):
    """status.phase: a readable summary of where the job is in its life cycle (the CRD's enum)."""

    PENDING = "Pending"
    QUEUED = "Queued"  # waiting for Kueue to admit the job's Workload (kueue.x-k8s.io/queue-name)
    PROVISIONING = "Provisioning"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class Reason(enum.StrEnum):
    """The operator's own reasons: in status.reason, condition reasons, event reasons and restart reasons.

    status.reason stays a string: it also carries the kubelet's reasons for a worker that cannot start
    (ErrImagePull, CreateContainerConfigError, ...), which are the kubelet's words, not these.
    """

    INVALID_SPEC = "InvalidSpec"
    BACKOFF_LIMIT = "BackoffLimitExceeded"
    DEADLINE = "DeadlineExceeded"
    WORKER_FAILED = "WorkerFailed"  # application: counts against maxRestarts
    FAILED_BY_POLICY = "FailedByPolicy"  # a failurePolicy rule (FailJob) ended the job at once
    IGNORED_BY_POLICY = "IgnoredByPolicy"  # a failurePolicy rule (Ignore): restarts, does not count
    # An edit of a running job's spec.tpu, spec.capacity, spec.nodePool or queue label: refused, the job runs
    # as admitted (status/shape.py).
    SHAPE_CHANGE_REFUSED = "ShapeChangeRefused"
    PREEMPTED = "Preempted"  # infrastructure: spot reclaim, maintenance, node shutdown
    NODE_LOST = "NodeLost"  # infrastructure: the pod vanished with its node
    POOL_LOST = "NodePoolLost"  # infrastructure: GKE lost or broke the slice's pool
    STOCKOUT = "Stockout"
    QUOTA = "QuotaExceeded"
    GKE_BUSY = "IncompatibleOperation"
    GKE_UNAVAILABLE = "GKEUnavailable"
    POOL_REJECTED = "NodePoolRejected"  # GKE refused the request itself: retrying it as is cannot help
    RESERVATION_EXHAUSTED = "ReservationExhausted"  # the spec's reservation has too few free VMs (429)
    RESERVATION_NOT_FOUND = "ReservationNotFound"  # no such reservation in the pool's zone (404)
    GKE_CONFIG = "GKEConfigError"  # the operator's GKE settings point at no usable cluster or zone
    PROVISIONING = "Provisioning"
    PROVISIONING_TIMEOUT = "ProvisioningTimeout"
    UNSCHEDULABLE = "Unschedulable"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # flex-start: the slice is queued for capacity
    RUN_DURATION = "RunDurationReached"  # flex-start: the slice's VMs reach their run duration
    MAINTENANCE = "Maintenance"  # GKE announced host maintenance for a node of the slice
    NODE_UPGRADE = "NodeUpgrade"  # GKE upgrades the slice's node pool (UPGRADE_NODES): every host recreated
    NODE_REPAIR = (
        "NodeRepair"  # GKE auto-repairs a host of the slice (AUTO_REPAIR_NODES): every host recreated
    )
    MAINTENANCE_SCHEDULED = "MaintenanceScheduled"
    ZONE_FALLBACK = "ZoneFallback"  # no capacity in one zone for too long: the next zone is tried
    STARTUP_TIMEOUT = "StartupTimeout"  # workers scheduled on the slice did not all run in time
    POD_REJECTED = "PodCreateRejected"  # the API server refused the worker pods (400, 403, 422)
    STALLED = "Stalled"  # the trainer's step did not move for spec.runPolicy.progressDeadlineSeconds
    # GKE's TPU device plugin set a node condition of a running slice from libtpu's signals (the condition
    # types, as ai-on-gke/tpu-device-plugin pkg/metrics/metrics.go names them): infrastructure, not counted.
    MEGASCALE_HANG = "MegascaleHangDetected"
    SLICE_ERROR = "SliceErrorDetected"
    # Kueue: the job's Workload is created and waits; Kueue's own reasons (Pending, Inadmissible, Preempted,
    # PodsReadyTimeout, ...) are quoted as Kueue writes them.
    WORKLOAD_CREATED = "WorkloadCreated"
    ADMITTED = "Admitted"
    WORKLOAD_REPLACED = "WorkloadReplaced"  # spec.tpu changed: the Workload no longer describes the job
    QUEUE_REQUIRED = "QueueRequired"  # its namespace runs TPUJobs only through Kueue (tenancy requireQueue)
    KUEUE_NOT_ENABLED = "KueueNotEnabled"  # labelled for a queue, but the operator runs without Kueue
    KUEUE_UNAVAILABLE = "KueueUnavailable"  # the Workload API cannot be read or written
    INVALID_FOR_KUEUE = "InvalidForKueue"  # a queued job Kueue's Workload cannot describe (over 18 slices)
    CHIP_LIMIT = "ChipLimit"  # its namespace's TPUJobs hold the chips its tenancy policy allows (maxChips)
    # A node failed the job BAD_NODE_FAILURES times (status.nodeFailures): its next attempts keep off it.
    BAD_NODE_AVOIDED = "BadNodeAvoided"
    # A node in status.nodeFailures was deleted since its last failure (GKE's repair, a recreated VM): its
    # count starts again, and it is no longer avoided.
    BAD_NODE_REPLACED = "BadNodeReplaced"


class ConditionType(enum.StrEnum):
    """status.conditions[].type: the conditions the operator sets."""

    NODE_POOLS_READY = "NodePoolsReady"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class TransitionReason(enum.StrEnum):
    """The reasons of a job's normal transitions, in status.reason and its conditions (a problem's reason
    is a Reason)."""

    CREATED = "Created"
    EXISTING_NODE_POOLS = "ExistingNodePools"
    NODE_POOLS_RUNNING = "NodePoolsRunning"
    STARTING = "Starting"
    RUNNING = "Running"
    ALL_WORKERS_RUNNING = "AllWorkersRunning"
    SUCCEEDED = "Succeeded"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"


def _one_of(values: list[str]) -> str:
    """The values of an enum as "A, B or C" in a description, so the list is written once."""
    return f"{', '.join(values[:-1])} or {values[-1]}" if len(values) > 1 else "".join(values)


class ConditionStatus(enum.StrEnum):
    true = "True"
    false = "False"
    unknown = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(description=f"{_one_of([t.value for t in ConditionType])}.")
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


class Progress(ApiModel):
    """The trainer's own step counter while it runs, read from worker 0's metrics endpoint (the trainer
    contract: tpujob_trainer_global_step and tpujob_trainer_target_steps on its `metrics` port)."""

    model_config = ConfigDict(extra="ignore")

    step: int | None = Field(
        default=None,
        description="The training step worker 0 reached (resumed steps included); unset: not read. Once the "
        "job has succeeded, the step its trainer exited at (the progress line of its termination message).",
    )
    target_steps: int | None = Field(default=None, description="The step at which training ends.")
    percent: int | None = Field(default=None, description="step / targetSteps, in whole percent.")
    eta: str | None = Field(
        default=None,
        description="When training should end (RFC 3339), at the pace since paceTime; unset until a read "
        "after paceTime.",
    )
    checkpoint_step: int | None = Field(default=None, description="The step of the last checkpoint saved.")
    checkpoint_time: str | None = Field(default=None, description="When it was saved (RFC 3339).")
    step_time: str = Field(
        description="Since when the step has been at this value, or the attempt has run (RFC 3339): "
        "progressDeadlineSeconds counts from it."
    )
    read_time: str = Field(
        description="When this was read (RFC 3339). The status is rewritten when the step moves, not for "
        "every read of a step that stands still."
    )
    attempt: int = Field(default=0, description="The attempt whose trainer reported it.")
    pace_step: int | None = Field(
        default=None, description="The step at the first read at which it had moved in this attempt."
    )
    pace_time: str | None = Field(
        default=None,
        description="When that was read (RFC 3339, to the millisecond): the ETA's pace is measured from it.",
    )
    stalled: bool | None = Field(
        default=None, description="This attempt was restarted as Stalled (progressDeadlineSeconds)."
    )
    last_words: str | None = Field(
        default=None,
        description="What the workers of the last attempt restarted as Stalled said as they ended (their "
        "termination messages: the trainer dumps its threads' stacks on SIGTERM).",
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
        max_length=MAX_STATUS_ENTRIES,
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
        max_length=MAX_STATUS_ENTRIES,
        description="When the attempts not yet accounted were Running (the latest few), to account an "
        "attempt that reports no progress.",
    )


class Cost(ApiModel):
    """What the job's TPUs cost, in TPU chip-seconds: the chips the job held (its node pools while they
    exist, from the create call until GKE has deleted them; on existing pools, the hosts of its running
    workers) times the seconds it held them. Accounted when the chips held or the phase change, from the
    status' own times, so the figure is exact at each change (the metric tpujob_tpu_chip_seconds_total adds
    the same amounts as they accrue) and final once the job has ended and its pools are gone."""

    model_config = ConfigDict(extra="ignore")

    chip_seconds: int = Field(default=0, description="TPU chip-seconds held up to accountedUntil.")
    productive_chip_seconds: int = Field(
        default=0,
        description="goodput.productiveSeconds times the job's chips: chip-seconds spent on training steps "
        "kept.",
    )
    chips: int = Field(default=0, description="TPU chips held since accountedUntil.")
    accounted_until: str | None = Field(
        default=None, description="Time up to which chipSeconds is accounted (RFC 3339)."
    )


class StartEstimate(ApiModel):
    """When a queued job should be admitted: when enough of its ClusterQueue's quota frees up for it, from the
    ETAs and deadlines of the TPUJobs holding that quota and the jobs ahead of it in Kueue's order
    (docs/concepts/kueue.md says how, and what it does not know)."""

    model_config = ConfigDict(extra="ignore")

    time: str | None = Field(
        default=None, description="The estimated admission time (RFC 3339); unset: unknown (reason says why)."
    )
    bound: bool = Field(
        default=False,
        description="A latest start rather than an estimate: the time rests on deadlines "
        "(activeDeadlineSeconds), or quota whose release the operator cannot foresee (a job with no ETA, "
        "workloads it does not run) may come back sooner.",
    )
    jobs_ahead: int | None = Field(
        default=None, ge=0, description="TPUJobs ahead of it in its ClusterQueue, in Kueue's order."
    )
    reason: str | None = Field(default=None, max_length=1024, description="Why the start is unknown.")
    computed_time: str = Field(description="When this was estimated (RFC 3339).")


class QueueStatus(ApiModel):
    """Where Kueue has the job: its queue, its Workload, the ClusterQueue and flavors that admitted it."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="The LocalQueue (the label kueue.x-k8s.io/queue-name).")
    workload: str | None = Field(
        default=None, description="The job's Workload (kueue.x-k8s.io, v1beta2 or v1beta1: as Kueue serves)."
    )
    cluster_queue: str | None = Field(
        default=None, description="The ClusterQueue the job waits in, or was admitted by."
    )
    queued_since: str | None = Field(
        default=None,
        description="When the job last began waiting for admission (RFC 3339); unset once admitted.",
    )
    admitted_time: str | None = Field(default=None, description="When Kueue last admitted it (RFC 3339).")
    flavors: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_STATUS_ENTRIES,
        description="The ResourceFlavors of the admission, by pod set (slice-0, ...): Kueue's assignment.",
    )
    evictions: int = Field(
        default=0,
        description="Times Kueue evicted the job (preempted, PodsReady timeout, ...): not restarts.",
    )
    pending_workloads: int | None = Field(
        default=None, description="Workloads pending in the LocalQueue, as Kueue last counted them."
    )
    position: int | None = Field(
        default=None,
        ge=1,
        description="While queued, the job's place among the Workloads pending in its ClusterQueue, 1 the "
        "next Kueue considers (Kueue's visibility API, positionInClusterQueue + 1; read at most once every "
        "10 s per ClusterQueue). Unset when that API is not served: then "
        "pendingWorkloads counts the LocalQueue's.",
    )
    deactivated_workload: str | None = Field(
        default=None,
        description="The Workload the operator deactivated itself (spec.active false: the job was "
        "suspended), the only one it activates again; one Kueue or an administrator deactivated stays so.",
    )
    estimated_start: StartEstimate | None = Field(
        default=None, description="While it waits for quota: when it should be admitted."
    )
    summary: str | None = Field(
        default=None,
        max_length=256,
        description="While it waits for quota, what `kubectl get tpujobs` shows: its position in the "
        "ClusterQueue where known and its estimated start, e.g. 'Queued #3, ~14:20Z'.",
    )


MAX_RESTART_HISTORY = 10


class RestartRecord(ApiModel):
    """One restart and how long the job took to recover from it: from the fault the operator saw to the
    first step the new attempt's trainer reported (worker 0's step counter, read once every worker runs)."""

    model_config = ConfigDict(extra="ignore")

    attempt: int = Field(description="The attempt the restart began.")
    reason: str = Field(description="Its cause (a reason of status.restartsByReason).")
    fault_time: str = Field(description="When the operator saw the fault and began the restart (RFC 3339).")
    step: int | None = Field(
        default=None, description="The step the failed attempt's trainer had last reported; unset: none read."
    )
    checkpoint_step: int | None = Field(
        default=None, description="The step of its last checkpoint, where the new attempt resumes."
    )
    steps_redone: int | None = Field(
        default=None, ge=0, description="Steps the new attempt trains again: step - checkpointStep."
    )
    running_time: str | None = Field(
        default=None, description="When every worker of the new attempt ran (RFC 3339)."
    )
    recovered_time: str | None = Field(
        default=None,
        description="When the new attempt's trainer first reported its step (RFC 3339); unset: not yet, or "
        "the attempt ended first, or the trainer reports no step.",
    )
    recovery_seconds: float | None = Field(
        default=None, ge=0, description="recoveredTime - faultTime: the time the restart cost."
    )


MAX_NODE_FAILURES = 16
# A Kubernetes node name: a DNS subdomain (RFC 1123), at most 253 characters.
NODE_NAME_MAX_LENGTH = 253


class NodeFailure(ApiModel):
    """A node the job's failures were attributed to: the node's own fault, not the trainer's (see
    docs/concepts/failure-and-recovery.md, "A bad host")."""

    model_config = ConfigDict(extra="ignore")

    node: str = Field(
        max_length=NODE_NAME_MAX_LENGTH, description="The node's name (kubernetes.io/hostname)."
    )
    failures: int = Field(
        default=0, ge=0, description="Attempts of this job that failed on this node (since replacedTime)."
    )
    reason: str = Field(
        default="",
        max_length=64,
        description="The last failure's cause: NodeLost or DeletionByPodGC (the node went away), "
        "UnexpectedAdmissionError (the kubelet could not allocate its TPU devices), StartError or "
        "ContainerCannotRun (the runtime could not hand them to the container), MegascaleHangDetected or "
        "SliceErrorDetected (GKE's TPU device plugin).",
    )
    last_time: str | None = Field(default=None, description="When the last one was seen (RFC 3339).")
    replaced_time: str | None = Field(
        default=None,
        description="When the node was deleted after its last failure (GKE's repair, a recreated VM): a node "
        "of that name since is a new VM, its count started again (RFC 3339).",
    )
    avoided: bool = Field(
        default=False,
        description="The node failed the job twice: its next attempts keep off it (policy existing: a "
        "required node affinity NotIn on kubernetes.io/hostname; policy create: the slice's pool is "
        "recreated, with new VMs).",
    )


class TPUJobStatus(ApiModel):
    """Written by the operator only."""

    model_config = ConfigDict(extra="ignore")

    phase: Phase | None = Field(default=None, description=f"{_one_of([p.value for p in Phase])}.")
    reason: str | None = Field(default=None, description="Why the job is in this phase.")
    message: str | None = Field(default=None, description="Details for a human.")
    conditions: list[Condition] = Field(
        default_factory=list, max_length=MAX_STATUS_ENTRIES, description="Latest observations."
    )
    observed_generation: int | None = Field(default=None, description="spec generation last acted on.")
    node_pools: list[NodePoolStatus] = Field(
        default_factory=list, max_length=MAX_STATUS_POOLS, description="One entry per slice."
    )
    workers: WorkerCounts = Field(default_factory=WorkerCounts, description="Pods of the current attempt.")
    attempt: int = Field(default=0, description="Current attempt; each restart recreates all pods.")
    slice_attempts: list[int] = Field(
        default_factory=list,
        max_length=MAX_STATUS_POOLS,
        description="restartStrategy RecreateSlice: per slice, the attempt that created the pods serving it "
        "(a slice kept through a narrow restart keeps its pods, which restart their trainer in place); "
        "empty: every slice runs pods of the current attempt.",
    )
    restarts: int = Field(default=0, description="All restarts, whatever the cause.")
    application_restarts: int = Field(
        default=0, description="Restarts caused by the application; these count against maxRestarts."
    )
    restarts_by_reason: dict[str, int] = Field(
        default_factory=dict, max_length=MAX_STATUS_ENTRIES, description="Restarts per reason."
    )
    last_restart_time: str | None = Field(default=None, description="When the last restart began (RFC 3339).")
    restart_history: list[RestartRecord] = Field(
        default_factory=list,
        max_length=MAX_RESTART_HISTORY,
        description=f"The last {MAX_RESTART_HISTORY} restarts, oldest first: each one's cause, when its "
        "fault was seen, when the job recovered and the steps it redid.",
    )
    node_failures: list[NodeFailure] = Field(
        default_factory=list,
        max_length=MAX_NODE_FAILURES,
        description=f"The nodes the job's failures were attributed to (at most {MAX_NODE_FAILURES}, the "
        "most recent kept), each with its count; a node that failed the job twice is avoided.",
    )
    admitted_shape: str | None = Field(
        default=None,
        max_length=8192,
        description="What the job holds (spec.tpu, spec.capacity, spec.nodePool) and its queue label as it "
        "was admitted, recorded by the operator when the job first holds TPUs: a running job follows it, "
        "never an edit (JSON).",
    )
    shape_change_refused: str | None = Field(
        default=None,
        max_length=4096,
        description="The edits of a running job's shape the operator refuses (each field named); the job "
        "keeps running as it was admitted.",
    )
    rapid_restarts: int = Field(
        default=0,
        ge=0,
        description="Restarts in a row, each within 10 minutes of the one before: uncounted ones "
        "(preemption, a lost node, a deleted pod) back off by this number, as application restarts do by "
        "theirs.",
    )
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
    progress: Progress | None = Field(
        default=None, description="How far the trainer got, read while it runs (within one resync)."
    )
    cost: Cost | None = Field(
        default=None, description="TPU chip-seconds the job held, and those spent productively."
    )
    queue: QueueStatus | None = Field(
        default=None, description="Kueue: the job's queue and Workload, for a job labelled with a queue name."
    )
