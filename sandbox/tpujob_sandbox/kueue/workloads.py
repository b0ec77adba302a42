"""What Kueue v0.19.2's workload controller (pkg/controller/core/workload_controller.go Reconcile) does to a
Workload apart from scheduling: orphaned workloads, deactivation, stopped queues, the waitForPodsReady
timeout and its requeuing backoff, and the reasons a pending workload cannot be queued. Pure: one Workload
(a working copy whose status it edits) and what it needs to know about its queues."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tpujob_sandbox.kueue.config import KueueConfig
from tpujob_sandbox.kueue.objects import (
    ADMITTED,
    DEACTIVATION_TARGET,
    EVICTED,
    FINISHED,
    JOB_UID_LABEL,
    PODS_READY,
    QUOTA_RESERVED,
    REQUEUED,
    Obj,
    find_condition,
    format_time,
    generation,
    has_quota_reservation,
    is_active,
    is_admitted,
    is_deleting,
    is_evicted,
    is_finished,
    is_true,
    parse_time,
    requeue_at,
    set_condition,
)


@dataclass(frozen=True)
class QueueFacts:
    """The workload's LocalQueue and ClusterQueue as the workload controller sees them."""

    local_queue: Obj | None
    cluster_queue: Obj | None
    cluster_queue_name: str | None
    cluster_queue_active: bool


@dataclass
class Outcome:
    remove_finalizer: bool = False
    wake_at: datetime | None = None
    deactivate: bool = False  # spec.active to set false (Kueue's own deactivation)


def status_of(wl: Obj) -> Obj:
    if not isinstance(wl.get("status"), dict):
        wl["status"] = {}
    status: Obj = wl["status"]
    return status


def evict(wl: Obj, reason: str, message: str, now: datetime) -> None:
    """evict.prepareForEviction: Evicted=True with the reason and message (admission checks, cluster
    nomination and preemption gates are not modelled)."""
    set_condition(status_of(wl), EVICTED, True, reason, message, now, generation(wl))


def is_orphaned(wl: Obj) -> bool:
    """isOrphanedWorkload: no owner, and being deleted or carrying the job-uid label
    (FinishOrphanedWorkloads is on by default in 0.19)."""
    if wl["metadata"].get("ownerReferences"):
        return False
    return is_deleting(wl) or bool((wl["metadata"].get("labels") or {}).get(JOB_UID_LABEL))


def _stop_policy(queue: Obj | None) -> str:
    return ((queue or {}).get("spec") or {}).get("stopPolicy") or "None"


def reconcile_workload(wl: Obj, facts: QueueFacts, config: KueueConfig, now: datetime) -> Outcome:
    """One Reconcile of the workload controller, in its order; edits `wl`'s status in place."""
    outcome = Outcome()
    if is_orphaned(wl):
        # workload.FinalizeOrphanedWorkload: finish it (unless being deleted), then drop Kueue's finalizer.
        if not is_deleting(wl) and not is_finished(wl):
            set_condition(
                status_of(wl),
                FINISHED,
                True,
                "OwnerNotFound",
                "The workload's owner no longer exists",
                now,
                generation(wl),
            )
        outcome.remove_finalizer = True
        return outcome
    if is_finished(wl) or is_deleting(wl):
        return outcome
    if not is_active(wl):
        _deactivate(wl, now)
        return outcome
    if is_true(wl, DEACTIVATION_TARGET):
        # Reconcile: an active Workload marked DeactivationTarget gets spec.active=false (client Update);
        # its eviction follows in the next Reconcile (_deactivate).
        outcome.deactivate = True
        return outcome
    if not has_quota_reservation(wl):
        outcome.wake_at = _after_backoff(wl, now)
        if outcome.wake_at is None:
            _requeued_again(wl, facts, now)
            _queue_blocker(wl, facts, now)
        return outcome
    if _drained(wl, facts, now):
        return outcome
    outcome.wake_at = _pods_ready_timeout(wl, config, now)
    return outcome


def _deactivate(wl: Obj, now: datetime) -> None:
    """spec.active=false: evicted (whether or not it was admitted), requeueState cleared. With Kueue's own
    DeactivationTarget mark the reason names its cause and the message says why (Reconcile's inactive branch:
    "Deactivated" + patching.ReasonWithCause, "DeactivatedDueTo<reason>", "The workload is deactivated due
    to <message>"), and the mark is removed; without it (an administrator's, a job integration's) the reason
    is Deactivated. The job controller then stops the job and clears the admission."""
    status = status_of(wl)
    target = find_condition(wl, DEACTIVATION_TARGET)
    if not is_evicted(wl):
        reason, message = "Deactivated", "The workload is deactivated"
        if target is not None:
            reason = f"DeactivatedDueTo{target.get('reason') or ''}"
            message = f"{message} due to {target.get('message') or ''}"
        evict(wl, reason, message, now)
    if target is not None:
        status["conditions"] = [c for c in status.get("conditions") or [] if c is not target]
    status.pop("requeueState", None)


def _after_backoff(wl: Obj, now: datetime) -> datetime | None:
    """A pending workload in requeuing backoff waits until requeueAt (the queue manager keeps it out of the
    heads); then requeueAt is cleared and Requeued turns True with reason BackoffFinished."""
    at = requeue_at(wl)
    if at is not None and at > now:
        return at
    status = status_of(wl)
    if at is not None:
        status["requeueState"] = {k: v for k, v in status["requeueState"].items() if k != "requeueAt"}
    requeued = find_condition(wl, REQUEUED)
    if (
        requeued
        and requeued.get("status") == "False"
        and requeued.get("reason")
        in (
            "PodsReadyTimeout",
            "AdmissionCheck",
        )
    ):
        set_condition(
            status,
            REQUEUED,
            True,
            "BackoffFinished",
            "The workload backoff was finished",
            now,
            generation(wl),
        )
    return None


def _requeued_again(wl: Obj, facts: QueueFacts, now: datetime) -> None:
    """Requeued=False left by a deactivation or a stopped queue turns True once that is over."""
    requeued = find_condition(wl, REQUEUED)
    if not requeued or requeued.get("status") != "False":
        return
    reason = requeued.get("reason")
    status = status_of(wl)
    if reason == "Deactivated":
        set_condition(
            status, REQUEUED, True, "Reactivated", "The workload was reactivated", now, generation(wl)
        )
    else:
        restarted = {
            "LocalQueueStopped": ("LocalQueue", facts.local_queue),
            "ClusterQueueStopped": ("ClusterQueue", facts.cluster_queue),
        }
        kind, queue = restarted.get(reason or "", ("", None))
        if queue is not None and _stop_policy(queue) == "None":
            message = f"The {kind} was restarted after being stopped"
            set_condition(status, REQUEUED, True, f"{kind}Restarted", message, now, generation(wl))


def _queue_blocker(wl: Obj, facts: QueueFacts, now: datetime) -> None:
    """getQueueBlocker with UnadmittedWorkloadsObservability off (its default in 0.19): QuotaReserved=False,
    reason Inadmissible, when the queues cannot take the workload."""
    queue_name = (wl.get("spec") or {}).get("queueName")
    if facts.local_queue is None:
        message = f"LocalQueue {queue_name} doesn't exist"
    elif _stop_policy(facts.local_queue) != "None":
        message = f"LocalQueue {queue_name} is inactive"
    elif facts.cluster_queue is None:
        message = f"ClusterQueue {facts.cluster_queue_name} doesn't exist"
    elif not facts.cluster_queue_active:
        message = f"ClusterQueue {facts.cluster_queue_name} is inactive"
    else:
        return
    set_condition(status_of(wl), QUOTA_RESERVED, False, "Inadmissible", message, now, generation(wl))


def _drained(wl: Obj, facts: QueueFacts, now: datetime) -> bool:
    """reconcileOnLocalQueueActiveState / reconcileOnClusterQueueActiveState: HoldAndDrain evicts an admitted
    workload (Hold only stops new admissions)."""
    if not is_admitted(wl) or is_evicted(wl):
        return False
    if _stop_policy(facts.local_queue) == "HoldAndDrain":
        evict(wl, "LocalQueueStopped", "The LocalQueue is stopped", now)
        return True
    if _stop_policy(facts.cluster_queue) == "HoldAndDrain":
        evict(wl, "ClusterQueueStopped", "The ClusterQueue is stopped", now)
        return True
    return False


def _pods_ready_timeout(wl: Obj, config: KueueConfig, now: datetime) -> datetime | None:
    """reconcileNotReadyTimeout / admittedNotReadyWorkload: an admitted workload whose PodsReady is not True
    in time from Admitted's lastTransitionTime (or, while recovering, from PodsReady's) is evicted with
    reason PodsReadyTimeout and requeued after a backoff (workload.UpdateRequeueState). Returns when to look
    again."""
    if config.pods_ready_timeout_seconds is None or not is_admitted(wl) or is_evicted(wl):
        return None
    ready = find_condition(wl, PODS_READY)
    if ready and ready.get("status") == "True":
        return None
    timeout: float | None = None
    if ready is None or ready.get("reason") in ("WaitForStart", "PodsReady"):
        since, timeout = find_condition(wl, ADMITTED), config.pods_ready_timeout_seconds
    elif ready.get("reason") == "WaitForRecovery":
        since, timeout = ready, config.recovery_seconds()
    if timeout is None:
        return None
    start = parse_time((since or {}).get("lastTransitionTime")) or now
    deadline = start + timedelta(seconds=timeout or 0)
    if deadline > now:
        return deadline
    namespace, name = wl["metadata"].get("namespace", ""), wl["metadata"]["name"]
    status = status_of(wl)
    state = dict(status.get("requeueState") or {})
    count = int(state.get("count") or 0) + 1
    if config.backoff_limit_count is not None and count > config.backoff_limit_count:
        # triggerDeactivation: past requeuingStrategy.backoffLimitCount, Kueue deactivates the Workload
        # instead of evicting it again (SetDeactivationTarget, RequeuingLimitExceeded).
        set_condition(
            status,
            DEACTIVATION_TARGET,
            True,
            "RequeuingLimitExceeded",
            "exceeding the maximum number of re-queuing retries",
            now,
            generation(wl),
        )
        return None
    wait = timedelta(seconds=config.backoff_seconds(count))
    current = parse_time(state.get("requeueAt"))
    if current is None or current < now + wait:  # SetRequeueState never moves a later requeue earlier
        state["requeueAt"] = format_time(now + wait)
    state["count"] = count
    status["requeueState"] = state
    evict(wl, "PodsReadyTimeout", f"Exceeded the PodsReady timeout {namespace}/{name}", now)
    return None
