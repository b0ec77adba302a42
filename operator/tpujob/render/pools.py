"""A job's GKE node pools, as GKE REST JSON (camelCase, as `container_v1.NodePool.from_json` reads them): one
per slice, labelled with its job, tainted for the job's pods alone, managed as the capacity mode asks.
Pure and deterministic, like the rest of render."""

from __future__ import annotations

from typing import Any

from tpujob import tpu
from tpujob.api import constants as c
from tpujob.api.job import TPUJob
from tpujob.api.spec import CapacityMode, NodePoolPolicy
from tpujob.render import naming
from tpujob.render.cluster import Cluster, slice_shape
from tpujob.render.placement import Placement, gke_taint


def pool_ownership_labels(job: TPUJob, slice_index: int) -> dict[str, str]:
    """GCE labels that mark a pool as ours, so a sweep can find pools whose job is gone."""
    labels = {
        c.POOL_LABEL_MANAGED_BY: c.MANAGED_BY,
        c.POOL_LABEL_NAMESPACE: job.metadata.namespace[:63],
        c.POOL_LABEL_JOB: job.metadata.name[:63],
        c.POOL_LABEL_SLICE: str(slice_index),
    }
    if job.metadata.uid:
        labels[c.POOL_LABEL_JOB_UID] = job.metadata.uid
    return labels


def job_zones(job: TPUJob, cluster: Cluster) -> list[str]:
    """The zones a job's pools may go to, in the order to try them."""
    if job.spec.capacity.zones:
        return list(job.spec.capacity.zones)
    if job.spec.node_pool.zone:
        return [job.spec.node_pool.zone]
    # The operator's zones that offer the job's TPU type (validation refuses a job none of them offers);
    # all of them when none does, for GKE to name what it refuses (a region set as the zone, ...).
    return tpu.zones_offering(job.spec.tpu.type, cluster.zones) or list(cluster.zones)


def pool_management(mode: CapacityMode | str) -> dict[str, bool]:
    """Auto-upgrade always on: clusters on a release channel (the default for new clusters) refuse a pool
    without it with HTTP 400 "Auto_upgrade cannot be false when release_channel REGULAR is set" ("Node
    auto-upgrade defaults to true and cannot be disabled":
    https://cloud.google.com/kubernetes-engine/docs/reference/rest/Shared.Types/ReleaseChannel); a pool with
    it on is accepted with or without a channel. Running slices are shielded from upgrades by the pool's own
    maintenance exclusion instead (UPGRADE_SHIELD). Auto-repair on, except for flex-start (xpk's --flex pools
    are made with --no-enable-autorepair): a repair recreates the whole slice, and the job restarts as
    NodeRepair without spending maxRestarts."""
    return {"autoUpgrade": True, "autoRepair": mode != CapacityMode.flex_start}


# The pool's own maintenance exclusion: GKE does not auto-upgrade it "until the node pool version's end of
# support date" (NodePool.maintenancePolicy.exclusionUntilEndOfSupport; start and end are output only).
# Chosen over a cluster exclusion (maintenancePolicy.window.maintenanceExclusions, NO_MINOR_OR_NODE_UPGRADES):
# it shields only the pools the operator makes, exactly while they exist (a job's pools go when it ends, so
# "until end of support" means "while the job runs"), needs no permission to update the cluster, and leaves
# the cluster's other pools and its own policy to their owners. It does not stop node auto-repair, host
# maintenance, or the upgrade GKE forces at the version's end of support: those restart the job as
# NodeRepair, Maintenance or NodeUpgrade, none of them counted.
UPGRADE_SHIELD: dict[str, Any] = {"exclusionUntilEndOfSupport": {"enabled": True}}


def without_upgrade_shield(pool: dict[str, Any]) -> dict[str, Any] | None:
    """The pool request without its upgrade exclusion; None when it carries none (nothing to ask again)."""
    if "maintenancePolicy" not in pool:
        return None
    return {key: value for key, value in pool.items() if key != "maintenancePolicy"}


def node_pool(
    job: TPUJob,
    cluster: Cluster,
    slice_index: int,
    zone: str | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """One slice's node pool as the GKE REST API's NodePool, in `zone` (default: the job's first zone); with
    a Kueue admission's `placement`, its nodes carry the assigned flavors' node labels and taints."""
    shape = slice_shape(job)
    capacity = job.spec.capacity
    labels = pool_ownership_labels(job, slice_index)
    pool_spec = job.spec.node_pool
    config: dict[str, Any] = {
        "machineType": shape.machine_type.name,
        # Node labels and GCE resource labels: ownership on the nodes, and cost attribution in billing.
        "labels": labels,
        "resourceLabels": labels,
        # Node hygiene as xpk makes TPU pools (AI-Hypercomputer/xpk src/xpk/core/nodepool.py: --enable-gvnic,
        # --scopes=storage-full,gke-default,cloud-platform, --max-pods-per-node 15, and
        # --workload-metadata=GKE_METADATA with Workload Identity). Scopes: see DEFAULT_OAUTH_SCOPES; they
        # and the nodes' identity are the operator's settings, so no job widens what its nodes may do.
        "oauthScopes": list(cluster.node_oauth_scopes),
    }
    if cluster.node_service_account:
        config["serviceAccount"] = cluster.node_service_account
    # The job's own taint: only its pods tolerate it, so no other job (policy: existing, any namespace) is
    # scheduled onto the TPUs it pays for. GKE puts a pool's taints on every node it makes
    # (container_v1 NodeConfig.taints: "List of kubernetes taints to be applied to each node").
    taints = [gke_taint(own_taint(job))]
    if placement is not None and (placement.node_labels or placement.node_taints):
        # Kubernetes labels on the nodes only: a flavor's label keys need not be valid GCE resource labels.
        config["labels"] = {**placement.node_labels, **labels}
        taints += [gke_taint(taint) for taint in placement.node_taints]
    config["taints"] = taints
    if pool_spec.gvnic:
        # gVNIC: the faster NIC for DCN traffic between slices (xpk enables it on every pool it makes).
        config["gvnic"] = {"enabled": True}
    if cluster.workload_identity:
        # Pods reach Google APIs as their Kubernetes ServiceAccount's Google identity (Workload Identity).
        config["workloadMetadataConfig"] = {"mode": "GKE_METADATA"}
    if capacity.mode == CapacityMode.spot:
        config["spot"] = True
    elif capacity.mode == CapacityMode.flex_start:
        # As xpk's --flex makes it: flex-start VMs, no reservation (and see the pool's autoscaling below).
        config["flexStart"] = True
        config["reservationAffinity"] = {"consumeReservationType": "NO_RESERVATION"}
        if capacity.max_run_duration_seconds is not None:
            config["maxRunDuration"] = f"{capacity.max_run_duration_seconds}s"
    elif capacity.mode == CapacityMode.reservation:
        config["reservationAffinity"] = {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [capacity.reservation],
        }
    pool: dict[str, Any] = {
        "name": naming.node_pool_name(job, slice_index),
        "initialNodeCount": shape.hosts,
        "locations": [zone or next(iter(job_zones(job, cluster)), "")],
        "config": config,
        # Each node otherwise reserves a /24 of the cluster's pod range (110 pods): large slices exhaust it.
        # int64 is a JSON string in GKE's REST API.
        "maxPodsConstraint": {"maxPodsPerNode": str(pool_spec.max_pods_per_node)},
        "management": pool_management(capacity.mode),
    }
    if cluster.upgrade_shield and capacity.mode != CapacityMode.flex_start:
        # Flex-start pools upgrade by their own strategy (container_v1 NodePoolUpdateStrategy.SHORT_LIVED:
        # "the dedicated upgrade strategy for QueuedProvisioning and flex start node pools scaled up only by
        # enqueueing to the Dynamic Workload Scheduler"), and their VMs live at most 7 days: the exclusion is
        # moot there, and no source shows GKE taking it on them.
        pool["maintenancePolicy"] = UPGRADE_SHIELD
    if capacity.mode == CapacityMode.flex_start:
        # Created empty; GKE brings the whole slice up when its pods wait, from 0 to every host at once
        # (xpk --flex: --enable-autoscaling --location-policy=ANY --num-nodes=0 --max-nodes=<hosts>
        # --no-enable-autorepair).
        pool["initialNodeCount"] = 0
        pool["autoscaling"] = {
            "enabled": True,
            "minNodeCount": 0,
            "maxNodeCount": shape.hosts,
            "locationPolicy": "ANY",
        }
    # A single-host pool must not carry a topology; a multi-host pool is one compact slice.
    if shape.multi_host:
        if shape.generation.multi_host_needs_workload_policy:
            pool["placementPolicy"] = {"policyName": job.spec.node_pool.workload_policy}
        else:
            pool["placementPolicy"] = {"type": "COMPACT", "tpuTopology": shape.topology}
    return pool


def node_pools(job: TPUJob, cluster: Cluster) -> list[dict[str, Any]]:
    if job.spec.node_pool.policy != NodePoolPolicy.create:
        return []
    return [node_pool(job, cluster, s) for s in range(job.spec.tpu.slices)]


def own_taint(job: TPUJob) -> dict[str, str]:
    """The taint on the nodes of the job's own pools (value: its UID; pod_validation refuses tpujob.dev/*
    tolerations in spec.pod, so only the operator adds it, to this job's pods)."""
    return {"key": c.POOL_TAINT_KEY, "value": job.metadata.uid or "", "effect": "NoSchedule"}
