"""Kueue v0.19.2's scheduler for one ClusterQueue (pkg/scheduler/scheduler.go) with its queue's ordering
(pkg/cache/queue/cluster_queue.go): pending workloads by priority, then queue-order time, then UID; each
either admitted, left pending with the flavor assigner's message, or preempting. Pure: edits the working
copies of the workloads it is given."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from tpujob_sandbox.kueue.assign import Assignment, Cluster, Mode, assign_flavors, preemption_targets
from tpujob_sandbox.kueue.checks import sync
from tpujob_sandbox.kueue.objects import (
    ADMITTED,
    EVICTED,
    JOB_UID_LABEL,
    PREEMPTED,
    QUOTA_RESERVED,
    Obj,
    find_condition,
    generation,
    is_evicted,
    priority,
    queue_order_time,
    set_condition,
    uid,
)
from tpujob_sandbox.kueue.requests import Usage
from tpujob_sandbox.kueue.workloads import evict, status_of


def queue_order(wl: Obj) -> tuple[int, float, str]:
    """baseCompareFunc: higher priority first, then the older queue-order timestamp, then UID."""
    return (-priority(wl), queue_order_time(wl).timestamp(), uid(wl))


def preemption_message(preemptor: Obj, queue: str) -> str:
    """preemption.go preemptionMessage, for a ClusterQueue with no cohort (its path is /<name>)."""
    job_uid = (preemptor["metadata"].get("labels") or {}).get(JOB_UID_LABEL) or "UNKNOWN"
    return (
        f"Preempted to accommodate a workload (UID: {uid(preemptor) or 'UNKNOWN'}, JobUID: {job_uid}) due to "
        f"prioritization in the ClusterQueue; preemptor path: /{queue}; preemptee path: /{queue}"
    )


def _reset_active(wl: Obj, kind: str, now: datetime) -> None:
    """workload.resetActiveCondition: an active Evicted/Preempted turns False, reason QuotaReserved."""
    found = find_condition(wl, kind)
    if found and found.get("status") == "True":
        message = "Previously: " + str(found.get("message") or "")
        set_condition(status_of(wl), kind, False, "QuotaReserved", message, now, generation(wl))


def admit(wl: Obj, queue: str, assignment: Assignment, now: datetime, checks: tuple[str, ...] = ()) -> None:
    """Scheduler.admit -> prepareWorkload: SetQuotaReservation, then Admitted unless the ClusterQueue has
    admission checks (then the workload controller admits it once they are Ready: checks.py)."""
    status = status_of(wl)
    status["admission"] = {
        "clusterQueue": queue,
        "podSetAssignments": [ps.to_api() for ps in assignment.pod_sets],
    }
    message = f"Quota reserved in ClusterQueue {queue}"
    set_condition(status, QUOTA_RESERVED, True, "QuotaReserved", message, now, generation(wl))
    _reset_active(wl, EVICTED, now)
    _reset_active(wl, PREEMPTED, now)
    if checks:
        sync(wl, list(checks), now)
        return
    set_condition(status, ADMITTED, True, "Admitted", "The workload is admitted", now, generation(wl))


def leave_pending(wl: Obj, message: str, now: datetime) -> None:
    """requeueAndUpdate: UnsetQuotaReservationWithCondition with reason Pending (the fallback while
    UnadmittedWorkloadsObservability is off, as by default in 0.19)."""
    status = status_of(wl)
    set_condition(status, QUOTA_RESERVED, False, "Pending", message, now, generation(wl))
    status.pop("admission", None)


def _needs_preemption(assignment: Assignment, cluster: Cluster) -> set[tuple[str, str]]:
    usage = cluster.usage()
    return {
        fr for fr, value in assignment.usage.items() if usage.get(fr, 0) + value > cluster.queue.nominal(fr)
    }


def schedule_queue(cluster: Cluster, pending: list[Obj], now: datetime) -> list[Obj]:
    """Admit what fits, in queue order. StrictFIFO stops at the first workload that does not fit;
    BestEffortFIFO moves on to the next. A workload whose preemptions are in flight stays at the head (the
    queue's sticky preemptor) until its victims' quota is released. Returns the workloads it evicted."""
    holders = list(cluster.holders)
    evicted: list[Obj] = []
    for wl in sorted(pending, key=queue_order):
        current = replace(cluster, holders=tuple(holders))
        assignment = assign_flavors(wl, current, now)
        if assignment.mode == Mode.FIT:
            admit(wl, cluster.queue.name, assignment, now, cluster.queue.admission_checks)
            holders.append(wl)
            continue
        message = assignment.message()
        if assignment.mode == Mode.PREEMPT:
            usage: Usage = dict(assignment.usage)
            targets = preemption_targets(wl, current, usage, _needs_preemption(assignment, current), now)
            if targets:
                text = preemption_message(wl, cluster.queue.name)
                for target in targets:
                    if not is_evicted(target):
                        evict(target, "Preempted", text, now)
                        set_condition(status_of(target), PREEMPTED, True, "InClusterQueue", text, now)
                        evicted.append(target)
                leave_pending(wl, f"{message}. Pending the preemption of {len(targets)} workload(s)", now)
                break
        leave_pending(wl, message, now)
        if cluster.queue.strategy == "StrictFIFO":
            break
    return evicted
