"""Kueue: a job labelled kueue.x-k8s.io/queue-name runs only while Kueue admits its Workload. The operator
plays the part of a Kueue job integration (Kueue v0.19 pkg/controller/jobframework/reconciler.go,
ReconcileGenericJob), with its pods and pools as the job's "active" part:

- no Workload: create one (step 3, handleJobWithNoWorkload), once nothing of the job runs;
- the Workload being deleted: stop the job, then let the Workload go (step 1.1);
- Evicted: stop the job (step 6, stopJob); once nothing of it holds TPUs, clear the admission as the
  integration does (Requeued, QuotaReserved=False "Pending", Admitted=False, no status.admission);
- not admitted: nothing runs (steps 7 and 8); admitted: the job runs with the flavors' node selectors and
  tolerations (startJob, podset.FromAssignment);
- while admitted, the PodsReady condition for waitForPodsReady (step 5, generatePodsReadyCondition);
- the job finished: Finished on the Workload (step 3), then its finalizer released.

Pure: the Workload as the watch showed it in, the writes out (Decision.workload).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tpujob.api.constants import KUEUE_FINALIZER, LABEL_QUEUE_NAME
from tpujob.api.status import ConditionType, Phase, QueueStatus, Reason, StartEstimate, WorkerCounts
from tpujob.render.cluster import slice_shape
from tpujob.render.placement import Placement
from tpujob.render.podset_updates import PodSetUpdateConflict, with_updates
from tpujob.render.workload import pod_set_name
from tpujob.status import start_estimate
from tpujob.status.builder import Builder, fail, known_pools, record_pools, release
from tpujob.status.model import (
    POOL_DELETED,
    POOL_MISSING,
    POOL_RELEASED_STATES,
    TERMINAL_PHASES,
    FlavorView,
    QueueView,
    WorkloadView,
    expected_workers,
    is_current,
    timestamp,
)
from tpujob.status.provisioned import workload_differences
from tpujob.status.tas import TopologyAssignmentError, tas_problem, with_topology

# Kueue's condition types and reasons (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
REQUEUED = "Requeued"
FINISHED = "Finished"
PODS_READY = "PodsReady"
# jobframework FailedToStartFinishedReason: a pod set update the job cannot take.
FAILED_TO_START = "FailedToStart"
# generatePodsReadyCondition's words for pods not (yet) ready.
NOT_READY = "Not all pods are ready or succeeded"
# Kueue's eviction of an inactive Workload (workload_controller.go Reconcile, spec.active false): reason
# Deactivated, or DeactivatedDueTo<cause> when Kueue deactivated it itself (patching.ReasonWithCause: its
# requeuing limit, maximum execution time or a rejected admission check; from v0.14), "The workload is
# deactivated due to <why>".
DEACTIVATED = "Deactivated"
STANDS = (
    "; it stays deactivated, as Kueue or an administrator decided: set the Workload's spec.active to true to "
    "queue the job again, or delete the job"
)
# A PodsReady timeout that met a slice GKE was still making: Kueue counts it from admission, before the pools.
STILL_PROVISIONING = "its slice was still being provisioned"
PROVISIONING_FIX = (
    ": waitForPodsReady.timeout counts from the admission, so it must cover the pools' creation, stockout "
    "retries and flex-start's wait (docs/concepts/kueue.md)"
)
# Evictions after which Kueue's integration sets Requeued=True (reconciler.go step 6).
REQUEUED_EVICTIONS = frozenset({"Preempted", "NodeFailures"})
# Node labels GKE sets on a pool's nodes itself: a flavor's labels under these prefixes select GKE's own
# nodes, and are never asked of GKE as a pool's labels.
GKE_OWN_LABEL_PREFIXES = ("cloud.google.com/", "kubernetes.io/", "node.kubernetes.io/", "k8s.io/")


def admitted(b: Builder) -> bool:
    """Whether the job may hold TPUs in this pass. A job without the queue label may, unless its namespace
    requires a queue and it has not started; a queued one only while Kueue admits its Workload, else
    everything of it is released (and its status says why)."""
    queue = b.observed.queue
    if queue is None and b.observed.queue_required and b.status.phase in (None, Phase.PENDING, Phase.QUEUED):
        _hold(
            b,
            Reason.QUEUE_REQUIRED,
            f"namespace {b.job.metadata.namespace} runs TPUJobs only through Kueue (its tenancy policy's "
            f"requireQueue): label the job {LABEL_QUEUE_NAME}: <a LocalQueue of the namespace>",
        )
        return False
    if queue is None:
        return True
    record = b.status.queue or QueueStatus(name=queue.name)
    # The start estimate, its summary and the position are a waiting job's only (_pending sets them again).
    previous_estimate = record.estimated_start
    b.status.queue = record.model_copy(
        update={"name": queue.name, "estimated_start": None, "summary": None, "position": None}
    )
    if not queue.enabled:
        _hold(
            b,
            Reason.KUEUE_NOT_ENABLED,
            f"the job asks for LocalQueue {queue.name} (label kueue.x-k8s.io/queue-name), but this operator "
            "runs without Kueue (TPUJOB_KUEUE; the chart's kueue.enabled): it never runs a queued job around "
            "its queue. Enable Kueue in the operator, or remove the label",
        )
        return False
    if not queue.known:
        # The Workload watch has not listed yet (or Kueue's API is not served): nothing changes, so a job
        # Kueue admitted keeps running; said once there is a problem to say.
        if queue.problem and b.status.phase in (None, Phase.PENDING, Phase.QUEUED):
            b.set_phase(Phase.QUEUED, Reason.KUEUE_UNAVAILABLE, queue.problem)
        b.decision.requeue(b.observed.poll_provisioning_seconds * 2)
        return False
    b.decision.workload.api = queue.api  # the writes speak the version the pass read
    cap = queue.api.max_pod_sets
    if b.job.spec.tpu.slices > cap:
        fail(
            b,
            Reason.INVALID_FOR_KUEUE,
            f"spec.tpu.slices is {b.job.spec.tpu.slices}, and this cluster's Kueue holds at most {cap} pod "
            f"sets in a Workload (one per slice; its Workload CRD, {queue.api.api_version}: spec.podSets "
            f"maxItems, 8 up to Kueue v0.17, 10 in v0.18, 18 from v0.19): run at most {cap} slices through "
            "this Kueue, upgrade Kueue, or remove the label kueue.x-k8s.io/queue-name",
        )
        return False
    workload = queue.workload
    if workload is not None:
        _seen(b, workload)
    if workload is None or workload.deleting:
        _no_workload(b, queue, workload)
        return False
    # Whole pod sets, as Kueue compares them: an admitted v5e 2x4 Workload never runs v6e 2x4 pools.
    if differences := workload_differences(b.job, workload):
        _replace(b, workload, differences)
        return False
    if workload.is_true(FINISHED):
        # Kueue finished it (a permanent failure to start): it will never be admitted again.
        condition = workload.condition(FINISHED) or {}
        fail(
            b,
            condition.get("reason") or FINISHED,
            f"Kueue finished Workload {workload.name}: {condition.get('message') or 'no message'}",
        )
        return False
    if workload.is_true(EVICTED):
        _evicted(b, workload)
        return False
    if not workload.active and not _deactivated_by_us(b, workload):
        # Deactivated, Kueue's eviction still to come (workload_controller.go Reconcile evicts an inactive
        # Workload at once): nothing of the job runs meanwhile.
        _hold(b, DEACTIVATED, f"Workload {workload.name} is deactivated (spec.active: false){STANDS}")
        return False
    if not workload.is_true(QUOTA_RESERVED) or not workload.is_true(ADMITTED):
        _pending(b, queue, workload, previous_estimate)
        return False
    return _admit(b, queue, workload)


def _replace(b: Builder, workload: WorkloadView, differences: list[str]) -> None:
    """The job changed since its Workload was made (jobframework EquivalentToWorkload): what Kueue admitted
    is not what the job needs. The job stops, and the Workload is deleted; a new one is made."""
    shown = ", ".join(differences[:4]) + (f" and {len(differences) - 4} more" if len(differences) > 4 else "")
    _hold(
        b,
        Reason.WORKLOAD_REPLACED,
        f"the job's pods changed since Workload {workload.name} was made ({shown}): it is replaced",
    )
    if _holds_nothing(b):
        b.decision.workload.delete = True
    else:
        b.decision.requeue(b.observed.poll_provisioning_seconds)


def _seen(b: Builder, workload: WorkloadView) -> None:
    """The Workload the pass' writes are about (conditional on the resourceVersion it saw)."""
    writes = b.decision.workload
    writes.name, writes.resource_version, writes.finalizers = (
        workload.name,
        workload.resource_version,
        workload.finalizers,
    )


def _hold(b: Builder, reason: str, message: str) -> None:
    """Queued: nothing of the job holds TPUs. Its pools GKE no longer has are recorded deleted (as a
    finished or suspended job's are), so it is charged nothing while it waits (status/cost.py)."""
    release(b, keep_finished_pods=False)
    recorded = {p.name for p in b.status.node_pools}
    if b.observed.pools is not None and (recorded or any(p.state != POOL_MISSING for p in b.observed.pools)):
        # A pool GKE no longer has is recorded deleted; a slice that never had one stays unrecorded.
        record_pools(
            b,
            [
                dataclasses.replace(p, state=POOL_DELETED) if p.state == POOL_MISSING else p
                for p in b.observed.pools
                if p.name in recorded or p.state != POOL_MISSING
            ],
        )
    b.status.starting_since = None
    if b.status.queue is not None and b.status.queue.queued_since is None:
        b.status.queue.queued_since = timestamp(b.now)
    b.set_phase(Phase.QUEUED, reason, message)
    b.condition(ConditionType.RUNNING, False, reason, message)
    if b.decision.delete_pools:
        b.decision.requeue(b.observed.poll_provisioning_seconds)


def _holds_nothing(b: Builder) -> bool:
    """No pod of the job lives and every pool it made is gone or going: its TPUs are free for others
    (jobframework's !job.IsActive())."""
    if any(p.phase not in ("Succeeded", "Failed") or p.lingering for p in b.observed.pods):
        return False
    return all(p.state in POOL_RELEASED_STATES for p in known_pools(b))


def _no_workload(b: Builder, queue: QueueView, workload: WorkloadView | None) -> None:
    assert b.status.queue is not None
    if workload is not None:  # being deleted: stopped first, then let go (reconciler.go step 1.1)
        _hold(
            b,
            Reason.WORKLOAD_CREATED,
            f"Workload {workload.name} is being deleted: the job waits for a new one",
        )
        if _holds_nothing(b) and KUEUE_FINALIZER in workload.finalizers:
            b.decision.workload.release_finalizer = True
        return
    priority = queue.priority
    if priority is not None and priority.error:
        _hold(b, Reason.KUEUE_UNAVAILABLE, priority.error)
        return
    where = f"ClusterQueue {queue.cluster_queue}" if queue.cluster_queue else f"LocalQueue {queue.name}"
    _hold(b, Reason.WORKLOAD_CREATED, f"waiting for Kueue to admit the job in {where}")
    if _holds_nothing(b):  # handleJobWithNoWorkload: not while the job still has active pods
        b.decision.workload.create = True
        b.decision.workload.priority = priority
    else:
        b.decision.requeue(b.observed.poll_provisioning_seconds)


def _evicted(b: Builder, workload: WorkloadView) -> None:
    """Kueue took the admission back (preempted, PodsReady timeout, deactivated, queue stopped): the job
    stops (SIGTERM and the grace period: the trainer checkpoints), not counted as a restart, and waits to
    be admitted again; its next attempt resumes from the checkpoint."""
    condition = workload.condition(EVICTED) or {}
    reason = condition.get("reason") or EVICTED
    message = condition.get("message") or "evicted by Kueue"
    if reason.startswith(DEACTIVATED) and not _deactivated_by_us(b, workload):
        message += STANDS
    if reason == "PodsReadyTimeout" and (
        b.previous_phase == Phase.PROVISIONING or STILL_PROVISIONING in (b.status.message or "")
    ):
        # Said from the pass that saw it (the job was Provisioning) for as long as the eviction stands.
        why = (
            f" ({b.previous_reason})" if b.previous_phase == Phase.PROVISIONING and b.previous_reason else ""
        )
        message += f"; {STILL_PROVISIONING}{why}{PROVISIONING_FIX}"
    record = b.status.queue
    assert record is not None
    if b.previous_phase != Phase.QUEUED and b.previous_phase is not None:
        # The eviction is new to this job: its running attempt ends; the next one starts afresh.
        record.evictions += 1
        record.queued_since = timestamp(b.now)
        b.status.attempt += 1
        b.status.workers = WorkerCounts(expected=len(expected_workers(b.job)))
        b.status.progress = None
    _hold(b, reason, f"evicted by Kueue: {message}")
    if b.decision.delete_pods or b.decision.delete_pools:
        return
    if workload.is_true(QUOTA_RESERVED) and _holds_nothing(b):
        # reconciler.go step 6: the job is no longer active, so the integration clears the admission.
        conditions = list(workload.conditions)
        conditions = set_condition(
            conditions, REQUEUED, reason in REQUEUED_EVICTIONS, reason, message, b.now, workload.generation
        )
        conditions = set_condition(
            conditions, QUOTA_RESERVED, False, "Pending", message, b.now, workload.generation
        )
        if any(c.get("type") == PODS_READY for c in conditions):  # generatePodsReadyCondition, unadmitted
            conditions = set_condition(
                conditions, PODS_READY, False, "WaitForStart", NOT_READY, b.now, workload.generation
            )
        if any(c.get("type") == ADMITTED for c in conditions):  # SyncAdmittedCondition
            conditions = set_condition(
                conditions,
                ADMITTED,
                False,
                "NoReservation",
                "The workload has no reservation",
                b.now,
                workload.generation,
            )
        b.decision.workload.conditions = conditions
        b.decision.workload.clear_admission = True
    elif workload.is_true(QUOTA_RESERVED):
        b.decision.requeue(b.observed.poll_provisioning_seconds)


def _pending(
    b: Builder, queue: QueueView, workload: WorkloadView, previous_estimate: StartEstimate | None
) -> None:
    """Waiting for Kueue: its reason and message as Kueue wrote them (QuotaReserved=False), or its
    admission checks; while it waits for quota, when it should start (status/start_estimate.py)."""
    record = b.status.queue
    assert record is not None
    record.workload = workload.name
    record.cluster_queue = queue.cluster_queue or record.cluster_queue
    record.pending_workloads = queue.pending_workloads
    record.position = queue.position.in_cluster_queue + 1 if queue.position is not None else None
    record.flavors = {}
    reserved = workload.condition(QUOTA_RESERVED) or {}
    if workload.is_true(QUOTA_RESERVED):
        reason, message = "QuotaReserved", "quota reserved; waiting for the Workload's admission checks"
    elif reserved:
        reason = reserved.get("reason") or "Pending"
        message = reserved.get("message") or f"waiting for Kueue to admit Workload {workload.name}"
    else:  # Kueue has not looked at it yet
        reason, message = Reason.WORKLOAD_CREATED, f"waiting for Kueue to admit Workload {workload.name}"
    where = f"ClusterQueue {record.cluster_queue}" if record.cluster_queue else f"LocalQueue {queue.name}"
    if queue.position is not None:  # Kueue's visibility API (status/queue_position.py)
        waiting = (
            f"; position {record.position} in ClusterQueue {record.cluster_queue} "
            f"({queue.position.in_local_queue + 1} in LocalQueue {queue.name})"
        )
    elif queue.pending_workloads:
        waiting = f"; {queue.pending_workloads} workload(s) pending in LocalQueue {queue.name}"
    else:
        waiting = ""
    _hold(b, reason, f"queued in {where}: {message}{waiting}")
    if not workload.is_true(QUOTA_RESERVED):
        start_estimate.record(record, previous_estimate, queue.facts, b.job.metadata.uid or "", b.now)
    if workload.condition(PODS_READY) is not None:
        _report_pods_ready(b, workload, ready=False)


def _admit(b: Builder, queue: QueueView, workload: WorkloadView) -> bool:
    """Admitted: each slice's placement from the assigned flavors; False while a flavor is unread."""
    record = b.status.queue
    assert record is not None
    admission = workload.admission or {}
    if problem := tas_problem(b.job, admission):  # Kueue TAS and policy create (status/tas.py)
        fail(b, Reason.INVALID_FOR_KUEUE, problem)
        return False
    assignments = {a.get("name"): a for a in admission.get("podSetAssignments") or []}
    flavors: dict[str, str] = {}
    for index in range(b.job.spec.tpu.slices):
        assigned = (assignments.get(pod_set_name(index)) or {}).get("flavors") or {}
        names = sorted(set(assigned.values()))
        missing = [n for n in names if n not in queue.flavors]
        if missing:
            _hold(b, Reason.KUEUE_UNAVAILABLE, f"ResourceFlavor {missing[0]} of the admission cannot be read")
            return False
        try:  # the admission checks' pod set updates on the flavors' part (render/podset_updates.py)
            updated = with_updates(
                b.job, index, placement([queue.flavors[n] for n in names]), workload.admission_checks
            )
            # Kueue TAS (policy existing): each worker on its assigned domain (status/tas.py).
            b.decision.placement[index] = with_topology(
                updated, assignments.get(pod_set_name(index)), slice_shape(b.job).hosts
            )
        except ValueError as error:
            _cannot_start(b, workload, pod_set_name(index), error)
            return False
        flavors[pod_set_name(index)] = ",".join(names)
    newly = b.previous_phase in (None, Phase.PENDING, Phase.QUEUED)
    record.workload = workload.name
    record.cluster_queue = admission.get("clusterQueue") or record.cluster_queue
    record.flavors = flavors
    record.pending_workloads = record.position = None
    if newly or record.admitted_time is None:
        admitted_at = (workload.condition(ADMITTED) or {}).get("lastTransitionTime") or timestamp(b.now)
        record.admitted_time = admitted_at
        b.event(
            "Normal",
            Reason.ADMITTED,
            f"admitted by ClusterQueue {record.cluster_queue} ({_flavors_text(flavors)})",
        )
    record.queued_since = None
    return True


def _cannot_start(b: Builder, workload: WorkloadView, pod_set: str, error: ValueError) -> None:
    """An admission check's pod set update the job cannot honour: as Kueue's integration does with a
    permanent podset.Merge error (jobframework reconciler.go step 7: the Workload finished, FailedToStart),
    the job does not start, and says which field and what to change."""
    if isinstance(error, PodSetUpdateConflict):
        problem = (
            f"admission check of Workload {workload.name} sets {error.what}[{error.key}]={error.theirs!r} "
            f"on pod set {pod_set}, and the job's pods have {error.key}={error.ours!r}"
        )
        fix = (
            "point the job at a ClusterQueue whose admission checks provision what spec.tpu asks for "
            "(its ProvisioningRequestConfig and ResourceFlavor), or change spec.tpu (or spec.pod) to match"
        )
    elif isinstance(error, TopologyAssignmentError):
        problem = f"Workload {workload.name}: {error}"
        fix = "a topology assignment must place each host of the slice once: re-create the job to queue again"
    else:
        problem, fix = f"Workload {workload.name}: {error}", "fix the admission check that wrote it"
    fail(b, FAILED_TO_START, f"Kueue admitted the job, but it cannot start: {problem}: {fix}")


def _flavors_text(flavors: dict[str, str]) -> str:
    return ", ".join(f"{pod_set}: {names}" for pod_set, names in flavors.items()) or "no flavors"


def placement(flavors: list[FlavorView]) -> Placement:
    """What the flavors put on a slice's pods and its pool (podset.FromAssignment: nodeLabels as node
    selectors, tolerations; nodeTaints on the nodes, which Kueue's flavor assignment already checked the
    pods tolerate)."""
    selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    taints: list[dict[str, str]] = []
    for flavor in flavors:
        selector.update(flavor.node_labels)
        tolerations.extend(t for t in flavor.tolerations if t not in tolerations)
        taints.extend(t for t in flavor.node_taints if t not in taints)
    node_labels = {k: v for k, v in selector.items() if not k.startswith(GKE_OWN_LABEL_PREFIXES)}
    return Placement(
        node_selector=selector,
        tolerations=tuple(tolerations),
        node_labels=node_labels,
        node_taints=tuple(taints),
    )


def follow_up(b: Builder) -> None:
    """After the pass decided: a finished job finishes its Workload (reconciler.go step 3) and then lets it
    go; an admitted one reports PodsReady (step 5). Nothing for a job without the queue label."""
    queue = b.observed.queue
    if queue is None or not queue.enabled or not queue.known or queue.workload is None:
        return
    workload = queue.workload
    _seen(b, workload)
    b.decision.workload.api = queue.api
    if b.status.phase in TERMINAL_PHASES:
        if not workload.is_true(FINISHED):
            succeeded = b.status.phase == Phase.SUCCEEDED
            b.decision.workload.conditions = set_condition(
                list(workload.conditions),
                FINISHED,
                True,
                "Succeeded"
                if succeeded
                else (b.status.reason if b.status.reason == FAILED_TO_START else "Failed"),
                b.status.message or b.status.phase,
                b.now,
                workload.generation,
            )
        if KUEUE_FINALIZER in workload.finalizers:
            b.decision.workload.release_finalizer = True
        return
    record = b.status.queue = b.status.queue or QueueStatus(name=queue.name)
    if b.status.phase == Phase.SUSPENDED:
        if workload.active:  # a suspended job gives its quota back: its Workload is deactivated
            b.decision.workload.active = False
            # Recorded in the job's status, which only the operator writes (a tenant may write its Workload).
            record.deactivated_workload = workload.name
        return
    if not workload.active:
        if _deactivated_by_us(b, workload):
            b.decision.workload.active = True  # resumed
        return  # Kueue's deactivation, or an administrator's: it stands (admitted() says so)
    record.deactivated_workload = None  # active again, or another Workload now
    if workload.is_true(ADMITTED) and not workload.is_true(EVICTED):
        _report_pods_ready(b, workload, ready=_pods_ready(b))


def _pods_ready(b: Builder) -> bool:
    """Every worker of the current attempt Ready (its Ready condition, not its phase: a Running pod whose
    containers are not ready yet is not) or Succeeded, as Kueue's batch Job integration counts them
    (pkg/controller/jobs/job/job_controller.go PodsReady: status.ready + status.succeeded >= pods)."""
    expected = len(expected_workers(b.job))
    ready = sum(
        1
        for p in b.observed.pods
        if is_current(b.status, p) and not p.deleting and (p.phase == "Succeeded" or p.ready)
    )
    return ready >= expected > 0


def _deactivated_by_us(b: Builder, workload: WorkloadView) -> bool:
    record = b.status.queue
    return record is not None and record.deactivated_workload == workload.name


def _report_pods_ready(b: Builder, workload: WorkloadView, ready: bool) -> None:
    """PodsReady as generatePodsReadyCondition words it, written only when it changes."""
    current = workload.condition(PODS_READY)
    if not workload.is_true(ADMITTED):
        wanted = (False, "WaitForStart", NOT_READY)
    elif ready:
        recovering = current is not None and current.get("reason") in ("WaitForRecovery", "Recovered")
        wanted = (
            True,
            "Recovered" if recovering else "Started",
            "All pods reached readiness and the workload is running",
        )
    elif current is not None and (
        current.get("status") == "True" or current.get("reason") == "WaitForRecovery"
    ):
        wanted = (False, "WaitForRecovery", "At least one pod has failed, waiting for recovery")
    else:
        wanted = (False, "WaitForStart", NOT_READY)
    if (
        current is not None
        and (current.get("status") == ("True" if wanted[0] else "False"))
        and current.get("reason") == wanted[1]
    ):
        return
    base = (
        b.decision.workload.conditions
        if b.decision.workload.conditions is not None
        else list(workload.conditions)
    )
    b.decision.workload.conditions = set_condition(base, PODS_READY, *wanted, b.now, workload.generation)


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: dt.datetime,
    generation: int,
) -> list[dict[str, Any]]:
    """apimeta.SetStatusCondition on Kueue's wire form: lastTransitionTime moves only when status flips;
    the message truncated as Kueue truncates it (api.TruncateConditionMessage: 32 KiB)."""
    wanted = "True" if status else "False"
    current = next((c for c in conditions if c.get("type") == type_), None)
    moved = current is None or current.get("status") != wanted
    updated = {
        "type": type_,
        "status": wanted,
        "reason": reason,
        "message": message[: 32 * 1024],
        "lastTransitionTime": timestamp(now)
        if moved or current is None
        else current.get("lastTransitionTime"),
        "observedGeneration": generation,
    }
    return [c for c in conditions if c.get("type") != type_] + [updated]
