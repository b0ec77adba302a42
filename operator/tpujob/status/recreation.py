"""GKE working on a slice's nodes: a node upgrade (UPGRADE_NODES) or a node auto-repair (AUTO_REPAIR_NODES),
each an operation on the pool (or a node under it) while the pool is RECONCILING, as GKE's operations list
reports it. Decided from what GKE and the pods say, never from the operation's type alone:

- UPGRADE_NODES "includes most forms of updates to node pools ... The nodes are generally still usable during
  this operation" (container_v1 Operation.Type): a metadata-only update runs under it too. So an operation on
  the pool restarts the job only when the slice's workers were actually disrupted: a worker evicted or being
  deleted (a drain), lost with its node, or failed for its node's sake. A worker that failed on its own (an
  exit code, its node intact) is the application's failure, judged as any other, while GKE updates the pool.
- A disrupted slice whose pool has such an operation running, or one that ended after the current attempt
  began (a repair that ended before the operator looked: then only workers drained away count, not
  workers failed on nodes still there), restarts as NodeUpgrade or NodeRepair: the
  infrastructure's doing, never spending maxRestarts. Every host of a multi-host slice goes with one repair
  ("If a node in a multi-host TPU slice needs to be repaired, GKE shuts down all TPU VMs in the slice": GKE
  "About TPUs in GKE").
- Unless the job restarted for GKE's work, a pool RECONCILING under such an operation holds usable nodes:
  the job runs on, or its new attempt starts there (pools.pools_ready). Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from tpujob.api.status import Phase, Reason, TPUJobStatus, WorkerCounts
from tpujob.status.builder import Builder, begin_restart
from tpujob.status.model import PodView, PoolView, is_current, is_infrastructure_failure
from tpujob.status.pool_conditions import node_recreation

_DOING: dict[str, str] = {
    Reason.NODE_UPGRADE: "updates (or upgrades)",
    Reason.NODE_REPAIR: "repairs a host of",
}
_DISRUPTION_CONDITION = ("DisruptionTarget", "True")


def describe(pool: PoolView) -> tuple[str, str] | None:
    """(NodeUpgrade or NodeRepair, what GKE does) for a pool with a node-recreating operation, else None."""
    reason = node_recreation(pool.disruption)
    if reason is None:
        return None
    when = "" if pool.disruption_running else ", ended since the attempt began"
    return reason, (
        f"GKE {_DOING[reason]} node pool {pool.name} ({pool.disruption} operation "
        f"{pool.disruption_operation}{when})"
    )


def slice_disrupted(b: Builder, *, failed_counts: bool = True) -> bool:
    """A worker of the current attempt evicted or being deleted, gone since the last status counted it (pods
    created but not yet seen by the watch are not gone), or (`failed_counts`) failed for its node's sake
    (node shutdown, eviction: is_infrastructure_failure, or a DisruptionTarget condition)."""
    return workers_disrupted(
        b.status, b.previous_workers, b.observed.pods, b.observed.pods_in_flight, failed_counts=failed_counts
    )


def workers_disrupted(
    status: TPUJobStatus,
    counted: WorkerCounts,
    pods: Iterable[PodView],
    in_flight: Collection[str],
    *,
    failed_counts: bool = True,
) -> bool:
    """slice_disrupted, before a pass has a Builder: `counted` are the workers the last status counted. The
    observer asks it before reading GKE's operations list, which only a disrupted slice needs."""
    current = [p for p in pods if is_current(status, p)]
    for pod in current:
        if pod.deleting:
            return True
        node_failed = is_infrastructure_failure(pod) or _DISRUPTION_CONDITION in pod.conditions
        if failed_counts and pod.phase == "Failed" and node_failed:
            return True
    live = sum(1 for p in current if not p.deleting)
    return live + len(in_flight) < counted.pending + counted.running + counted.succeeded


def nodes_usable(b: Builder) -> bool:
    """Whether a pool GKE works on (RECONCILING) still serves the job: yes, unless the job restarted for
    GKE's upgrade or repair (and waits for it to end), or its running workers were just disrupted. A pod
    placed on a node an upgrade drains later is evicted, and the job restarts then as NodeUpgrade."""
    if b.status.reason in (Reason.NODE_UPGRADE, Reason.NODE_REPAIR):
        return False
    return b.status.phase not in (Phase.STARTING, Phase.RUNNING) or not slice_disrupted(b)


def restart_for_recreation(b: Builder) -> bool:
    """A starting or running job whose slice's workers GKE's upgrade or repair disrupted restarts now; the new
    attempt's pods wait for the pool to be RUNNING again. True when it restarted."""
    if b.status.phase not in (Phase.STARTING, Phase.RUNNING) or b.observed.pools is None:
        return False
    pool = next((p for p in b.observed.pools if describe(p) is not None), None)
    found = describe(pool) if pool is not None else None
    if pool is None or found is None:
        return False
    # An operation that still runs explains any disruption of the workers; one that has ended explains
    # workers drained away (evicted, deleted, gone), not workers that failed on nodes still there (a Spot
    # reclaim or a node shutdown since: judged as before, Preempted or NodeLost).
    if not slice_disrupted(b, failed_counts=pool.disruption_running):
        return False
    reason, doing = found
    begin_restart(b, reason, f"{doing}: the slice's workers were disrupted", infrastructure=True)
    return True
