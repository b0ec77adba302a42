"""Node upgrades and node auto-repair of TPU slice pools, as GKE carries them out.

What GKE documents, and where it is encoded here:
- A maintenance exclusion forbids automatic upgrades while it is active; its scope says which: NO_UPGRADES
  all of them, NO_MINOR_OR_NODE_UPGRADES minor ones and every node pool upgrade, NO_MINOR_UPGRADES minor ones
  only (container_v1 MaintenanceExclusionOptions.Scope). A pool whose `maintenancePolicy.
  exclusionUntilEndOfSupport.enabled` is set "will not be automatically upgraded by GKE until the node pool
  version's end of support date" (the API field, as pulumi-gcp's docs generated from terraform's
  google_container_node_pool describe it).
  `upgrade_round` skips what they shield, as GKE's auto-upgrade would.
- Node auto-repair does not respect maintenance windows or exclusions (GKE "Maintenance windows and
  exclusions": automatic repairs are maintenance that ignores them); a node NotReady for about 10 minutes
  is drained and recreated (GKE "Auto-repair nodes"). "If a node in a multi-host TPU slice needs to be
  repaired, GKE shuts down all TPU VMs in the slice, forcing all Kubernetes Pods in the workload to be
  evicted" and brings the slice back whole (GKE "About TPUs in GKE", multi-host slice node pools).
- While GKE works on a pool it is RECONCILING ("some work is actively being done on the node pool, such as
  upgrading node software") and the work is an operation: UPGRADE_NODES for upgrades, auto-upgrades
  included ("AUTO_UPGRADE_NODES: Unused. Automatic node upgrade uses UPGRADE_NODES"), AUTO_REPAIR_NODES for
  repairs, whose target may be the repaired node under the pool (container_v1 Operation.Type, target_link).
- A drain cordons the node and evicts its pods through the Eviction API (as `kubectl drain`; the API server
  marks each pod DisruptionTarget, reason EvictionByEvictionAPI); GKE waits for the drain (an hour for a
  repair) before the VM goes.

- A node pool update that changes only metadata (labels, say) runs as UPGRADE_NODES too: the type "includes
  most forms of updates to node pools ... The nodes are generally still usable during this operation"
  (container_v1 Operation.Type). `update_metadata` plays one: the operation runs, the pool is RECONCILING,
  the nodes and their pods are left alone, then the operation is DONE and the pool RUNNING. That the pool
  reads RECONCILING meanwhile is assumed (NodePool.Status RECONCILING: "Some work is actively being done on
  the node pool"), as is how long it takes.

Not documented, assumed (README): an upgrade of a multi-host slice recreates its hosts together, as a repair
does (the slice is one atomic unit), and takes as long as provisioning it; a pod a PodDisruptionBudget keeps
is deleted once the drain's wait (DRAIN_SECONDS here, real seconds) ends.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable

from google.cloud import container_v1
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tpujob_sandbox.gke.nodepools import PROVISIONING_SECONDS
from tpujob_sandbox.gke.state import ClusterState

log = logging.getLogger(__name__)

Scope = container_v1.MaintenanceExclusionOptions.Scope
OperationType = container_v1.Operation.Type
# GKE time the slice is away while its VMs are recreated (not documented: README).
RECREATE_SECONDS = PROVISIONING_SECONDS
# Real seconds a drain waits for evicted pods to end before deleting what is left (GKE waits an hour).
DRAIN_SECONDS = 60.0


def blocking_exclusion(policy: container_v1.MaintenancePolicy, now: dt.datetime, *, minor: bool) -> str:
    """The name of the cluster's maintenance exclusion that forbids a node upgrade at `now` ("" when none
    does): NO_UPGRADES and NO_MINOR_OR_NODE_UPGRADES forbid every node upgrade, NO_MINOR_UPGRADES a minor
    one."""
    forbidding = {Scope.NO_UPGRADES, Scope.NO_MINOR_OR_NODE_UPGRADES} | (
        {Scope.NO_MINOR_UPGRADES} if minor else set()
    )
    for name, window in policy.window.maintenance_exclusions.items():
        start, end = window.start_time, window.end_time
        if start <= now < end and window.maintenance_exclusion_options.scope in forbidding:
            return name
    return ""


def shielded(pool: container_v1.NodePool) -> bool:
    """The pool's own exclusion from automatic upgrades (until its version's end of support)."""
    return bool(pool.maintenance_policy.exclusion_until_end_of_support.enabled)


class NodeUpgrades:
    """GKE's upgrade rounds and auto-repairs of a cluster's pools (test controls on GkeSimulator)."""

    def __init__(self, core: k8s.CoreV1Api, *, later: Callable[..., None]) -> None:
        self.core = core
        self._later = later  # (gke_seconds, function, *args)

    def upgrade_round(
        self,
        state: ClusterState,
        *,
        minor: bool = False,
        end_of_support: bool = False,
        now: dt.datetime | None = None,
    ) -> list[str]:
        """GKE's automatic node upgrade reaches the cluster (as in an open maintenance window): every RUNNING
        pool with nodes that no exclusion shields is upgraded. `end_of_support`: the pools' version reached
        its end of support, where every exclusion ends (a pool's "until end of support", and no cluster
        exclusion may outlast it), so none shields. Returns the pools it started upgrading."""
        now = now or dt.datetime.now(dt.UTC)
        exclusion = (
            "" if end_of_support else blocking_exclusion(state.model.maintenance_policy, now, minor=minor)
        )
        if exclusion:
            log.info("gke-sim: node upgrades of %s held by exclusion %s", state.model.name, exclusion)
            return []
        started = []
        for name, pool in state.pools.all().items():
            running = pool.status == container_v1.NodePool.Status.RUNNING
            held = shielded(pool) and not end_of_support
            if not running or held or not state.pools.node_names(name):
                continue
            self._recreate(state, name, OperationType.UPGRADE_NODES)
            started.append(name)
        return started

    def update_metadata(self, state: ClusterState, pool: str, gke_seconds: float) -> str:
        """A metadata-only update of `pool`: UPGRADE_NODES, RECONCILING, no node touched; its operation."""
        operation = state.operations.start(OperationType.UPGRADE_NODES, pool)
        state.pools.set_reconciling(pool, True)
        self._later(gke_seconds, self._finish_update, state, pool, operation.name)
        return str(operation.name)

    def _finish_update(self, state: ClusterState, pool: str, operation: str) -> None:
        state.pools.set_reconciling(pool, False)
        state.operations.finish(operation)

    def auto_repair(self, state: ClusterState, pool: str, node: str = "") -> None:
        """GKE repairs `node` (default: the pool's first) of a slice: the whole slice is drained and
        recreated, whatever the maintenance policies say."""
        nodes = state.pools.node_names(pool)
        self._recreate(state, pool, OperationType.AUTO_REPAIR_NODES, node or (nodes[0] if nodes else ""))

    def _recreate(self, state: ClusterState, pool: str, kind: int, node: str = "") -> None:
        # The operation and RECONCILING come first: a client that sees the pods go finds GKE's reason.
        operation = state.operations.start(kind, pool, node)
        state.pools.set_reconciling(pool, True)
        nodes = state.pools.node_names(pool)
        self._later(0.0, self._drain_and_recreate, state, pool, nodes, operation.name)

    def _drain_and_recreate(self, state: ClusterState, pool: str, nodes: list[str], operation: str) -> None:
        for node in nodes:
            self._cordon(node)
        pods = [p for node in nodes for p in self._pods_on(node)]
        for pod in pods:
            self._evict(pod)
        deadline = time.monotonic() + DRAIN_SECONDS
        while any(self._pods_on(node) for node in nodes) and time.monotonic() < deadline:
            time.sleep(0.05)
        for node in nodes:
            for pod in self._pods_on(node):  # the drain's wait is over
                self._delete(pod)
            state.pools.nodes.remove(node)
        self._later(RECREATE_SECONDS, self._finish, state, pool, operation)

    def _finish(self, state: ClusterState, pool: str, operation: str) -> None:
        state.pools.restore_nodes(pool)
        state.pools.set_reconciling(pool, False)
        state.operations.finish(operation)

    # --- the Kubernetes side of a drain -------------------------------------------------------------

    def _cordon(self, node: str) -> None:
        try:
            self.core.patch_node(node, {"spec": {"unschedulable": True}})
        except ApiException as error:
            if error.status != 404:
                raise

    def _pods_on(self, node: str) -> list[k8s.V1Pod]:
        return list(self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items)

    def _evict(self, pod: k8s.V1Pod) -> None:
        meta = pod.metadata
        body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=meta.name, namespace=meta.namespace))
        try:
            self.core.create_namespaced_pod_eviction(meta.name, meta.namespace, body)
        except ApiException as error:
            if error.status not in (404, 429):  # 429: a PodDisruptionBudget holds it; the drain waits
                raise

    def _delete(self, pod: k8s.V1Pod) -> None:
        try:
            self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
