"""Kueue's visibility API answers (visibility.kueue.x-k8s.io, "pending workloads on demand"), from the
simulated Kueue's last pass. Pure: the World in, a PendingWorkloadsSummary out.

After Kueue v0.19.2 pkg/visibility/storage/:
- a ClusterQueue's pending workloads are its queue's, in the order the scheduler takes them
  (qcache.Manager.PendingWorkloadsInfo -> ClusterQueue.Snapshot: the heap and the inadmissible ones, sorted by
  baseCompareFunc: here scheduler.queue_order); an unknown ClusterQueue is 404 (pending_workloads_cq.go Get);
- each item is newPendingWorkload (utils.go): name, namespace, owner references, creation time, priority,
  localQueueName, positionInClusterQueue (its index) and positionInLocalQueue (how many of its LocalQueue's
  came before it), both from 0;
- limit (1000 by default, at most 100000) and offset (from 0) bound the answer (boundedLimitOffset); the
  LocalQueue's endpoint (pending_workloads_lq.go) lists its own in the same order, positionInLocalQueue
  counted from the offset, and 404 for a LocalQueue the queue manager does not know.

Not modelled: a workload in its requeuing backoff counts as pending here (Kueue keeps it out of the queue
until the backoff ends), fair sharing's ordering.
"""

from __future__ import annotations

from tpujob_sandbox.kueue.model import World, in_queue
from tpujob_sandbox.kueue.objects import Obj, key, priority
from tpujob_sandbox.kueue.scheduler import queue_order

GROUP = "visibility.kueue.x-k8s.io"
DEFAULT_LIMIT = 1000  # constants.DefaultPendingWorkloadsLimit
MAX_LIMIT = 100_000  # constants.MaxPendingWorkloadsLimit


def bounded(limit: int, offset: int) -> tuple[int, int]:
    """boundedLimitOffset."""
    return min(max(limit, 0), MAX_LIMIT), max(offset, 0)


def _local_queues(world: World) -> dict[tuple[str, str], str]:
    """Each LocalQueue's ClusterQueue, by (namespace, name)."""
    return {key(lq): str((lq.get("spec") or {}).get("clusterQueue") or "") for lq in world.local_queues}


def pending(world: World, cluster_queue: str) -> list[Obj] | None:
    """The ClusterQueue's pending workloads in queue order; None when there is no such ClusterQueue."""
    if not any(cq["metadata"]["name"] == cluster_queue for cq in world.cluster_queues):
        return None
    queues = _local_queues(world)
    mine = [
        wl
        for wl in world.workloads
        if queues.get(
            (wl["metadata"].get("namespace", ""), str((wl.get("spec") or {}).get("queueName") or ""))
        )
        == cluster_queue
        and in_queue(wl)
    ]
    return sorted(mine, key=queue_order)


def _item(wl: Obj, in_local_queue: int, in_cluster_queue: int) -> Obj:
    meta = wl["metadata"]
    owners = [
        {k: ref[k] for k in ("apiVersion", "kind", "name", "uid") if k in ref}
        for ref in meta.get("ownerReferences") or []
    ]
    return {
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "ownerReferences": owners,
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "priority": priority(wl),
        "localQueueName": str((wl.get("spec") or {}).get("queueName") or ""),
        "positionInClusterQueue": in_cluster_queue,
        "positionInLocalQueue": in_local_queue,
    }


def summary(version: str, items: list[Obj]) -> Obj:
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{GROUP}/{version}",
        "metadata": {"creationTimestamp": None},
        "items": items,
    }


def cluster_queue_summary(
    world: World, version: str, cluster_queue: str, limit: int = DEFAULT_LIMIT, offset: int = 0
) -> Obj | None:
    """pendingWorkloadsInCqREST.Get; None: 404."""
    found = pending(world, cluster_queue)
    if found is None:
        return None
    limit, offset = bounded(limit, offset)
    seen: dict[str, int] = {}
    items = []
    for index, wl in enumerate(found[: offset + limit]):
        queue = f"{wl['metadata'].get('namespace', '')}/{(wl.get('spec') or {}).get('queueName') or ''}"
        in_local_queue = seen.get(queue, 0)
        seen[queue] = in_local_queue + 1
        if index >= offset:
            items.append(_item(wl, in_local_queue, index))
    return summary(version, items)


def local_queue_summary(
    world: World, version: str, namespace: str, name: str, limit: int = DEFAULT_LIMIT, offset: int = 0
) -> Obj | None:
    """pendingWorkloadsInLqREST.Get; None: 404."""
    cluster_queue = _local_queues(world).get((namespace, name))
    found = pending(world, cluster_queue) if cluster_queue else None
    if found is None:
        return None
    limit, offset = bounded(limit, offset)
    items: list[Obj] = []
    skipped = 0
    for index, wl in enumerate(found):
        if len(items) >= limit:
            break
        if (
            wl["metadata"].get("namespace", "") == namespace
            and (wl.get("spec") or {}).get("queueName") == name
        ):
            if skipped < offset:
                skipped += 1
            else:
                items.append(_item(wl, len(items) + offset, index))
    return summary(version, items)


def resource_list(version: str) -> Obj:
    """The group version's discovery document (what the aggregator's availability check reads)."""
    resources = [
        {"name": "clusterqueues", "namespaced": False, "kind": "ClusterQueue", "verbs": []},
        {
            "name": "clusterqueues/pendingworkloads",
            "namespaced": False,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
        {"name": "localqueues", "namespaced": True, "kind": "LocalQueue", "verbs": []},
        {
            "name": "localqueues/pendingworkloads",
            "namespaced": True,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
    ]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{version}",
        "resources": resources,
    }
