"""Kueue's controllers in one pure pass: the objects as listed from the API in, what Kueue would write out
(Workload statuses, finalizers to drop, ClusterQueue and LocalQueue statuses) and when to look again.
The simulator runs it on every change; tests run it on tables (tests/unit/test_kueue_model.py)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime

from tpujob_sandbox.kueue import checks, tas
from tpujob_sandbox.kueue.assign import Cluster, QueueView, queue_view
from tpujob_sandbox.kueue.config import KueueConfig
from tpujob_sandbox.kueue.objects import (
    VERSIONS,
    Obj,
    admission,
    cluster_queue_checks,
    has_quota_reservation,
    holds_quota,
    is_active,
    is_deleting,
    is_finished,
    key,
    requeue_at,
)
from tpujob_sandbox.kueue.queues import cluster_queue_status, inactive_reason, local_queue_status
from tpujob_sandbox.kueue.scheduler import schedule_queue
from tpujob_sandbox.kueue.workloads import QueueFacts, reconcile_workload

Key = tuple[str, str]


@dataclass
class World:
    flavors: list[Obj] = field(default_factory=list)
    cluster_queues: list[Obj] = field(default_factory=list)
    local_queues: list[Obj] = field(default_factory=list)
    workloads: list[Obj] = field(default_factory=list)
    version: str = VERSIONS[0]  # the API version they were listed in (and the statuses are written in)
    topologies: list[Obj] = field(default_factory=list)  # for topology-aware scheduling (tas.py)
    nodes: list[Obj] = field(default_factory=list)


@dataclass
class Plan:
    workload_status: dict[Key, Obj] = field(default_factory=dict)  # the whole new status, changed ones only
    remove_finalizer: list[Key] = field(default_factory=list)
    deactivate: list[Key] = field(default_factory=list)  # spec.active=false: Kueue's own deactivation
    cluster_queue_status: dict[str, Obj] = field(default_factory=dict)
    local_queue_status: dict[Key, Obj] = field(default_factory=dict)
    wake_at: datetime | None = None


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return min(x for x in (a, b) if x is not None) if (a or b) else None


def in_queue(wl: Obj) -> bool:
    """In its queue (pending in the queue statuses): active, not finished or being deleted, no reservation."""
    return is_active(wl) and not is_finished(wl) and not is_deleting(wl) and not has_quota_reservation(wl)


def _waiting(wl: Obj, now: datetime) -> bool:
    """A candidate for admission now: queued, and its requeuing backoff (if any) is over."""
    at = requeue_at(wl)
    return in_queue(wl) and (at is None or at <= now)


def _changed(old: Obj | None, new: Obj) -> bool:
    """Compared on the fields the simulator writes only: others (fairSharing, ...) are not its business."""
    old = old or {}
    return any(old.get(field_name) != value for field_name, value in new.items())


def reconcile(world: World, config: KueueConfig, now: datetime) -> Plan:
    plan = Plan()
    flavors = {f["metadata"]["name"]: f for f in world.flavors}
    cqs = {cq["metadata"]["name"]: cq for cq in world.cluster_queues}
    views: dict[str, QueueView] = {name: queue_view(cq) for name, cq in cqs.items()}
    active = {name: inactive_reason(cqs[name], view, set(flavors)) is None for name, view in views.items()}
    lqs = {key(lq): lq for lq in world.local_queues}
    workloads = copy.deepcopy(world.workloads)

    def queue_of(wl: Obj) -> tuple[Obj | None, str | None]:
        lq = lqs.get(
            (wl["metadata"].get("namespace", ""), str((wl.get("spec") or {}).get("queueName") or ""))
        )
        return lq, ((lq or {}).get("spec") or {}).get("clusterQueue")

    for wl in workloads:
        if not (wl.get("spec") or {}).get("queueName") and admission(wl) is None:
            continue  # not Kueue's
        lq, cq_name = queue_of(wl)
        facts = QueueFacts(lq, cqs.get(cq_name or ""), cq_name, active.get(cq_name or "", False))
        outcome = reconcile_workload(wl, facts, config, now)
        if checks.sync(wl, cluster_queue_checks(facts.cluster_queue), now):
            plan.deactivate.append(key(wl))
        if outcome.remove_finalizer:
            plan.remove_finalizer.append(key(wl))
        if outcome.deactivate:
            plan.deactivate.append(key(wl))
        plan.wake_at = _earliest(plan.wake_at, outcome.wake_at)

    def holders(cq_name: str) -> list[Obj]:
        return [
            wl for wl in workloads if holds_quota(wl) and (admission(wl) or {}).get("clusterQueue") == cq_name
        ]

    def stopped(lq: Obj | None) -> bool:
        return str(((lq or {}).get("spec") or {}).get("stopPolicy") or "None") != "None"

    for name, view in views.items():
        if active[name]:
            waiting = [wl for wl in workloads if queue_of(wl)[1] == name and not stopped(queue_of(wl)[0])]
            waiting = [wl for wl in waiting if queue_of(wl)[0] is not None and _waiting(wl, now)]
            cluster = Cluster(
                view,
                flavors,
                tuple(holders(name)),
                topologies={t["metadata"]["name"]: tas.levels_of(t) for t in world.topologies},
                nodes=tuple(tas.node_of(n) for n in world.nodes),
                version=world.version,
            )
            schedule_queue(cluster, waiting, now)

    for name, cq in cqs.items():
        queued = [
            wl for wl in workloads if queue_of(wl)[0] is not None and queue_of(wl)[1] == name and in_queue(wl)
        ]
        status = cluster_queue_status(cq, views[name], set(flavors), len(queued), holders(name), now)
        if _changed(cq.get("status"), status):
            plan.cluster_queue_status[name] = status
    for lq_key, lq in lqs.items():
        cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
        mine = [wl for wl in workloads if queue_of(wl)[0] is lq]
        queued = [wl for wl in mine if in_queue(wl)]
        lq_holders = [wl for wl in mine if holds_quota(wl)]
        status = local_queue_status(
            lq, views.get(cq_name), active.get(cq_name, False), len(queued), lq_holders, now, world.version
        )
        if _changed(lq.get("status"), status):
            plan.local_queue_status[lq_key] = status

    for before, after in zip(world.workloads, workloads, strict=True):
        if (after.get("status") or {}) != (before.get("status") or {}):
            plan.workload_status[key(after)] = after.get("status") or {}
    return plan
