"""The operator's brain, pure: what it observed -> what to do and what the status says.

`decide()` takes a snapshot (the job, its last status, its pods, its node pools, the time) and
returns a Decision: pools to create or delete, pods to create or delete, the new status, events,
and when to look again. The handlers execute it. Being pure, every life-cycle rule is table-tested
without a cluster, and a crash between any two API calls converges: the next snapshot shows what
was done, and the same rules pick up from there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field

from tpujob import tpu
from tpujob.api.constants import EXIT_CODE_PREEMPTED
from tpujob.api.models import (
    FLEX_START_MAX_RUN_SECONDS,
    CapacityMode,
    Condition,
    ConditionStatus,
    NodePoolPolicy,
    NodePoolStatus,
    TPUJob,
    TPUJobStatus,
    WorkerCounts,
)
from tpujob.render import naming

# Phases (status.phase).
PENDING = "Pending"
PROVISIONING = "Provisioning"
STARTING = "Starting"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})

# Reasons (status.reason, condition reasons, event reasons, restart reasons).
REASON_INVALID_SPEC = "InvalidSpec"
REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
REASON_DEADLINE = "DeadlineExceeded"
REASON_WORKER_FAILED = "WorkerFailed"  # application: counts against maxRestarts
REASON_PREEMPTED = "Preempted"  # infrastructure: spot reclaim, maintenance, node shutdown
REASON_NODE_LOST = "NodeLost"  # infrastructure: the pod vanished with its node
REASON_POOL_LOST = "NodePoolLost"  # infrastructure: GKE lost or broke the slice's pool
REASON_STOCKOUT = "Stockout"
REASON_QUOTA = "QuotaExceeded"
REASON_GKE_BUSY = "IncompatibleOperation"
REASON_GKE_UNAVAILABLE = "GKEUnavailable"
REASON_POOL_REJECTED = "NodePoolRejected"  # GKE refused the request itself: retrying it as is cannot help
REASON_GKE_CONFIG = "GKEConfigError"  # the operator's GKE settings point at no usable cluster or zone
REASON_PROVISIONING = "Provisioning"
REASON_PROVISIONING_TIMEOUT = "ProvisioningTimeout"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_WAITING_FOR_CAPACITY = "WaitingForCapacity"  # flex-start: the slice is queued for capacity
REASON_RUN_DURATION = "RunDurationReached"  # flex-start: the slice's VMs reach their run duration
REASON_MAINTENANCE = "Maintenance"  # GKE announced host maintenance for a node of the slice
REASON_MAINTENANCE_SCHEDULED = "MaintenanceScheduled"
REASON_ZONE_FALLBACK = "ZoneFallback"  # no capacity in one zone for too long: the next zone is tried

INFRASTRUCTURE_REASONS = frozenset(
    {REASON_PREEMPTED, REASON_NODE_LOST, REASON_POOL_LOST, REASON_RUN_DURATION, REASON_MAINTENANCE}
)
# Waiting for these is worth a Warning event: someone may have to act (or at least know).
WARNING_REASONS = frozenset(
    {REASON_STOCKOUT, REASON_QUOTA, REASON_POOL_REJECTED, REASON_GKE_CONFIG, REASON_UNSCHEDULABLE}
)

# Pod failure reasons a node going away leaves behind (kubelet graceful node shutdown, eviction,
# node lifecycle / pod GC). A pod failing with one of these did nothing wrong itself.
NODE_LOSS_POD_REASONS = frozenset(
    {"Terminated", "NodeShutdown", "Shutdown", "NodeLost", "Evicted", "Preempting", "DeletionByPodGC"}
)

# GKE node pool states.
POOL_MISSING = "MISSING"  # not found in GKE (not yet created, or gone)
POOL_DELETED = "Deleted"
POOL_STOPPING = "STOPPING"  # GKE is deleting it
POOL_READY_STATES = frozenset({"RUNNING", "RUNNING_WITH_ERROR"})
POOL_WAIT_STATES = frozenset({"PROVISIONING", "RECONCILING", "STOPPING"})

# Application restarts back off like Kubernetes Jobs: base, 2x base, 4x base ... up to the cap.
# Infrastructure restarts do not wait: the cause is gone and the pods just queue for new nodes.
RESTART_BACKOFF_CAP_SECONDS = 360.0

# How long a pool may sit in ERROR before it is recreated: GKE's ERROR can be transient.
POOL_ERROR_GRACE = dt.timedelta(seconds=60)
POLL_PROVISIONING_SECONDS = 5.0

# GKE's pool condition codes (container_v1.StatusCondition.Code) that mean "no capacity or quota now":
# GKE retries them itself while the create operation runs.
CAPACITY_CONDITIONS = {"GCE_STOCKOUT": REASON_STOCKOUT, "GCE_QUOTA_EXCEEDED": REASON_QUOTA}

# A refused request GKE calls permanent is asked again after 30 s, 60 s, ... up to 10 minutes (an
# administrator may fix the cluster meanwhile); transient refusals at the polling interval.
REJECTED_BACKOFF_BASE_SECONDS = 30.0
REJECTED_BACKOFF_CAP_SECONDS = 600.0


@dataclass(frozen=True)
class PodView:
    """What the operator needs to know of one of its pods."""

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


@dataclass(frozen=True)
class GKEError:
    """The last failed GKE call for a slice, classified (see gke.classify_error)."""

    reason: (
        str  # REASON_STOCKOUT, REASON_QUOTA, REASON_GKE_BUSY, REASON_GKE_UNAVAILABLE, REASON_POOL_REJECTED
    )
    message: str
    permanent: bool = False  # the same request cannot succeed until someone changes the cluster or the job


@dataclass(frozen=True)
class Observed:
    job: TPUJob
    now: dt.datetime
    pods: tuple[PodView, ...] = ()
    # None: GKE was not asked in this pass; the status' pool states stand.
    pools: tuple[PoolView, ...] | None = None
    gke_errors: dict[int, GKEError] = field(default_factory=dict)
    service_exists: bool = False
    # Pods created but not yet seen by the watch; they are not "missing".
    pods_in_flight: frozenset[str] = frozenset()
    restart_backoff_seconds: float = 10.0
    # Pods Pending as unschedulable for this long show the scheduler's reason in the status.
    unschedulable_grace_seconds: float = 30.0
    # The zones the job's pools may go to, in order (render.job_zones); empty for pools made elsewhere.
    zones: tuple[str, ...] = ()
    # Host maintenance GKE announced (node -> Unix seconds), for the nodes of the job's pods.
    maintenance: dict[str, int] = field(default_factory=dict)

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
    create_pods: list[tuple[int, int]] = field(default_factory=list)  # (slice, worker) of status.attempt
    delete_pods: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False

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


def is_infrastructure_failure(pod: PodView) -> bool:
    """Preemption, maintenance or node loss, as opposed to the application failing."""
    return pod.reason in NODE_LOSS_POD_REASONS or pod.exit_code == EXIT_CODE_PREEMPTED


def rejected_backoff_seconds(refusals: int) -> float:
    """Wait before asking GKE again after the n-th refusal in a row of a permanently refused request."""
    return min(REJECTED_BACKOFF_BASE_SECONDS * 2.0 ** max(refusals - 1, 0), REJECTED_BACKOFF_CAP_SECONDS)


def pool_error_reason(pool: PoolView) -> str:
    """Why a pool is in ERROR, from GKE's condition code: capacity or quota, else the pool is broken."""
    return CAPACITY_CONDITIONS.get(pool.condition, REASON_POOL_LOST)


# --- the decision --------------------------------------------------------------------------------


class _Builder:
    """Accumulates the decision; keeps decide() readable."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed
        self.job = observed.job
        self.now = observed.now
        previous = observed.status
        self.previous_phase = previous.phase
        self.previous_reason = previous.reason
        self.previous_workers = previous.workers
        self._phase_event: Event | None = None
        self.status = previous.model_copy(deep=True)
        self.decision = Decision(status=self.status)

    def event(self, type_: str, reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))

    def set_phase(self, phase: str, reason: str, message: str) -> None:
        """One phase event per pass, for the phase the pass ends in: a phase passed through within the
        pass (Pending on the way to Starting) never reaches the status, so it gets no event either."""
        self.status.phase, self.status.reason, self.status.message = phase, reason, message
        if self._phase_event is not None:
            self.decision.events.remove(self._phase_event)
            self._phase_event = None
        if (phase, reason) != (self.previous_phase, self.previous_reason):
            warning = phase in (FAILED, RESTARTING) or reason in WARNING_REASONS
            self._phase_event = Event("Warning" if warning else "Normal", reason or phase, message)
            self.decision.events.append(self._phase_event)

    def condition(self, type_: str, status: bool, reason: str, message: str) -> None:
        self.status.conditions = set_condition(
            self.status.conditions, type_, status, reason, message, self.now
        )

    def finish(self) -> Decision:
        self.status.observed_generation = self.job.metadata.generation
        return self.decision


def decide(observed: Observed) -> Decision:
    b = _Builder(observed)
    status = b.status
    if status.phase in TERMINAL_PHASES and status.reason != REASON_INVALID_SPEC:
        _finished(b)
        return b.finish()
    if status.reason == REASON_INVALID_SPEC:  # the spec was fixed: start over
        status.phase, status.reason, status.message = PENDING, "", ""
        status.conditions = [c for c in status.conditions if c.type != "Failed"]
    if b.job.spec.run_policy.suspend:
        _suspend(b)
        return b.finish()
    if status.phase == SUSPENDED:  # resumed: fresh pods, fresh deadline clock (as Job does)
        status.attempt += 1
        status.start_time = None
        b.condition("Suspended", False, "Resumed", "the job was resumed")
    if status.start_time is None:
        status.start_time = timestamp(b.now)
        if status.phase is None:
            b.set_phase(PENDING, "Created", "the operator accepted the job")
    status.workers = WorkerCounts(expected=len(expected_workers(b.job)), **_count(b, status.attempt))
    if _deadline_passed(b):
        return b.finish()
    _place(b)
    if not _pools_ready(b):
        return b.finish()
    _run_workers(b)
    return b.finish()


def _count(b: _Builder, attempt: int) -> dict[str, int]:
    counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for pod in b.observed.pods:
        if pod.attempt == attempt and not pod.deleting:
            key = pod.phase.lower() if pod.phase.lower() in counts else "pending"
            counts[key] += 1
    return counts


def _release(b: _Builder, *, keep_finished_pods: bool) -> None:
    """Delete what holds TPUs: live pods, and the pools the operator made."""
    for pod in b.observed.pods:
        if pod.deleting or (keep_finished_pods and pod.phase in ("Succeeded", "Failed")):
            continue
        b.decision.delete_pods.append(pod.name)
    for pool in _known_pools(b):
        if pool.state not in (POOL_MISSING, POOL_DELETED, POOL_STOPPING):
            b.decision.delete_pools.append(pool.name)


def _known_pools(b: _Builder) -> list[PoolView]:
    """This pass' GKE view, else what the status last recorded."""
    if b.observed.pools is not None:
        return list(b.observed.pools)
    return [
        PoolView(
            p.slice,
            p.name,
            p.state,
            p.message,
            p.condition or "",
            operation=p.operation or "",
            zone=p.zone or "",
        )
        for p in b.status.node_pools
    ]


def _record_pools(b: _Builder, pools: list[PoolView]) -> None:
    b.status.node_pools = [
        NodePoolStatus(
            name=p.name,
            slice=p.slice,
            state=p.state,
            message=p.message,
            condition=p.condition or None,
            operation=p.operation or None,
            zone=p.zone or None,
        )
        for p in pools
    ]


def _finished(b: _Builder) -> None:
    """Succeeded or Failed: give the TPUs back, keep finished pods for their logs, honour the TTL."""
    _release(b, keep_finished_pods=True)
    pools = _known_pools(b)
    if b.observed.pools is not None:
        _record_pools(
            b, [dataclasses.replace(p, state=POOL_DELETED) if p.state == POOL_MISSING else p for p in pools]
        )
    if b.decision.delete_pools:
        b.decision.requeue(POLL_PROVISIONING_SECONDS)
    ttl = b.job.spec.run_policy.ttl_seconds_after_finished
    if ttl is not None and b.status.completion_time:
        expires = parse_timestamp(b.status.completion_time) + dt.timedelta(seconds=ttl)
        if b.now >= expires:
            b.decision.delete_job = True
        else:
            b.decision.requeue((expires - b.now).total_seconds())


def _fail(b: _Builder, reason: str, message: str) -> None:
    b.status.completion_time = timestamp(b.now)
    b.set_phase(FAILED, reason, message)
    b.condition("Failed", True, reason, message)
    b.condition("Running", False, reason, "the job failed")
    _release(b, keep_finished_pods=True)
    if b.decision.delete_pools:
        b.decision.requeue(POLL_PROVISIONING_SECONDS)


def _suspend(b: _Builder) -> None:
    _release(b, keep_finished_pods=False)
    b.set_phase(SUSPENDED, "Suspended", "spec.runPolicy.suspend is true: pods and node pools removed")
    b.condition("Suspended", True, "Suspended", "spec.runPolicy.suspend is true")
    b.condition("Running", False, "Suspended", "the job is suspended")
    if b.observed.pools is not None:
        _record_pools(
            b,
            [
                dataclasses.replace(p, state=POOL_DELETED) if p.state == POOL_MISSING else p
                for p in b.observed.pools
            ],
        )
    if b.decision.delete_pools:
        b.decision.requeue(POLL_PROVISIONING_SECONDS)


def _limit_reached(b: _Builder, since: str | None, seconds: int | None) -> bool:
    """A time limit counted from `since`: reached, or a look again when it will be."""
    if seconds is None or since is None:
        return False
    ends = parse_timestamp(since) + dt.timedelta(seconds=seconds)
    if b.now < ends:
        b.decision.requeue((ends - b.now).total_seconds())
        return False
    return True


def _deadline_passed(b: _Builder) -> bool:
    deadline = b.job.spec.run_policy.active_deadline_seconds
    if not _limit_reached(b, b.status.start_time, deadline):
        return False
    _fail(b, REASON_DEADLINE, f"the job ran longer than activeDeadlineSeconds ({deadline} s)")
    return True


def _pools_ready(b: _Builder) -> bool:
    """Create policy: one RUNNING pool per slice before any pod. Returns True when pods may run."""
    job = b.job
    if job.spec.node_pool.policy != NodePoolPolicy.create:
        b.condition(
            "NodePoolsReady", True, "ExistingNodePools", "policy existing: pods use pools made elsewhere"
        )
        return True
    pools = {p.slice: p for p in _known_pools(b)}
    views: list[PoolView] = []
    problems: list[tuple[str, str]] = []
    for slice_index in range(job.spec.tpu.slices):
        name = naming.node_pool_name(job, slice_index)
        pool = pools.get(slice_index, PoolView(slice_index, name, POOL_MISSING))
        pool, problem = _slice_pool(b, pool, b.observed.gke_errors.get(slice_index))
        if problem is not None:
            problems.append(problem)
        views.append(pool)
    if b.observed.pools is not None or b.decision.create_pools:
        _record_pools(b, views)
    ready = all(v.state in POOL_READY_STATES for v in views)
    if ready:
        if job.spec.capacity.mode != CapacityMode.flex_start:  # flex-start waits on, for its VMs
            b.status.provisioning_since = None
        b.condition("NodePoolsReady", True, "NodePoolsRunning", f"{len(views)} node pool(s) running")
        return True
    # Permanent refusals first: they need someone to act, the rest only time.
    problems.sort(key=lambda problem: problem[0] not in (REASON_POOL_REJECTED, REASON_GKE_CONFIG))
    reason, message = problems[0] if problems else (REASON_PROVISIONING, _pools_message(views))
    if b.status.provisioning_since is None:
        b.status.provisioning_since = timestamp(b.now)
    if _provisioning_timed_out(b, reason, message):
        return False
    if _fall_back_if_due(b, reason):
        reason, message = REASON_ZONE_FALLBACK, f"moving to {b.status.zone} for lack of capacity"
    b.condition("NodePoolsReady", False, reason, message)
    b.set_phase(PROVISIONING, reason, message)
    b.decision.requeue(POLL_PROVISIONING_SECONDS)
    return False


def _place(b: _Builder) -> None:
    """The zone the job's pools are in, or go to: the first of its zones until a fallback moves on."""
    zones = b.observed.zones
    if zones and b.status.zone not in zones:
        b.status.zone, b.status.zone_since = zones[0], timestamp(b.now)


def _fall_back_if_due(b: _Builder, reason: str) -> bool:
    """Waiting for capacity in one zone past spec.capacity.zoneFallbackSeconds: try the next zone. The
    pools in the zone left are deleted (and recreated in the next one once GKE has removed them)."""
    zones, current = b.observed.zones, b.status.zone
    if reason not in (REASON_STOCKOUT, REASON_QUOTA, REASON_WAITING_FOR_CAPACITY) or len(zones) < 2:
        return False
    fallback = b.job.spec.capacity.zone_fallback_seconds
    if current is None or not _limit_reached(b, b.status.zone_since, fallback):
        return False
    following = zones[(zones.index(current) + 1) % len(zones)]
    b.status.zone, b.status.zone_since = following, timestamp(b.now)
    b.event(
        "Warning", REASON_ZONE_FALLBACK, f"{reason} in {current} for {fallback} s or more: trying {following}"
    )
    for pool in _known_pools(b):
        leaving = pool.state not in (POOL_MISSING, POOL_DELETED, POOL_STOPPING)
        if leaving and pool.name not in b.decision.delete_pools:
            b.decision.delete_pools.append(pool.name)
    b.decision.create_pools.clear()
    return True


def _slice_pool(
    b: _Builder, pool: PoolView, error: GKEError | None
) -> tuple[PoolView, tuple[str, str] | None]:
    """One slice's pool: what to do about it, and why the job waits for it (None: no problem to show)."""
    gone = pool.state in (POOL_MISSING, POOL_DELETED, POOL_STOPPING)
    if not gone and pool.zone and b.status.zone and pool.zone != b.status.zone:
        # In a zone the job has left (a fallback): deleted, again until GKE accepts it.
        b.decision.delete_pools.append(pool.name)
        return pool, (REASON_ZONE_FALLBACK, f"moving to {b.status.zone}: deleting {pool.name} in {pool.zone}")
    if pool.state in (POOL_MISSING, POOL_DELETED):
        if error is None:
            b.decision.create_pools.append(pool.slice)
            fresh = dataclasses.replace(
                pool, state="PROVISIONING", message="", condition="", operation="", zone=b.status.zone or ""
            )
            return fresh, None
        return dataclasses.replace(pool, state=POOL_MISSING, message=error.message), (
            error.reason,
            error.message,
        )
    capacity = CAPACITY_CONDITIONS.get(pool.condition)
    if capacity is not None and pool.retrying is not False and pool.state in ("ERROR", "PROVISIONING"):
        # GKE retries a stockout or a quota shortfall itself while the create operation runs: wait for it
        # (deleting would throw its place away, and GKE refuses the delete anyway).
        return pool, (capacity, pool.message)
    if pool.state == "ERROR":
        reason = pool_error_reason(pool)
        if capacity is not None or _error_outlived_grace(b, pool):
            b.decision.delete_pools.append(pool.name)  # recreated once GKE has removed it
        return pool, (reason, pool.message)
    if pool.state == POOL_STOPPING and (cause := _pool_removal_cause(b)) is not None:
        return pool, cause  # still why the job waits, until the pool is recreated
    if pool.state not in POOL_READY_STATES | POOL_WAIT_STATES:
        return pool, (REASON_GKE_UNAVAILABLE, f"unexpected node pool state {pool.state}")
    return pool, None


def _provisioning_timed_out(b: _Builder, reason: str, message: str) -> bool:
    """spec.runPolicy.provisioningTimeoutSeconds: give up waiting for pools, and give them back."""
    timeout = b.job.spec.run_policy.provisioning_timeout_seconds
    if not _limit_reached(b, b.status.provisioning_since, timeout):
        return False
    b.decision.create_pools.clear()
    _fail(
        b,
        REASON_PROVISIONING_TIMEOUT,
        f"node pools not running {timeout} s after the job began waiting (last: {reason}: {message})",
    )
    return True


def _pool_removal_cause(b: _Builder) -> tuple[str, str] | None:
    """A pool deleted because of a stockout or a lasting ERROR: that reason, while GKE removes it."""
    condition = next((c for c in b.status.conditions if c.type == "NodePoolsReady"), None)
    if condition is None or condition.status != ConditionStatus.false:
        return None
    if condition.reason not in (REASON_STOCKOUT, REASON_QUOTA, REASON_POOL_LOST):
        return None
    return condition.reason, condition.message


def _pools_message(views: list[PoolView]) -> str:
    return ", ".join(f"{v.name}: {v.state}" for v in views)


def _error_outlived_grace(b: _Builder, pool: PoolView) -> bool:
    """ERROR seen in the previous status too, for longer than the grace period."""
    before = next((p for p in b.status.node_pools if p.slice == pool.slice), None)
    condition = next((c for c in b.status.conditions if c.type == "NodePoolsReady"), None)
    if before is None or before.state != "ERROR" or condition is None or not condition.last_transition_time:
        return False
    return b.now - parse_timestamp(condition.last_transition_time) >= POOL_ERROR_GRACE


def _run_workers(b: _Builder) -> None:
    """Pools are ready: Service, pods of the current attempt, and what their phases mean."""
    status = b.status
    if not b.observed.service_exists:
        b.decision.create_service = True
    # A crash after creating a new attempt's pods but before recording it: adopt that attempt.
    newest = max((p.attempt for p in b.observed.pods), default=status.attempt)
    if newest > status.attempt:
        status.attempt = newest
    for pod in b.observed.pods:
        finished = pod.phase in ("Succeeded", "Failed")
        keep_for_logs = finished and pod.attempt == status.attempt - 1
        if pod.attempt < status.attempt and not pod.deleting and not keep_for_logs:
            b.decision.delete_pods.append(pod.name)
    current = {
        (p.slice, p.worker): p for p in b.observed.pods if p.attempt == status.attempt and not p.deleting
    }
    wanted = expected_workers(b.job)
    failed = [p for p in current.values() if p.phase == "Failed"]
    missing = [
        key
        for key in wanted
        if key not in current
        and naming.pod_name(b.job, key[0], key[1], status.attempt) not in b.observed.pods_in_flight
    ]
    if failed:
        _restart(b, failed, lost=[])
        return
    if _run_duration_ends(b) or _maintenance_due(b):
        return
    # Every pod of this attempt was seen before, and now some are gone: their nodes went away.
    before = b.previous_workers
    all_seen_before = before.pending + before.running + before.succeeded + before.failed == len(wanted)
    if missing and all_seen_before and b.previous_phase in (STARTING, RUNNING):
        _restart(b, [], lost=missing)
        return
    wait = _restart_backoff_left(b)
    if missing and wait > 0:
        b.decision.requeue(wait)
        return
    b.decision.create_pods = missing
    # Pods created now or not yet seen by the watch are Pending: counting them so means their first
    # watch events change nothing, and the status is not written again for each of them.
    counts = _count(b, status.attempt)
    counts["pending"] += sum(1 for key in wanted if key not in current)
    status.workers = WorkerCounts(expected=len(wanted), **counts)
    workers = status.workers
    if workers.succeeded == len(wanted):
        status.completion_time = timestamp(b.now)
        b.set_phase(SUCCEEDED, "Succeeded", f"all {len(wanted)} workers succeeded")
        b.condition("Succeeded", True, "Succeeded", f"all {len(wanted)} workers succeeded")
        b.condition("Running", False, "Succeeded", "the job finished")
        _release(b, keep_finished_pods=True)
        if b.decision.delete_pools:
            b.decision.requeue(POLL_PROVISIONING_SECONDS)
    elif not missing and workers.running + workers.succeeded == len(wanted):
        if status.running_time is None:
            status.running_time = timestamp(b.now)
        message = f"{workers.running} of {len(wanted)} workers running"
        if b.job.spec.capacity.mode == CapacityMode.flex_start:
            status.provisioning_since = None
            message += f"; the flex-start slice runs until {_start_run_clock(b)}"
        b.set_phase(RUNNING, "Running", message)
        b.condition("Running", True, "AllWorkersRunning", f"{len(wanted)} workers running")
    elif _waiting_for_flex_capacity(b, list(current.values())):
        return
    elif (stuck := _unschedulable(b, list(current.values()))) is not None:
        b.set_phase(STARTING, REASON_UNSCHEDULABLE, stuck)
        b.condition("Running", False, REASON_UNSCHEDULABLE, stuck)
    else:
        b.set_phase(STARTING, "Starting", f"{workers.running} of {len(wanted)} workers running")


def _start_run_clock(b: _Builder) -> str:
    """Flex-start: the slice's VMs run maxRunDurationSeconds from about when its workers all ran."""
    if b.status.run_deadline is None:
        seconds = b.job.spec.capacity.max_run_duration_seconds or FLEX_START_MAX_RUN_SECONDS
        b.status.run_deadline = timestamp(b.now + dt.timedelta(seconds=seconds))
        lead = b.job.spec.run_policy.maintenance_lead_seconds
        b.decision.requeue(max(seconds - lead, 0))
    return b.status.run_deadline


def _run_duration_ends(b: _Builder) -> bool:
    """Flex-start: before the VMs go, the workers checkpoint (SIGTERM) and the job restarts on a new slice,
    queued again (its pool is deleted and asked for anew). Not the application's fault: not counted."""
    deadline = b.status.run_deadline
    if deadline is None:
        return False
    lead = b.job.spec.run_policy.maintenance_lead_seconds
    act_at = parse_timestamp(deadline) - dt.timedelta(seconds=lead)
    if b.now < act_at:
        b.decision.requeue((act_at - b.now).total_seconds())
        return False
    detail = (
        f"the flex-start slice's VMs end at {deadline} (maxRunDurationSeconds); checkpointing {lead} s ahead"
    )
    _begin_restart(b, REASON_RUN_DURATION, detail, infrastructure=True)
    b.status.run_deadline = None
    for pool in _known_pools(b):
        if pool.state not in (POOL_MISSING, POOL_DELETED, POOL_STOPPING):
            b.decision.delete_pools.append(pool.name)
    return True


def _maintenance_due(b: _Builder) -> bool:
    """GKE announced maintenance for a host of the slice (one host's maintenance stops the whole slice):
    shown in the status with an event, and maintenanceLeadSeconds before it the workers checkpoint (SIGTERM)
    and the job restarts. New pods avoid nodes under notice (render.pod), so they wait for the hosts to come
    back. Not the application's fault: not counted."""
    attempt = b.status.attempt
    times = [
        b.observed.maintenance[p.node]
        for p in b.observed.pods
        if p.attempt == attempt and not p.deleting and p.node in b.observed.maintenance
    ]
    if not times:
        b.status.maintenance_time = None
        return False
    when = dt.datetime.fromtimestamp(min(times), dt.UTC)
    if b.status.maintenance_time != timestamp(when):
        b.status.maintenance_time = timestamp(when)
        b.event(
            "Warning",
            REASON_MAINTENANCE_SCHEDULED,
            f"GKE host maintenance for the slice at {timestamp(when)}",
        )
    act_at = when - dt.timedelta(seconds=b.job.spec.run_policy.maintenance_lead_seconds)
    if b.now < act_at:
        b.decision.requeue((act_at - b.now).total_seconds())
        return False
    _begin_restart(
        b, REASON_MAINTENANCE, f"GKE host maintenance at {timestamp(when)}; checkpointing ahead", True
    )
    b.status.maintenance_time = None
    return True


def _waiting_for_flex_capacity(b: _Builder, pods: list[PodView]) -> bool:
    """Flex-start: pods pending unschedulable on the empty pool is the queue for capacity, not a fault."""
    if b.job.spec.capacity.mode != CapacityMode.flex_start:
        return False
    if not any(p.phase == "Pending" and p.unschedulable for p in pods):
        return False
    if b.status.provisioning_since is None:
        b.status.provisioning_since = timestamp(b.now)
    if _provisioning_timed_out(b, REASON_WAITING_FOR_CAPACITY, "the flex-start slice was still queued"):
        return True
    if _fall_back_if_due(b, REASON_WAITING_FOR_CAPACITY):
        for pod in pods:
            if not pod.deleting and pod.name not in b.decision.delete_pods:
                b.decision.delete_pods.append(pod.name)
        message = f"no flex-start capacity in time: trying {b.status.zone}"
        b.set_phase(PROVISIONING, REASON_ZONE_FALLBACK, message)
        b.decision.requeue(POLL_PROVISIONING_SECONDS)
        return True
    # The time queued follows from `since` (and status.provisioningSince): a message that changed every
    # pass would rewrite the status every poll for as long as the queue lasts.
    message = f"queued for flex-start capacity since {b.status.provisioning_since}"
    b.set_phase(PROVISIONING, REASON_WAITING_FOR_CAPACITY, message)
    b.condition("Running", False, REASON_WAITING_FOR_CAPACITY, message)
    b.decision.requeue(POLL_PROVISIONING_SECONDS)
    return True


def _unschedulable(b: _Builder, pods: list[PodView]) -> str | None:
    """The scheduler's own reason, once a pod has been unschedulable past the grace period (a node may be on
    its way); else None, with a look again when the first grace period ends."""
    grace = dt.timedelta(seconds=b.observed.unschedulable_grace_seconds)
    for pod in sorted(pods, key=lambda p: (p.slice, p.worker)):
        if pod.phase != "Pending" or not pod.unschedulable or not pod.unschedulable_since:
            continue
        waited = b.now - parse_timestamp(pod.unschedulable_since)
        if waited >= grace:
            return f"pod {pod.name} cannot be scheduled: {pod.unschedulable}"
        b.decision.requeue((grace - waited).total_seconds())
    return None


def _restart_backoff_left(b: _Builder) -> float:
    """Seconds before the pods of an application restart may be created."""
    status = b.status
    if status.phase != RESTARTING or status.reason != REASON_WORKER_FAILED or not status.last_restart_time:
        return 0.0
    exponent = max(status.application_restarts - 1, 0)
    backoff = min(b.observed.restart_backoff_seconds * float(2**exponent), RESTART_BACKOFF_CAP_SECONDS)
    elapsed = (b.now - parse_timestamp(status.last_restart_time)).total_seconds()
    return max(backoff - elapsed, 0.0)


def _restart(b: _Builder, failed: list[PodView], lost: list[tuple[int, int]]) -> None:
    """TPU slices are all-or-nothing: any worker lost or failed restarts every pod of the job."""
    status = b.status
    infrastructure = bool(lost) or any(is_infrastructure_failure(p) for p in failed)
    if lost:
        reason = REASON_NODE_LOST
        detail = f"{len(lost)} worker pod(s) disappeared (slice {lost[0][0]} worker {lost[0][1]} first)"
    elif infrastructure:
        pod = next(p for p in failed if is_infrastructure_failure(p))
        reason = REASON_PREEMPTED
        detail = (
            f"pod {pod.name} stopped by the infrastructure ({pod.reason or f'exit code {pod.exit_code}'})"
        )
    else:
        pod = failed[0]
        reason = REASON_WORKER_FAILED
        detail = f"pod {pod.name} failed (exit code {pod.exit_code}{', ' + pod.reason if pod.reason else ''})"
    budget = b.job.spec.run_policy.max_restarts
    if not infrastructure and status.application_restarts >= budget:
        _fail(b, REASON_BACKOFF_LIMIT, f"{detail}; maxRestarts ({budget}) spent")
        return
    _begin_restart(b, reason, detail, infrastructure)


def _begin_restart(b: _Builder, reason: str, detail: str, infrastructure: bool) -> None:
    """A new attempt: every pod of the job goes (a slice is all or nothing), counted by reason."""
    status = b.status
    budget = b.job.spec.run_policy.max_restarts
    status.restarts += 1
    status.restarts_by_reason[reason] = status.restarts_by_reason.get(reason, 0) + 1
    if not infrastructure:
        status.application_restarts += 1
    status.attempt += 1
    status.last_restart_time = timestamp(b.now)
    status.workers = WorkerCounts(expected=len(expected_workers(b.job)))
    # Live pods go now; the failed attempt's finished pods stay for `kubectl logs` until the next restart.
    for pod in b.observed.pods:
        if pod.deleting or pod.name in b.decision.delete_pods:
            continue
        if pod.phase in ("Succeeded", "Failed") and pod.attempt == status.attempt - 1:
            continue
        b.decision.delete_pods.append(pod.name)
    counted = f"{status.application_restarts}/{budget} application restarts used"
    b.set_phase(
        RESTARTING, reason, f"{detail}; restarting all workers as attempt {status.attempt} ({counted})"
    )
    b.condition("Running", False, reason, detail)
    # The next pass re-checks the pools (a lost node may have broken the slice) before new pods.
    b.decision.requeue(1.0)
