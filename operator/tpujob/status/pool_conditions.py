"""GKE's node pool condition codes and the operations that recreate a pool's nodes, read in one place: what
the status, the metrics and the GKE client make of a pool's `conditions[]` (container_v1.StatusCondition.Code)
and of its running operations (container_v1.Operation.Type), so they cannot disagree."""

from __future__ import annotations

import re

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


# Which quota, where, in GKE's own words. A pool condition (or its create operation's error) names the quota
# metric and its region: "... [GCE_QUOTA_EXCEEDED]: Instance '...' creation failed: Quota 'METRIC' exceeded.
# Limit: N in region REGION." (the shape of GoogleCloudPlatform/k8s-config-connector#321, a `gcloud container
# node-pools describe`). A create refused at once names a resource, not a region: 'Insufficient
# regional quota to satisfy request: resource "TPUS"' (kubeflow/kubeflow#842). Nothing else marks which quota.
_QUOTA_IN_REGION = re.compile(
    r"Quota '(?P<metric>[^']+)' exceeded\.\s+Limit: (?P<limit>[0-9.]+) in region (?P<region>[a-z0-9-]+)"
)
_QUOTA_RESOURCE = re.compile(r'quota to satisfy request: resource "(?P<metric>[^"]+)"', re.IGNORECASE)
# Said once in a QuotaExceeded message, so the advice is never wrapped twice.
QUOTA_ADVICE_MARK = "TPU quota is regional"


def region_of_zone(zone: str) -> str:
    """us-central1-a -> us-central1; an AI zone too (us-central1-ai1a -> us-central1)."""
    return zone.rsplit("-", 1)[0] if zone.count("-") >= 2 else zone


def quota_advice(message: str, zone: str) -> str:
    """A QuotaExceeded message that says which quota to raise and in which region (as far as GKE's words name
    them), and why no other zone is tried: TPU quota is regional, and every zone a job may use is in the
    cluster's region. GKE's own words follow. Idempotent."""
    if QUOTA_ADVICE_MARK in message:
        return message
    metric, region = "", region_of_zone(zone) if zone else ""
    if found := _QUOTA_IN_REGION.search(message):
        metric, region = found["metric"], found["region"]
    elif found := _QUOTA_RESOURCE.search(message):
        metric = found["metric"]
    what = f"quota {metric}" if metric else "the TPU quota GKE names below"
    where = f" in region {region}" if region else ""
    return (
        f"raise {what}{where} (Google Cloud console, IAM & Admin > Quotas) or free some of it; "
        f"{QUOTA_ADVICE_MARK}, so another zone{where} cannot help and none is tried. GKE: {message}"
    )


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


__all__ = [
    "QUOTA_ADVICE_MARK",
    "capacity_shortage",
    "node_recreation",
    "pool_error_reason",
    "quota_advice",
    "recreates_nodes",
    "region_of_zone",
]
