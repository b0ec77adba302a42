"""Giving TPUs back outside a pass: the finalizer's release of a deleted job's pools, and the sweep of pools
whose job is gone (a crash or a finalizer removed by hand never leaks a slice)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tpujob import kube
from tpujob import status as s
from tpujob.api import InvalidTPUJob, parse_tpujob
from tpujob.api import constants as c
from tpujob.api.spec import NodePoolPolicy
from tpujob.gke import NodePools
from tpujob.reconciler.act import Actions
from tpujob.reconciler.observe import Observer
from tpujob.render import workload as render_workload

log = logging.getLogger(__name__)


class Releaser:
    def __init__(
        self, pools: NodePools | None, observer: Observer, actions: Actions, forget: Callable[[str], None]
    ) -> None:
        self.pools = pools
        self.observer = observer
        self.actions = actions
        self.forget = forget

    def release_pools(self, body: dict[str, Any]) -> list[str]:
        """Start deleting every pool of a job being deleted; the names GKE still has."""
        if self.pools is None:
            return []
        try:
            job = parse_tpujob({**body, "status": None})
        except InvalidTPUJob:
            return []  # nothing was ever created for it
        if job.spec.node_pool.policy != NodePoolPolicy.create:
            return []
        remaining = []
        for view in self.observer.pool_views(job, pods=()):  # a job being deleted: GKE's state alone
            if view.state == s.POOL_MISSING:
                continue
            remaining.append(view.name)
            if view.state != s.POOL_STOPPING:
                self.actions.gke.delete_pool(view.name, body["metadata"]["uid"])
        if not remaining:
            self.forget(body["metadata"]["uid"])
        return remaining

    def release_workload(self, body: dict[str, Any]) -> None:
        """A deleted job's Kueue Workload: its finalizer released and the Workload deleted, as Kueue's
        integrations do when their job goes (jobframework finalizeWorkloads), so its quota is free at once."""
        meta = body["metadata"]
        if not self.observer.kueue.enabled or c.LABEL_QUEUE_NAME not in (meta.get("labels") or {}):
            return
        name = render_workload.workload_name_of(meta["name"], meta["uid"])
        served = self.observer.kueue.served.current
        if served is None:  # Kueue not served: no Workload to let go
            return
        try:
            found = self.actions.api.get_kueue_object(served.version, "workloads", name, meta["namespace"])
            if found is not None:
                found_meta = found["metadata"]
                self.actions.workload.let_go(
                    meta["namespace"],
                    served.version,
                    name,
                    found_meta["resourceVersion"],
                    found_meta.get("finalizers") or [],
                    delete=True,
                )
        except kube.ApiError as error:
            if error.status != 404:
                raise

    def sweep_orphans(self, namespace: str | None = None) -> list[str]:
        """Delete pools labelled as ours whose TPUJob no longer exists.

        Judged against the API server, not the watch's cache (a replica that stood by may hold jobs deleted
        meanwhile): the pools are listed first, then the jobs, so a job whose pool is listed was created
        before the job list and is in it unless it is gone. Then the pools again: a job whose deletion ended
        between the two lists took its pool with it (its finalizer waits for that), so only a pool both lists
        show, and not being deleted, is an orphan. A namespace-scoped operator judges only its namespace's
        pools: it cannot see other jobs.
        """
        if self.pools is None:
            return []
        owned = [p for p in self.pools.owned() if namespace is None or p.namespace == namespace]
        # No UID label: not made by an operator for a job (e.g. from `tpujob render`); not ours to judge.
        judged = [p for p in owned if p.job_uid and p.state != s.POOL_STOPPING]
        if not judged:
            return []
        live_uids = self.actions.live_job_uids(namespace)
        suspects = [p for p in judged if p.job_uid not in live_uids]
        if not suspects:
            return []
        still = {p.name for p in self.pools.owned() if p.state != s.POOL_STOPPING}
        deleted = []
        for pool in suspects:
            if pool.name not in still:
                continue
            # Said once, when GKE took the request: a refusal (an operation running on the pool) is logged
            # at INFO by the pools client and retried at the next sweep.
            if self.actions.gke.delete_pool(pool.name, pool.job_uid):
                log.warning(
                    "node pool %s belongs to no TPUJob (%s/%s): deleting it",
                    pool.name,
                    pool.namespace,
                    pool.job,
                )
                deleted.append(pool.name)
        return deleted
