"""ClusterQueue and LocalQueue status as Kueue v0.19.2 writes them (pkg/cache/scheduler/clusterqueue.go
inactiveReason, pkg/controller/core/clusterqueue_controller.go and localqueue_controller.go). Pure."""

from __future__ import annotations

from datetime import datetime

from tpujob_sandbox.kueue.assign import QueueView
from tpujob_sandbox.kueue.objects import Obj, generation, is_admitted, set_condition
from tpujob_sandbox.kueue.quantity import format_value
from tpujob_sandbox.kueue.requests import Usage, add_usage, admitted_usage


def inactive_reason(cq: Obj, view: QueueView, flavors: set[str]) -> tuple[str, str] | None:
    """clusterQueue.inactiveReason: None when the queue can admit; else its reason and message."""
    if cq["metadata"].get("deletionTimestamp"):
        return "Terminating", "Can't admit new workloads; clusterQueue is terminating"
    reasons, messages = [], []
    if view.stop_policy != "None":
        reasons.append("Stopped")
        messages.append("is stopped")
    missing = [name for name in dict.fromkeys(view.flavor_names()) if name not in flavors]
    if missing:
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
    if not reasons:
        return None
    return reasons[0], f"Can't admit new workloads: {', '.join(messages)}."


def _flavor_amounts(view: QueueView, usage: Usage, borrowed: bool) -> list[Obj]:
    """One entry per flavor of the queue, each covered resource's total (and, for a ClusterQueue, what it
    borrows: always 0 here, no cohort)."""
    out = []
    for group in view.groups:
        for name, _ in group.flavors:
            resources = []
            for resource in group.covered:
                entry: Obj = {
                    "name": resource,
                    "total": format_value(resource, usage.get((name, resource), 0)),
                }
                if borrowed:
                    entry["borrowed"] = "0"
                resources.append(entry)
            out.append({"name": name, "resources": resources})
    return out


def _usage(workloads: list[Obj]) -> Usage:
    total: Usage = {}
    for wl in workloads:
        add_usage(total, admitted_usage(wl))
    return total


def cluster_queue_status(
    cq: Obj, view: QueueView, flavors: set[str], pending: int, holders: list[Obj], now: datetime
) -> Obj:
    status: Obj = {"conditions": list((cq.get("status") or {}).get("conditions") or [])}
    admitted = [wl for wl in holders if is_admitted(wl)]
    status.update(
        pendingWorkloads=pending,
        reservingWorkloads=len(holders),
        admittedWorkloads=len(admitted),
        flavorsReservation=_flavor_amounts(view, _usage(holders), borrowed=True),
        flavorsUsage=_flavor_amounts(view, _usage(admitted), borrowed=True),
    )
    inactive = inactive_reason(cq, view, flavors)
    if inactive is None:
        set_condition(status, "Active", True, "Ready", "Can admit new workloads", now, generation(cq))
    else:
        set_condition(status, "Active", False, inactive[0], inactive[1], now, generation(cq))
    return status


def local_queue_status(
    lq: Obj,
    view: QueueView | None,
    cq_active: bool,
    pending: int,
    holders: list[Obj],
    now: datetime,
    version: str = "v1beta2",
) -> Obj:
    """LocalQueueReconciler.Reconcile: stopped, its ClusterQueue missing or inactive, or Ready. The admitted
    usage is flavorsUsage in v1beta2, flavorUsage in v1beta1 (v0.14.8 apis/kueue/v1beta1/localqueue_types.go;
    localqueue_controller.go UpdateStatusIfChanged writes FlavorUsage)."""
    status: Obj = {"conditions": list((lq.get("status") or {}).get("conditions") or [])}
    admitted = [wl for wl in holders if is_admitted(wl)]
    status.update(pendingWorkloads=pending, reservingWorkloads=len(holders), admittedWorkloads=len(admitted))
    if view is not None:
        status["flavorsReservation"] = _flavor_amounts(view, _usage(holders), borrowed=False)
        usage = "flavorUsage" if version == "v1beta1" else "flavorsUsage"
        status[usage] = _flavor_amounts(view, _usage(admitted), borrowed=False)
    message = "Can't submit new workloads to clusterQueue"
    if ((lq.get("spec") or {}).get("stopPolicy") or "None") != "None":
        set_condition(status, "Active", False, "Stopped", "LocalQueue is stopped", now, generation(lq))
    elif view is None:
        set_condition(status, "Active", False, "ClusterQueueDoesNotExist", message, now, generation(lq))
    elif not cq_active:
        set_condition(status, "Active", False, "ClusterQueueIsInactive", message, now, generation(lq))
    else:
        message = "Can submit new workloads to localQueue"
        set_condition(status, "Active", True, "Ready", message, now, generation(lq))
    return status
