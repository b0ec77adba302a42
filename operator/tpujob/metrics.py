"""Every Prometheus metric the operator exports: one `tpujob_` prefix, base units, bounded labels.

Labels never carry a job, pod or pool name (unbounded); per-job numbers come from the trainer's own
`tpujob_trainer_*` metrics, scraped from its pods. Every series exists from start (zero), so
dashboards and alerts see a 0, not a gap.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tpujob import __version__, tpu
from tpujob import status as s
from tpujob.api.job import TPUJob
from tpujob.api.spec import CapacityMode
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.ratelimit import Priority
from tpujob.records import JobRecord, JobRecords
from tpujob.status import cost, goodput, restart_history, waiting

RESTART_REASONS = (
    Reason.WORKER_FAILED,
    Reason.IGNORED_BY_POLICY,
    Reason.PREEMPTED,
    Reason.NODE_LOST,
    Reason.POOL_LOST,
    Reason.RUN_DURATION,
    Reason.MAINTENANCE,
)
# Calls GKE refused, by the reason the status shows; and pools gone to ERROR, by s.pool_error_reason
# (Stockout, QuotaExceeded, or NodePoolLost for a broken pool).
GKE_ERROR_REASONS = (
    Reason.STOCKOUT,
    Reason.QUOTA,
    Reason.GKE_BUSY,
    Reason.GKE_UNAVAILABLE,
    Reason.POOL_REJECTED,
    Reason.RESERVATION_EXHAUSTED,
    Reason.RESERVATION_NOT_FOUND,
    Reason.POOL_LOST,
)
# The kubelet's reasons a worker cannot start (one per problem: a pull's retries count once), and the
# startup timeout that ends the wait.
START_PROBLEMS = (
    *sorted({s.SAME_PROBLEM.get(r, r) for r in s.CONTAINER_START_PROBLEMS | s.VOLUME_START_PROBLEMS}),
    Reason.POD_REJECTED,
    Reason.STARTUP_TIMEOUT,
)
POOL_OPERATIONS = ("create", "delete")
POOL_RESULTS = ("accepted", "error")
CAPACITY_MODES = tuple(m.value for m in CapacityMode)

# Minutes to an hour: TPU provisioning is slow, and stockouts make it slower.
PROVISIONING_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

BUILD_INFO = Info("tpujob_build", "Version of the running operator.")
PHASE_TRANSITIONS = Counter(
    "tpujob_phase_transitions_total", "TPUJob phase changes, by the phase entered.", ["phase"]
)
RESTARTS = Counter("tpujob_restarts_total", "Whole-job restarts, by cause.", ["reason"])
# Seconds to an hour: a pod recreated on a kept pool recovers in tens of seconds, a slice on new nodes in
# minutes, one waiting for capacity in hours.
RECOVERY_BUCKETS = (10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
RECOVERY_SECONDS = Histogram(
    "tpujob_recovery_seconds",
    "Time a restart cost, by cause: from the fault the operator saw to the first step the new attempt's "
    "trainer reported (status.restartHistory).",
    ["cause"],
    buckets=RECOVERY_BUCKETS,
)
# The one label that names a node: a node that failed a job twice (status.nodeFailures). Bounded by the
# cluster's nodes (never a job's or a pod's name), and only those that failed a job: a handful.
BAD_NODE_AVOIDED = Counter(
    "tpujob_bad_node_avoided_total",
    "TPUJobs that began to keep off a node after it failed them twice (status.nodeFailures), by node.",
    ["node"],
)
POOL_OPERATIONS_TOTAL = Counter(
    "tpujob_node_pool_operations_total",
    "GKE node pool calls, by operation and result.",
    ["operation", "result"],
)
GKE_ERRORS = Counter(
    "tpujob_gke_errors_total", "GKE calls refused, and node pools gone to ERROR, by reason.", ["reason"]
)
WORKER_START_PROBLEMS = Counter(
    "tpujob_worker_start_problems_total",
    "TPUJobs whose workers could not start, by the kubelet's reason (ErrImagePull, "
    "CreateContainerConfigError, ...), and those failed by their startup timeout (StartupTimeout).",
    ["reason"],
)
POOL_PROVISIONING = Histogram(
    "tpujob_node_pool_provisioning_seconds",
    "From the create call to the node pool RUNNING.",
    buckets=PROVISIONING_BUCKETS,
)
TIME_TO_RUNNING = Histogram(
    "tpujob_time_to_running_seconds",
    "From TPUJob start to every worker running (first time per job).",
    buckets=PROVISIONING_BUCKETS,
)
# Kueue: a queued job can wait for hours or days behind its ClusterQueue's quota.
QUEUED_BUCKETS = (1, 10, 30, 60, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
QUEUED_SECONDS = Histogram(
    "tpujob_queued_seconds",
    "Kueue: from a TPUJob beginning to wait for admission (its Workload created, or evicted) to Kueue "
    "admitting it, per admission (the ClusterQueue is in the job's status: a label per queue would be a "
    "series per queue for every bucket).",
    buckets=QUEUED_BUCKETS,
)
RECONCILE_DURATION = Histogram(
    "tpujob_reconcile_duration_seconds", "One reconcile pass of one TPUJob.", buckets=RECONCILE_BUCKETS
)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
PRIORITIES = tuple(p.name.lower() for p in Priority)
# Like client-go's rest_client_rate_limiter_duration_seconds: every request observes its wait, 0 mostly.
API_RATE_LIMITER_WAIT = Histogram(
    "tpujob_api_rate_limiter_wait_seconds",
    "Time a Kubernetes API request waited for the operator's client-side limit (TPUJOB_API_QPS / _BURST), "
    "by its priority (workload: pods and Services; status; event).",
    ["priority"],
    buckets=WAIT_BUCKETS,
)
# Events are posted by one background poster from a bounded queue, as client-go's event broadcaster does.
EVENTS_DROPPED = Counter(
    "tpujob_events_dropped_total",
    "Events not posted because the poster's queue was full (a burst of more Events than it holds).",
)
EVENT_LAG = Histogram(
    "tpujob_event_lag_seconds",
    "From a pass deciding an Event to the API server answering its post (the poster's queue, the token).",
    buckets=WAIT_BUCKETS,
)
STATUS_WRITE_LAG = Histogram(
    "tpujob_status_write_lag_seconds",
    "From a pass deciding a TPUJob's new status (the first one not yet written) to the API server answering "
    "its write: mostly the wait for a token behind pod and Service creates.",
    buckets=WAIT_BUCKETS,
)
STATUS_WRITES_COALESCED = Counter(
    "tpujob_status_writes_coalesced_total",
    "Status writes not sent because a newer status of the same TPUJob replaced them while they waited.",
)
UPGRADE_SHIELD_REFUSED = Counter(
    "tpujob_upgrade_shield_refused_total",
    "Node pool creates GKE refused while they carried the pool's own exclusion from node auto-upgrades "
    "(maintenancePolicy.exclusionUntilEndOfSupport) and accepted without it (TPUJOB_GKE_UPGRADE_SHIELD).",
)
RECONCILE_ERRORS = Counter("tpujob_reconcile_errors_total", "Reconcile passes that raised an error.")
OPERATOR_ACTIVE = Gauge(
    "tpujob_operator_active",
    "1 on the replica that reconciles TPUJobs, 0 on a standby (kopf peering); sum over replicas is 1.",
)
GKE_CLUSTER_READY = Gauge(
    "tpujob_gke_cluster_ready",
    "1 when the configured GKE cluster was found and its zone setting fits it (GetCluster, at start and "
    "every sweep); 0 when not: waiting jobs show GKEConfigError.",
)
# The same accounting as each job's status.cost.chipSeconds (status/cost.py), added on every pass where the
# status adds it at changes; a process counts from its first pass for a job, so the time across a restart is
# in the status only.
CHIP_SECONDS = Counter(
    "tpujob_tpu_chip_seconds_total",
    "TPU chip-seconds held by TPUJobs (node pools alive, or pods running on existing pools): the cost basis. "
    "Per job: status.cost.chipSeconds.",
    ["tpu_type", "capacity_mode"],
)
# Goodput (status.goodput, see status/goodput.py): seconds as each job's status accounts them, added when
# the status moves them. A category's seconds never decrease in a status; productive ones may (an ended
# attempt's progress moves time out of productive, in the same pass that adds its running time, so a pass'
# net change is what the counter adds: a net decrease, rare, is not taken back).
PRODUCTIVE_SECONDS = Counter(
    "tpujob_productive_seconds_total",
    "Job time spent on training steps kept (status.goodput.productiveSeconds), by capacity mode.",
    ["capacity_mode"],
)
BADPUT_SECONDS = Counter(
    "tpujob_badput_seconds_total",
    "Job time lost (status.goodput.badputSeconds), by goodput category and capacity mode.",
    ["category", "capacity_mode"],
)
GOODPUT_RATIO = Histogram(
    "tpujob_goodput_ratio",
    "Goodput ratio (productive over accounted time) of each job when it finished, by capacity mode.",
    ["capacity_mode"],
    buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0),
)

# The resync safety net (handlers/loops.py): every TPUJob gets a pass at least every TPUJOB_RESYNC_SECONDS
# plus one round's time; a round longer than the interval means the operator has outgrown its settings.
RESYNC_ROUND_SECONDS = Gauge(
    "tpujob_resync_round_seconds",
    "Time the last resync round took to give every TPUJob a pass (maintenance notices read included).",
)
RESYNC_ROUND_JOBS = Gauge(
    "tpujob_resync_round_jobs",
    "TPUJobs the last resync round gave a pass (those with no other pass within the interval).",
)
RESYNC_ROUND_END = Gauge(
    "tpujob_resync_round_end_timestamp_seconds",
    "Unix time the last resync round ended; 0 before the first (a stale value: the resync loop is stuck).",
)


def queued_seconds(before: TPUJobStatus, after: TPUJobStatus) -> float | None:
    """How long the job waited for the admission this pass saw (None: it saw none)."""
    if before.queue is None or after.queue is None or not before.queue.queued_since:
        return None
    if not after.queue.admitted_time or after.queue.admitted_time == before.queue.admitted_time:
        return None
    waited = s.parse_timestamp(after.queue.admitted_time) - s.parse_timestamp(before.queue.queued_since)
    return max(waited.total_seconds(), 0.0)


class JobsByPhase(Collector):
    """tpujob_jobs{phase}, and tpujob_phase_oldest_since_timestamp_seconds{phase}: computed at scrape time
    from the jobs' records (the status each job's last pass decided). The second answers "since when has the
    longest-waiting job been Provisioning", which no histogram shows while the wait goes on (a stockout that
    never ends observes nothing). It is read from each job's status (status/waiting.py), not from this
    process' clock: a restart, a rollout or a failover does not reset it, so an alert on it stays on."""

    def __init__(self, records: JobRecords | None = None) -> None:
        self.records = records if records is not None else JobRecords()

    def set(self, uid: str, status: TPUJobStatus | None) -> None:
        since = waiting.waiting_since(status) if status is not None and status.phase else None

        def keep(record: JobRecord) -> None:
            record.phase = status.phase if status is not None else None
            record.waiting_since = s.parse_timestamp(since).timestamp() if since else None

        if status is None or status.phase is None:
            self.records.read(uid, keep, None)
        else:
            self.records.update(uid, keep)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tpujob_jobs", "TPUJobs known to the operator, by phase.", labels=["phase"]
        )
        oldest = GaugeMetricFamily(
            "tpujob_phase_oldest_since_timestamp_seconds",
            "Unix time the longest-waiting TPUJob in each waiting phase began its wait, from its status "
            "(Pending: startTime, Queued: queue.queuedSince, Provisioning: provisioningSince, Starting: "
            "startingSince, Restarting: lastRestartTime); 0 when no job waits there.",
            labels=["phase"],
        )
        entries = self.records.gather(lambda r: (r.phase, r.waiting_since) if r.phase else None)
        for phase in Phase:
            family.add_metric([phase], sum(1 for p, _ in entries if p == phase))
        for phase in waiting.WAITING_PHASES:
            starts = [since for p, since in entries if p == phase and since is not None]
            oldest.add_metric([phase], min(starts, default=0.0))
        yield family
        yield oldest


class ChipsHeld(Collector):
    """tpujob_tpu_chips{tpu_type, capacity_mode}: TPU chips held right now, from the jobs' records."""

    def __init__(self, records: JobRecords | None = None) -> None:
        self.records = records if records is not None else JobRecords()

    def set(self, uid: str, tpu_type: str, mode: str, chips: int) -> None:
        def keep(record: JobRecord) -> None:
            record.chips = (tpu_type, mode, chips)

        self.records.update(uid, keep)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tpujob_tpu_chips", "TPU chips held by TPUJobs right now.", labels=["tpu_type", "capacity_mode"]
        )
        held = self.records.gather(lambda r: r.chips)
        for tpu_type in tpu.TPU_TYPES:
            for mode in CAPACITY_MODES:
                family.add_metric([tpu_type, mode], sum(c for t, m, c in held if (t, m) == (tpu_type, mode)))
        yield family


class NextMaintenance(Collector):
    """tpujob_maintenance_next_timestamp_seconds: the soonest host maintenance GKE announced for a running
    TPUJob's nodes (0: none). One series, not one per job: labels stay bounded; the job is in its status."""

    def __init__(self, records: JobRecords | None = None) -> None:
        self.records = records if records is not None else JobRecords()

    def set(self, uid: str, when: str | None) -> None:
        def keep(record: JobRecord) -> None:
            record.maintenance = s.parse_timestamp(when).timestamp() if when is not None else None

        if when is None:
            self.records.read(uid, keep, None)
        else:
            self.records.update(uid, keep)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        times = self.records.gather(lambda r: r.maintenance)
        yield GaugeMetricFamily(
            "tpujob_maintenance_next_timestamp_seconds",
            "Unix time of the soonest GKE host maintenance announced for a TPUJob's nodes; 0 when none.",
            value=min(times, default=0.0),
        )


class QueuedStarts(Collector):
    """A waiting TPUJob's estimated start (status.queue.estimatedStart), by ClusterQueue: per queue, the
    seconds from the scrape to the soonest and to the latest estimated start of its waiting jobs, and how
    many of them have none the operator could make. Per queue, not per job: a job's own estimate is in its
    status (kubectl get tj); a ClusterQueue is an administrator's object, so the labels stay few; a queue's
    series go with its last waiting job."""

    def __init__(self, records: JobRecords | None = None) -> None:
        self.records = records if records is not None else JobRecords()

    def set(self, uid: str, status: TPUJobStatus) -> None:
        queue = status.queue
        estimate = queue.estimated_start if queue is not None else None
        if queue is None or estimate is None or not queue.cluster_queue:
            self.records.read(uid, _no_estimate, None)
            return
        when = s.parse_timestamp(estimate.time).timestamp() if estimate.time else None
        cluster_queue = queue.cluster_queue

        def keep(record: JobRecord) -> None:
            record.start_estimate = (cluster_queue, when)

        self.records.update(uid, keep)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        seconds = GaugeMetricFamily(
            "tpujob_queued_start_estimate_seconds",
            "Kueue: seconds from now to the estimated start (admission) of the TPUJobs waiting in each "
            "ClusterQueue, the soonest (which=next) and the latest (which=last) of them; negative when "
            "overdue. A job's own estimate: status.queue.estimatedStart.",
            labels=["cluster_queue", "which"],
        )
        unknown = GaugeMetricFamily(
            "tpujob_queued_start_unknown_jobs",
            "Kueue: TPUJobs waiting in each ClusterQueue whose start the operator cannot estimate "
            "(status.queue.estimatedStart.reason says why).",
            labels=["cluster_queue"],
        )
        now = time.time()
        by_queue: dict[str, list[float | None]] = {}
        for cluster_queue, when in self.records.gather(lambda r: r.start_estimate):
            by_queue.setdefault(cluster_queue, []).append(when)
        for cluster_queue, times in sorted(by_queue.items()):
            known = [when - now for when in times if when is not None]
            if known:
                seconds.add_metric([cluster_queue, "next"], min(known))
                seconds.add_metric([cluster_queue, "last"], max(known))
            unknown.add_metric([cluster_queue], len(times) - len(known))
        yield seconds
        yield unknown


def _no_estimate(record: JobRecord) -> None:
    record.start_estimate = None


def register(recorder: PassRecorder, registry: CollectorRegistry = REGISTRY) -> None:
    """The recorder's scrape-time collectors and the zeroed series: call once at start."""
    for collector in recorder.collectors():
        registry.register(collector)
    BUILD_INFO.info({"version": __version__})
    for priority in PRIORITIES:
        API_RATE_LIMITER_WAIT.labels(priority)
    for phase in Phase:
        PHASE_TRANSITIONS.labels(phase)
    for reason in RESTART_REASONS:
        RESTARTS.labels(reason)
        RECOVERY_SECONDS.labels(reason)
    for reason in GKE_ERROR_REASONS:
        GKE_ERRORS.labels(reason)
    for problem in START_PROBLEMS:
        WORKER_START_PROBLEMS.labels(problem)
    for operation in POOL_OPERATIONS:
        for result in POOL_RESULTS:
            POOL_OPERATIONS_TOTAL.labels(operation, result)
    for tpu_type in tpu.TPU_TYPES:
        for mode in CAPACITY_MODES:
            CHIP_SECONDS.labels(tpu_type, mode)
    for mode in CAPACITY_MODES:
        PRODUCTIVE_SECONDS.labels(mode)
        GOODPUT_RATIO.labels(mode)
        for category in goodput.CATEGORIES:
            BADPUT_SECONDS.labels(category, mode)


def start_problem(status: TPUJobStatus) -> str | None:
    """The START_PROBLEMS label of a status whose workers cannot start, else None."""
    reason = s.SAME_PROBLEM.get(status.reason or "", status.reason or "")
    return reason if reason in START_PROBLEMS else None


class PassRecorder:
    """Turns one reconcile pass (status before -> after) into metric updates. What it keeps per job lives in
    the job's record (tpujob.records), which its collectors read at scrape time."""

    def __init__(self, records: JobRecords | None = None) -> None:
        self.records = records if records is not None else JobRecords()
        self.jobs_by_phase = JobsByPhase(self.records)
        self.chips_held = ChipsHeld(self.records)
        self.next_maintenance = NextMaintenance(self.records)
        self.queued_starts = QueuedStarts(self.records)

    def collectors(self) -> tuple[Collector, ...]:
        return (self.jobs_by_phase, self.chips_held, self.next_maintenance, self.queued_starts)

    def record(self, job: TPUJob, before: TPUJobStatus, after: TPUJobStatus, now: dt.datetime) -> None:
        uid = job.metadata.uid or ""
        if after.phase != before.phase and after.phase:
            PHASE_TRANSITIONS.labels(after.phase).inc()
        for reason, count in after.restarts_by_reason.items():
            delta = count - before.restarts_by_reason.get(reason, 0)
            if delta > 0:
                RESTARTS.labels(reason).inc(delta)
        for node in s.newly_avoided(before, after):
            BAD_NODE_AVOIDED.labels(node).inc()
        for recovered in restart_history.recovered_between(before, after):
            RECOVERY_SECONDS.labels(recovered.reason).observe(recovered.recovery_seconds or 0.0)
        if after.running_time and not before.running_time and after.start_time:
            started = s.parse_timestamp(after.start_time)
            TIME_TO_RUNNING.observe((s.parse_timestamp(after.running_time) - started).total_seconds())
        if (queued := queued_seconds(before, after)) is not None:
            QUEUED_SECONDS.observe(queued)
        if (problem := start_problem(after)) and problem != start_problem(before):
            WORKER_START_PROBLEMS.labels(problem).inc()
        self.records.update(uid, lambda record: self._pools(record, before, after, now))
        self._chips(uid, job, after, now)
        self._goodput(job, before, after)
        self.jobs_by_phase.set(uid, after)
        self.next_maintenance.set(uid, after.maintenance_time)
        self.queued_starts.set(uid, after)

    @staticmethod
    def _pools(record: JobRecord, before: TPUJobStatus, after: TPUJobStatus, now: dt.datetime) -> None:
        """Each pool's time to provision, from this process' first sight of it being created (kept in the
        job's record until the pool is ready, or the job is forgotten)."""
        previous = {p.name: p.state for p in before.node_pools}
        for pool in after.node_pools:
            was = previous.get(pool.name)
            if pool.state == "PROVISIONING" and was in (None, s.POOL_MISSING, s.POOL_DELETED):
                record.pools_created = {**(record.pools_created or {}), pool.name: now}
            if pool.state in s.POOL_READY_STATES and was not in s.POOL_READY_STATES and record.pools_created:
                created = record.pools_created.pop(pool.name, None)
                record.pools_created = record.pools_created or None
                if created is not None:
                    POOL_PROVISIONING.observe((now - created).total_seconds())
            # The usual stockout is not a refused call: the pool's creation goes to ERROR with GKE's
            # condition code, GKE retrying meanwhile. The reason is the one the status gives.
            if pool.state == "ERROR" and was != "ERROR":
                GKE_ERRORS.labels(s.pool_error_reason(pool.condition)).inc()

    def _chips(self, uid: str, job: TPUJob, after: TPUJobStatus, now: dt.datetime) -> None:
        """The chips held since this process' last pass for the job, as status.cost accounts them
        (status/cost.py): the same amounts, added every pass instead of at changes."""
        held = cost.chips_held(job, after)

        def keep(record: JobRecord) -> tuple[str, int] | None:
            seen, record.last_seen = record.last_seen, (s.timestamp(now), held)
            return seen

        seen = self.records.update(uid, keep)
        if seen is not None and seen[1]:
            since, chips = seen
            added = cost.chip_seconds(chips, since, now)
            CHIP_SECONDS.labels(job.spec.tpu.type, job.spec.capacity.mode).inc(added)
        self.chips_held.set(uid, job.spec.tpu.type, job.spec.capacity.mode, held)

    @staticmethod
    def _goodput(job: TPUJob, before: TPUJobStatus, after: TPUJobStatus) -> None:
        if after.goodput is None:
            return
        mode = job.spec.capacity.mode
        was = before.goodput.badput_seconds if before.goodput else {}
        for category, seconds in after.goodput.badput_seconds.items():
            if category in goodput.CATEGORIES and seconds > was.get(category, 0.0):
                BADPUT_SECONDS.labels(category, mode).inc(seconds - was.get(category, 0.0))
        kept = before.goodput.productive_seconds if before.goodput else 0.0
        if after.goodput.productive_seconds > kept:
            PRODUCTIVE_SECONDS.labels(mode).inc(after.goodput.productive_seconds - kept)
        finished = after.phase in s.TERMINAL_PHASES and before.phase not in s.TERMINAL_PHASES
        if finished and after.goodput.ratio is not None:
            GOODPUT_RATIO.labels(mode).observe(after.goodput.ratio)

    def uids(self) -> set[str]:
        """The jobs whose gauges this process sets (every recorded pass sets its job's chips held)."""
        return {uid for uid in self.records.uids() if self.records.read(uid, lambda r: r.last_seen, None)}

    def forget(self, uid: str) -> None:
        self.records.forget(uid)


def record_api_wait(priority: Priority, seconds: float) -> None:
    API_RATE_LIMITER_WAIT.labels(priority.name.lower()).observe(seconds)


def record_pool_call(operation: str, error: s.GKEError | None) -> None:
    POOL_OPERATIONS_TOTAL.labels(operation, "error" if error else "accepted").inc()
    if error is not None:
        GKE_ERRORS.labels(error.reason).inc()
