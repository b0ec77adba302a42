"""What a decision is made from and of: the sets of phases and reasons it reads (the phases and reasons
themselves are tpujob.api.status' Phase and Reason), the views of pods and pools, Observed and Decision,
and small helpers. Pure data."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from tpujob import tpu
from tpujob.api.job import TPUJob
from tpujob.api.status import Condition, ConditionStatus, Phase, Reason, TPUJobStatus
from tpujob.render.placement import Placement
from tpujob.render.workload import PriorityFact
from tpujob.status.kueue_views import FlavorView, QueueView, WorkloadView, WorkloadWrites
from tpujob.status.queue_position import QueuePosition

# Phases a job never leaves.
TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})

# Why a container cannot start, in the kubelet's own words: its waiting reasons that need someone to act,
# as opposed to ContainerCreating or PodInitializing, which pass by themselves. Sources: kubelet
# pkg/kubelet/images/types.go (ErrImagePullBackOff, ErrImageInspect, ErrImagePull, ErrImageNeverPull,
# ErrInvalidImageName) and pkg/kubelet/container/sync_result.go (ErrCrashLoopBackOff, ErrRunContainer,
# ErrCreateContainerConfig, ErrPreCreateHook, ErrCreateContainer, ErrPreStartHook, ErrPostStartHook).
# A job whose worker shows one of these past the startup grace period carries it as its status reason.
CONTAINER_START_PROBLEMS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ImageInspectError",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "PreCreateHookError",
        "PreStartHookError",
        "PostStartHookError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
# Why a pod's volumes cannot be set up, in the kubelet's own words: the reasons of the Events the kubelet
# posts while the pod waits in ContainerCreating (pkg/kubelet/events/event.go: FailedMountVolume =
# "FailedMount", FailedAttachVolume = "FailedAttachVolume"). The observer reads them off the pod's Events for
# a worker still creating past the grace period (the container status says only ContainerCreating).
VOLUME_START_PROBLEMS = frozenset({"FailedMount", "FailedAttachVolume"})
# The kubelet alternates these two while it retries a pull (ErrImagePull, then ImagePullBackOff until the
# back-off ends): one problem, one Warning event.
SAME_PROBLEM = {"ImagePullBackOff": "ErrImagePull"}

INFRASTRUCTURE_REASONS = frozenset(
    {
        Reason.PREEMPTED,
        Reason.NODE_LOST,
        Reason.POOL_LOST,
        Reason.RUN_DURATION,
        Reason.MAINTENANCE,
        Reason.NODE_UPGRADE,
        Reason.NODE_REPAIR,
        Reason.MEGASCALE_HANG,
        Reason.SLICE_ERROR,
    }
)
# Waiting for these is worth a Warning event: someone may have to act (or at least know).
WARNING_REASONS = frozenset(
    {
        Reason.STOCKOUT,
        Reason.QUOTA,
        Reason.POOL_REJECTED,
        Reason.RESERVATION_EXHAUSTED,
        Reason.RESERVATION_NOT_FOUND,
        Reason.GKE_CONFIG,
        Reason.UNSCHEDULABLE,
        Reason.ZONE_FALLBACK,
        Reason.STARTUP_TIMEOUT,
        Reason.POD_REJECTED,
        Reason.NODE_UPGRADE,
        Reason.NODE_REPAIR,
        Reason.KUEUE_NOT_ENABLED,
        Reason.KUEUE_UNAVAILABLE,
        *CONTAINER_START_PROBLEMS,
        *VOLUME_START_PROBLEMS,
    }
)

# The pod condition Kubernetes adds to a pod it is about to stop for a disruption (Kubernetes >= 1.26).
DISRUPTION_TARGET = "DisruptionTarget"
# Pod failure reasons a node going away leaves behind (kubelet graceful node shutdown, eviction,
# node lifecycle / pod GC). A pod failing with one of these did nothing wrong itself.
NODE_LOSS_POD_REASONS = frozenset(
    {"Terminated", "NodeShutdown", "Shutdown", "NodeLost", "Evicted", "Preempting", "DeletionByPodGC"}
)

# GKE node pool states.
POOL_MISSING = "MISSING"  # not found in GKE (not yet created, or gone)
POOL_DELETED = "Deleted"
POOL_STOPPING = "STOPPING"  # GKE is deleting it
# States of a pool nobody needs to delete (again): never made, gone, or going.
POOL_RELEASED_STATES = frozenset({POOL_MISSING, POOL_DELETED, POOL_STOPPING})
POOL_READY_STATES = frozenset({"RUNNING", "RUNNING_WITH_ERROR"})
POOL_WAIT_STATES = frozenset({"PROVISIONING", "RECONCILING", "STOPPING"})

# Application restarts back off like Kubernetes Jobs: base, 2x base, 4x base ... up to the cap.
# Infrastructure restarts do not wait: the cause is gone and the pods just queue for new nodes; unless they
# come in a row, each within RAPID_RESTART_WINDOW_SECONDS of the one before (a tenant who deletes its pods
# again and again; a node lost at every start): then they back off as application restarts do, by their
# number in the row. The window is the kubelet's: a container's crash-loop back-off is forgotten after it
# ran twice its 5-minute cap without trouble (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/
# #container-restarts: "resets the backoff timer for a container after it has been running for 10 minutes").
RESTART_BACKOFF_CAP_SECONDS = 360.0
RAPID_RESTART_WINDOW_SECONDS = 600.0

# How long a pool may sit in ERROR before it is recreated: GKE's ERROR can be transient.
POOL_ERROR_GRACE = dt.timedelta(seconds=60)
# How often a pool GKE is still creating or deleting is looked at, by default (the setting
# TPUJOB_POLL_PROVISIONING_SECONDS, passed in as Observed.poll_provisioning_seconds).
DEFAULT_POLL_PROVISIONING_SECONDS = 5.0
# The other pass settings' defaults (TPUJOB_RESTART_BACKOFF_SECONDS, ..._UNSCHEDULABLE_GRACE_SECONDS,
# ..._STARTUP_GRACE_SECONDS), written here once: config.py, reconciler.Settings and Observed read them.
DEFAULT_RESTART_BACKOFF_SECONDS = 10.0
DEFAULT_UNSCHEDULABLE_GRACE_SECONDS = 30.0
DEFAULT_STARTUP_GRACE_SECONDS = 30.0
DEFAULT_PROGRESS_READS_PER_SECOND = 10.0  # TPUJOB_PROGRESS_READS_PER_SECOND: trainers' step counters read

# A refusal that asking again soon cannot fix (an invalid request, quota) is asked again after 30 s, 60 s,
# ... up to 20 times that, 10 minutes (someone may fix the job, the cluster or the quota meanwhile:
# TPUJOB_REFUSED_BACKOFF_SECONDS sets the first wait); transient refusals at the polling interval.
REJECTED_BACKOFF_BASE_SECONDS = 30.0
REJECTED_BACKOFF_CAP_SECONDS = 600.0
REJECTED_BACKOFF_CAP_FACTOR = REJECTED_BACKOFF_CAP_SECONDS / REJECTED_BACKOFF_BASE_SECONDS


@dataclass(frozen=True, slots=True)
class PodView:
    """What the operator needs to know of one of its pods (slots: the pod index keeps one per live pod)."""

    name: str
    slice: int
    worker: int
    attempt: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    reason: str = ""  # pod.status.reason, else the container's terminated reason
    exit_code: int | None = None
    deleting: bool = False
    node: str = ""  # spec.nodeName, once scheduled
    # The scheduler's message and since when (RFC 3339) while PodScheduled is False for Unschedulable.
    unschedulable: str = ""
    unschedulable_since: str = ""
    # The container's termination message (state.terminated.message): what the trainer wrote to its
    # termination log, or with FallbackToLogsOnError the end of its log.
    message: str = ""
    # When the container ended (state.terminated.finishedAt, RFC 3339; "" while it runs): the end of an
    # attempt killed after its trainer last wrote its progress line (goodput).
    finished_at: str = ""
    # The pod's conditions as (type, status), e.g. ("DisruptionTarget", "True"), for failurePolicy rules.
    conditions: tuple[tuple[str, str], ...] = ()
    # A failed pod's DisruptionTarget condition's reason (DeletionByPodGC, TerminationByKubelet, ...).
    disruption: str = ""
    # Running with its Ready condition True (its containers ready): what Kueue's PodsReady counts.
    ready: bool = False
    # A container that has not started: its name, the kubelet's waiting reason (ErrImagePull,
    # CreateContainerConfigError, ...; see CONTAINER_START_PROBLEMS) and message. Init containers first.
    waiting_container: str = ""
    waiting_reason: str = ""
    waiting_message: str = ""
    # When the kubelet took the pod (status.startTime, RFC 3339; "" before): a start problem counts from it.
    started_at: str = ""
    # The trainer ended (phase says how) but a sidecar keeps the pod Running on its node: never kept for logs.
    lingering: bool = False
    # Where the trainer serves its metrics (status.podIP and its container's port named "metrics"; "" and 0
    # when not known): worker 0's step counter is read there while the job runs.
    ip: str = ""
    metrics_port: int = 0
    # The attempt the pod's trainer was told to run (annotation tpujob.dev/restart-attempt): the attempt that
    # created the pod, or a later one its trainer restarts in place for (restartStrategy RecreateSlice).
    restart_attempt: int = 0


@dataclass(frozen=True)
class NodeFault:
    """A node condition GKE's TPU device plugin sets from libtpu's signals (MegascaleHangDetected,
    SliceErrorDetected), True, with its lastHeartbeatTime (RFC 3339: the plugin renews it every collection
    while libtpu still reports the error, and removes the condition 30 minutes after the last) and message."""

    type: str
    heartbeat: str
    message: str = ""


@dataclass(frozen=True)
class PoolView:
    """One slice's node pool as GKE reported it in this pass."""

    slice: int
    name: str
    state: str  # POOL_MISSING or a GKE status
    message: str = ""
    condition: str = ""  # GKE's condition code (GCE_STOCKOUT, GCE_QUOTA_EXCEEDED, ...), "" when none
    # Whether GKE still runs the pool's create operation (it retries a stockout meanwhile); None: not asked.
    retrying: bool | None = None
    operation: str = ""  # the create operation, once known
    zone: str = ""  # where GKE has it ("" when not known)
    # GKE's running operation that recreates the pool's nodes (its type, UPGRADE_NODES or AUTO_REPAIR_NODES,
    # and its name); "" when none runs or GKE was not asked.
    disruption: str = ""
    disruption_operation: str = ""
    # Whether that operation still runs (False: it ended after the current attempt began).
    disruption_running: bool = True
    # The pool's job-uid label as GKE has it ("" when it has none); None: not read (the pool is missing).
    job_uid: str | None = None
    # GKE refused to show the pool's operations (403): which permission is missing, as the status says it.
    denied: str = ""


@dataclass(frozen=True)
class GKEError:
    """The last failed GKE call for a slice, classified (see gke.classify_error)."""

    reason: (
        str  # Reason.STOCKOUT, Reason.QUOTA, Reason.GKE_BUSY, Reason.GKE_UNAVAILABLE, Reason.POOL_REJECTED,
        # Reason.RESERVATION_EXHAUSTED, Reason.RESERVATION_NOT_FOUND
    )
    message: str
    permanent: bool = False  # cannot succeed soon: someone must change the job, the cluster or the quota


@dataclass(frozen=True)
class PolicyFact:
    """A workload policy as the Compute API answered for it: its accelerator topology, or the call's error;
    neither: it does not exist."""

    name: str
    project: str
    region: str
    topology: str | None = None
    error: GKEError | None = None


@dataclass(frozen=True)
class ProgressSample:
    """What worker 0's metrics endpoint said this pass (the trainer contract's series)."""

    attempt: int  # of the pod it was read from
    step: int
    target_steps: int | None = None
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None  # Unix seconds


@dataclass(frozen=True)
class ChipBudget:
    """The namespace's limit and what its other TPUJobs count against it, as the pass found them."""

    namespace: str
    limit: int
    others: int
    # The job's status says it was admitted, but nothing the operator knows vouches for it (its own
    # admission, or the job's pods): a writer of tpujobs/status may have set startTime. Judged again.
    recheck: bool = False

    def fits(self, chips: int) -> bool:
        return self.others + chips <= self.limit


@dataclass(frozen=True)
class ChipReservation:
    """The chips a pass admits a job with under its namespace's limit (status/tenancy.py): reserved first
    when acting, if they still fit (a pass side by side may have taken the room since they were counted)."""

    namespace: str
    limit: int
    chips: int


@dataclass(frozen=True)
class Observed:
    job: TPUJob
    now: dt.datetime
    pods: tuple[PodView, ...] = ()
    # None: GKE was not asked in this pass; the status' pool states stand.
    pools: tuple[PoolView, ...] | None = None
    gke_errors: dict[int, GKEError] = field(default_factory=dict)
    service_exists: bool = False
    # The job's own NetworkPolicy exists (seen by the watch with the job's UID as owner, or created by a pass
    # and not yet seen); always True where the operator makes none (TPUJOB_NETWORK_POLICY=false).
    network_policy_exists: bool = True
    # Pods created but not yet seen by the watch; they are not "missing".
    pods_in_flight: frozenset[str] = frozenset()
    # Why the API server refused the last pod creates ("" when it took them): a reason to show, and ask again.
    pods_refused: str = ""
    # Seconds before refused pods may be asked again (the operator's backoff; 0: now).
    pods_refused_wait: float = 0.0
    restart_backoff_seconds: float = DEFAULT_RESTART_BACKOFF_SECONDS
    # The namespace's tenancy policy runs its TPUJobs only through Kueue (requireQueue).
    queue_required: bool = False
    # Edits of a running job's shape that the pass refused (status/shape.py: the job is as admitted).
    shape_refused: tuple[str, ...] = ()
    # Pools GKE is creating or deleting are looked at again this often (and refused creates asked again).
    poll_provisioning_seconds: float = DEFAULT_POLL_PROVISIONING_SECONDS
    # Pods Pending as unschedulable for this long show the scheduler's reason in the status.
    unschedulable_grace_seconds: float = DEFAULT_UNSCHEDULABLE_GRACE_SECONDS
    # Pods whose container cannot start (CONTAINER_START_PROBLEMS) for this long show the kubelet's reason.
    startup_grace_seconds: float = DEFAULT_STARTUP_GRACE_SECONDS
    # The zones the job's pools may go to, in order (render.pools.job_zones); none for pools made elsewhere.
    zones: tuple[str, ...] = ()
    # Host maintenance GKE announced (node -> Unix seconds), for the nodes of the job's pods.
    maintenance: dict[str, int] = field(default_factory=dict)
    # The cluster's GKE version as GetCluster last said ("" not yet known), and the workload policy that
    # places the job's pools as the Compute API described it (None: none named, or not looked up): what a
    # pool needs before it is asked for (placement.py).
    cluster_version: str = ""
    workload_policy: PolicyFact | None = None
    # Worker 0's step counter, read while the job runs (None: not read, or unreadable: `progress_error` says
    # why), for status.progress and progressDeadlineSeconds.
    progress: ProgressSample | None = None
    progress_error: str = ""
    # Worker pods deleted since, as the watch last showed them ending (their termination messages).
    departed: tuple[PodView, ...] = ()
    # Flex-start: when the job's slice's nodes were created (the earliest; None: not looked at, or unknown),
    # from which GKE counts maxRunDuration.
    slice_created: dt.datetime | None = None
    # Whether a flex-start request queued in one zone may be deleted for the next zone after
    # zoneFallbackSeconds (the operator's TPUJOB_GKE_FLEX_START_ZONE_FALLBACK): off by default, as the move
    # gives up the request's place in Dynamic Workload Scheduler's queue.
    flex_start_zone_fallback: bool = False
    # Kueue: None for a job without the queue-name label (admitted by nobody: it runs as it always did).
    queue: QueueView | None = None
    # Its namespace's chip limit (tenancy policy maxChips) and the others' chips, while the job waits to be
    # admitted (None: no limit, queued through Kueue, or admitted already): status/tenancy.py.
    chips: ChipBudget | None = None

    # The TPU device plugin's hardware conditions on the nodes of the job's pods (node -> its faults).
    node_faults: dict[str, tuple[NodeFault, ...]] = field(default_factory=dict)
    # The nodes of status.nodeFailures whose Node object was deleted lately, and when (RFC 3339): a node of
    # the same name since is a new VM (status/bad_nodes.py).
    nodes_deleted: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> TPUJobStatus:
        return self.job.status or TPUJobStatus()


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass
class Decision:
    status: TPUJobStatus
    create_pools: list[int] = field(default_factory=list)
    delete_pools: list[str] = field(default_factory=list)
    create_service: bool = False
    # The job's NetworkPolicy, made before any pod of the pass (and again when it was deleted under the job).
    create_network_policy: bool = False
    create_pods: list[tuple[int, int]] = field(default_factory=list)  # (slice, worker) of status.attempt
    delete_pods: list[str] = field(default_factory=list)
    # Pods kept through a narrow restart whose trainer is told the new attempt (their annotation
    # tpujob.dev/restart-attempt set to status.attempt): they restart training in place.
    restart_in_place: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    # Pool creates withheld for a reason that is a refusal (placement.py): backed off like GKE's refusals.
    refused: dict[int, GKEError] = field(default_factory=dict)
    # Kueue: the Workload's writes, and each slice's placement from its admission (empty: none).
    workload: WorkloadWrites = field(default_factory=WorkloadWrites)
    placement: dict[int, Placement] = field(default_factory=dict)
    chips: ChipReservation | None = None  # admitted under its namespace's chip limit: reserved when acting

    @property
    def creates(self) -> bool:
        """Whether carrying it out creates anything (a pool, a pod, the Service, the NetworkPolicy, a Kueue
        Workload)."""
        return bool(
            self.create_pools
            or self.create_pods
            or self.create_service
            or self.create_network_policy
            or self.workload.create
        )

    def requeue(self, seconds: float) -> None:
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


# --- small helpers -----------------------------------------------------------------------------


def timestamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: str) -> dt.datetime:
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def set_condition(
    conditions: list[Condition], type_: str, status: bool, reason: str, message: str, now: dt.datetime
) -> list[Condition]:
    """Kubernetes convention: lastTransitionTime moves only when the status flips."""
    wanted = ConditionStatus.true if status else ConditionStatus.false
    current = next((c for c in conditions if c.type == type_), None)
    moved = current is None or current.status != wanted
    updated = Condition(
        type=type_,
        status=wanted,
        reason=reason,
        message=message,
        last_transition_time=timestamp(now) if moved or current is None else current.last_transition_time,
    )
    return [c for c in conditions if c.type != type_] + [updated]


def expected_workers(job: TPUJob) -> list[tuple[int, int]]:
    hosts = tpu.resolve_slice(job.spec.tpu.type, job.spec.tpu.topology, job.spec.tpu.machine_type).hosts
    return [(s, w) for s in range(job.spec.tpu.slices) for w in range(hosts)]


def serving_attempt(status: TPUJobStatus, slice_index: int) -> int:
    """The attempt whose pods serve a slice: status.attempt, unless a narrow restart kept the slice's pods
    of an earlier one (status.sliceAttempts)."""
    if slice_index < len(status.slice_attempts):
        return status.slice_attempts[slice_index]
    return status.attempt


def is_current(status: TPUJobStatus, pod: PodView) -> bool:
    """The pod serves the current attempt (made by it, or kept through a narrow restart)."""
    return pod.attempt == serving_attempt(status, pod.slice)


def is_infrastructure_failure(pod: PodView) -> bool:
    """Preemption, maintenance or node loss, as opposed to the application failing: only on the evidence
    Kubernetes leaves on the pod. A node-loss reason (graceful node shutdown on a spot reclaim or host
    maintenance: reason Terminated), or a DisruptionTarget condition, which the kubelet, the scheduler, the
    taint manager, the Eviction API and pod GC add before they stop a pod (reasons TerminationByKubelet,
    PreemptionByScheduler, DeletionByTaintManager, EvictionByEvictionAPI, DeletionByPodGC:
    kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions). Exit code 143 alone
    is not: any SIGTERM gives it, and so can a trainer's own exit; without evidence it is the application's
    failure, counted and backed off."""
    return pod.reason in NODE_LOSS_POD_REASONS or (DISRUPTION_TARGET, "True") in pod.conditions


def rejected_backoff_seconds(refusals: int, base: float = REJECTED_BACKOFF_BASE_SECONDS) -> float:
    """Wait before asking GKE again after the n-th refusal in a row of a permanently refused request."""
    return min(base * 2.0 ** max(refusals - 1, 0), base * REJECTED_BACKOFF_CAP_FACTOR)


__all__ = [
    "CONTAINER_START_PROBLEMS",
    "DEFAULT_POLL_PROVISIONING_SECONDS",
    "DEFAULT_PROGRESS_READS_PER_SECOND",
    "DEFAULT_RESTART_BACKOFF_SECONDS",
    "DEFAULT_STARTUP_GRACE_SECONDS",
    "DEFAULT_UNSCHEDULABLE_GRACE_SECONDS",
    "DISRUPTION_TARGET",
    "INFRASTRUCTURE_REASONS",
    "NODE_LOSS_POD_REASONS",
    "POOL_DELETED",
    "POOL_ERROR_GRACE",
    "POOL_MISSING",
    "POOL_READY_STATES",
    "POOL_RELEASED_STATES",
    "POOL_STOPPING",
    "POOL_WAIT_STATES",
    "RAPID_RESTART_WINDOW_SECONDS",
    "REJECTED_BACKOFF_BASE_SECONDS",
    "REJECTED_BACKOFF_CAP_SECONDS",
    "RESTART_BACKOFF_CAP_SECONDS",
    "SAME_PROBLEM",
    "TERMINAL_PHASES",
    "VOLUME_START_PROBLEMS",
    "WARNING_REASONS",
    "ChipBudget",
    "ChipReservation",
    "Decision",
    "Event",
    "FlavorView",
    "GKEError",
    "NodeFault",
    "Observed",
    "Placement",
    "PodView",
    "PolicyFact",
    "PoolView",
    "PriorityFact",
    "ProgressSample",
    "QueuePosition",
    "QueueView",
    "WorkloadView",
    "WorkloadWrites",
    "expected_workers",
    "is_current",
    "is_infrastructure_failure",
    "parse_timestamp",
    "rejected_backoff_seconds",
    "serving_attempt",
    "set_condition",
    "timestamp",
]
