"""Where a queued job stands in its ClusterQueue, from Kueue's visibility API. Pure.

Kueue serves its pending workloads through an aggregated API, visibility.kueue.x-k8s.io (v1beta1 in v0.14;
v1beta1 and v1beta2 in v0.17 and v0.19: apis/visibility/, pkg/visibility/server.go): GET
clusterqueues/{name}/pendingworkloads answers a PendingWorkloadsSummary whose items are the ClusterQueue's
pending workloads in the order it will consider them (pkg/visibility/storage/pending_workloads_cq.go Get, from
the queue manager's PendingWorkloadsInfo), each with positionInClusterQueue and positionInLocalQueue, counted
from 0 (apis/visibility/v1beta2/types.go PendingWorkload), at most `limit` of them (1000 by default:
constants.DefaultPendingWorkloadsLimit). An aggregated API is another server's answer: what does not have that
shape reads as no position, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpujob.api import constants as c

VISIBILITY_GROUP = c.KUEUE_VISIBILITY_GROUP
# The versions the operator reads, preferred first (PendingWorkloadsSummary is the same in both).
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")


@dataclass(frozen=True)
class QueuePosition:
    """Kueue's positions, from 0 (0: the next the ClusterQueue considers)."""

    in_cluster_queue: int
    in_local_queue: int


def visibility_version(group: Mapping[str, Any] | None) -> str | None:
    """The visibility API version to read, from the group's discovery document; None when not served."""
    served = {str(v.get("version")) for v in (group or {}).get("versions") or () if isinstance(v, Mapping)}
    return next((v for v in VISIBILITY_VERSIONS if v in served), None)


def _position(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def positions(summary: Any) -> dict[tuple[str, str], QueuePosition]:
    """Each pending workload's positions by (namespace, name), from a PendingWorkloadsSummary; items that are
    not of its shape are left out."""
    items = summary.get("items") if isinstance(summary, Mapping) else None
    found: dict[tuple[str, str], QueuePosition] = {}
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping) or not isinstance(item.get("metadata"), Mapping):
            continue
        meta = item["metadata"]
        name, namespace = meta.get("name"), meta.get("namespace")
        in_cq = _position(item.get("positionInClusterQueue"))
        in_lq = _position(item.get("positionInLocalQueue"))
        if isinstance(name, str) and isinstance(namespace, str) and in_cq is not None and in_lq is not None:
            found[(namespace, name)] = QueuePosition(in_cq, in_lq)
    return found
