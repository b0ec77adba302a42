"""GKE's part of a pass's acts: the pools a decision creates (each with its upgrade exclusion while GKE
takes the field) and deletes, each call counted in the metrics the same way."""

from __future__ import annotations

import logging
from typing import Any

from tpujob import metrics
from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.gke import NodePools, refuses_upgrade_shield
from tpujob.render import Cluster
from tpujob.render import pools as render_pools

log = logging.getLogger(__name__)


class PoolActions:
    def __init__(self, pools: NodePools | None) -> None:
        self.pools = pools
        # GKE's words the first time it refused a pool's upgrade exclusion (and took the pool without it):
        # the cluster does not take the field, so this process asks without it from then on.
        self.upgrade_shield_refused: str | None = None

    def create_all(self, job: TPUJob, decision: s.Decision, cluster: Cluster, applied: s.Applied) -> None:
        """The decided pools, each asked for once (after the job's finalizer: Actions.apply)."""
        for slice_index in decision.create_pools:
            request = render_pools.node_pool(
                job,
                cluster,
                slice_index,
                zone=decision.status.zone,
                placement=decision.placement.get(slice_index),
            )
            operation, error = self.create_pool_shielded(request, slice_index, applied)
            if error is not None:
                applied.refused[slice_index] = error
            else:
                applied.operations[slice_index] = operation

    def delete_all(self, decision: s.Decision, job_uid: str, applied: s.Applied) -> None:
        """The decided pools' deletes: those GKE took are stopping; any it did not is asked again."""
        for name in decision.delete_pools if self.pools is not None else ():
            if self.delete_pool(name, job_uid):
                applied.stopping.add(name)
            else:
                applied.delete_refused = True

    def create_pool_shielded(
        self, request: dict[str, Any], slice_index: int, applied: s.Applied
    ) -> tuple[str, s.GKEError | None]:
        """A pool with its upgrade exclusion, as long as GKE takes the field. A refusal that names it is asked
        once more without it; if GKE then takes the pool, the exclusion is what it refused, and from then on
        this process asks without it (one create per pool, not two). Any other refusal stands as it is."""
        bare = render_pools.without_upgrade_shield(request)
        if bare is not None and self.upgrade_shield_refused is not None:
            operation, error = self.create_pool(bare)
            if error is None:
                applied.unshielded[slice_index] = self.upgrade_shield_refused
            return operation, error
        operation, error = self.create_pool(request)
        if error is None or bare is None or not refuses_upgrade_shield(error):
            return operation, error
        operation, second = self.create_pool(bare)
        if second is None:
            self.upgrade_shield_refused = error.message
            applied.unshielded[slice_index] = error.message
            metrics.UPGRADE_SHIELD_REFUSED.inc()
            log.warning(
                "node pool %s: GKE refused its upgrade exclusion (%s); created without it, so GKE may "
                "auto-upgrade it while the job runs; this operator asks without it from now on "
                "(TPUJOB_GKE_UPGRADE_SHIELD=false stops asking at all)",
                request["name"],
                error.message,
            )
        return operation, second

    def create_pool(self, request: dict[str, Any]) -> tuple[str, s.GKEError | None]:
        """Ask GKE for a pool: (its operation's name, GKE's refusal or None)."""
        assert self.pools is not None
        operation, error = self.pools.create(request)
        metrics.record_pool_call("create", error)
        return operation, error

    def delete_pool(self, name: str, job_uid: str) -> bool:
        """Ask GKE to delete a pool of the job `job_uid` (only if its job-uid label says so); whether GKE
        took the request (or there was nothing of the job's to delete)."""
        assert self.pools is not None
        error = self.pools.delete(name, job_uid)
        metrics.record_pool_call("delete", error)
        return error is None
