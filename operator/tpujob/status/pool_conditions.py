"""GKE's node pool condition codes and the operations that recreate a pool's nodes, read in one place: what
the status, the metrics and the GKE client make of a pool's `conditions[]` (container_v1.StatusCondition.Code)
and of its running operations (container_v1.Operation.Type), so they cannot disagree."""

from __future__ import annotations

from tpujob.api.status import Reason

# The codes that mean "no capacity or quota now": GKE retries them itself while the create operation runs.
_CAPACITY_CONDITIONS = {"GCE_STOCKOUT": Reason.STOCKOUT, "GCE_QUOTA_EXCEEDED": Reason.QUOTA}


def capacity_shortage(condition: str | None) -> str | None:
    """`Stockout` or `QuotaExceeded` for a code GKE retries itself while the create runs; None otherwise."""
    return _CAPACITY_CONDITIONS.get(condition or "")


def pool_error_reason(condition: str | None) -> str:
    """Why a pool is in ERROR, from its condition code: capacity or quota, else the pool is broken
    (`NodePoolLost`). The status' reason and `tpujob_gke_errors_total`'s label both come from here."""
    return capacity_shortage(condition) or Reason.POOL_LOST


# Operations that drain and recreate a TPU slice's hosts (container_v1 Operation.Type): UPGRADE_NODES for
# every node upgrade, GKE's automatic ones included ("AUTO_UPGRADE_NODES: Unused. Automatic node upgrade uses
# UPGRADE_NODES"), and AUTO_REPAIR_NODES ("A problem has been detected with nodes and they are being
# repaired"); a multi-host slice is recreated whole ("If a node in a multi-host TPU slice needs to be
# repaired, GKE shuts down all TPU VMs in the slice": GKE "About TPUs in GKE").
_NODE_RECREATIONS = {
    "UPGRADE_NODES": Reason.NODE_UPGRADE,
    "AUTO_UPGRADE_NODES": Reason.NODE_UPGRADE,
    "AUTO_REPAIR_NODES": Reason.NODE_REPAIR,
}


def node_recreation(operation_type: str | None) -> str | None:
    """`NodeUpgrade` or `NodeRepair` for a GKE operation type that recreates a pool's nodes, else None."""
    return _NODE_RECREATIONS.get(operation_type or "")


def recreates_nodes(operation_type: str | None) -> bool:
    return node_recreation(operation_type) is not None


__all__ = ["capacity_shortage", "node_recreation", "pool_error_reason", "recreates_nodes"]
