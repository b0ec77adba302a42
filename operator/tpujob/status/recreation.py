"""GKE recreating a slice's nodes: a node upgrade or a node auto-repair, each a running operation on the pool
(UPGRADE_NODES or AUTO_REPAIR_NODES) while the pool is RECONCILING. Every host of a multi-host slice goes
with it, so the job restarts at once, as NodeUpgrade or NodeRepair: the infrastructure's doing, never spending
maxRestarts, and not judged by the failurePolicy (whose rules are for what the workers did). Pure."""

from __future__ import annotations

from tpujob.api.status import Phase, Reason
from tpujob.status.builder import Builder, begin_restart
from tpujob.status.model import PoolView
from tpujob.status.pool_conditions import node_recreation

_DOING: dict[str, str] = {Reason.NODE_UPGRADE: "upgrades", Reason.NODE_REPAIR: "repairs a host of"}


def describe(pool: PoolView) -> tuple[str, str] | None:
    """(NodeUpgrade or NodeRepair, what GKE does) for a pool whose nodes GKE recreates, else None."""
    reason = node_recreation(pool.disruption)
    if reason is None:
        return None
    return reason, (
        f"GKE {_DOING[reason]} node pool {pool.name} ({pool.disruption} operation "
        f"{pool.disruption_operation}): every host of the slice is drained and recreated"
    )


def restart_for_recreation(b: Builder) -> bool:
    """A starting or running job whose slice GKE upgrades or repairs restarts now (its pods are being evicted
    or are gone); the new attempt's pods wait for the pool to be RUNNING again. True when it restarted."""
    if b.status.phase not in (Phase.STARTING, Phase.RUNNING) or b.observed.pools is None:
        return False
    found = next((d for p in b.observed.pools if (d := describe(p)) is not None), None)
    if found is None:
        return False
    begin_restart(b, found[0], found[1], infrastructure=True)
    return True
