"""The periodic loops: a resync pass for every job (and maintenance notices), and the orphan sweep."""

from __future__ import annotations

import asyncio
import logging

from tpujob.handlers.passes import Runtime, reconcile

log = logging.getLogger(__name__)

RESYNC_CONCURRENCY = 8


async def resync_forever(runtime: Runtime) -> None:
    """A safety net: every job gets a pass at least every resync interval, so a lost watch event or a
    lost requeue is made good. One loop for all jobs, a few passes at a time."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(runtime.config.resync_seconds)
        if (
            runtime.config.namespace is None
        ):  # nodes are cluster-scoped: a namespaced operator cannot read them
            try:
                await loop.run_in_executor(None, runtime.reconciler.refresh_maintenance)
            except Exception:
                log.exception("reading maintenance notices failed; will retry")
        keys = list(runtime.indexes.jobs)
        for start in range(0, len(keys), RESYNC_CONCURRENCY):
            batch = keys[start : start + RESYNC_CONCURRENCY]
            results = await asyncio.gather(
                *(reconcile(runtime, ns, name) for ns, name in batch),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, Exception):
                    log.error("resync pass failed: %r", result)


async def sweep_forever(runtime: Runtime) -> None:
    """Read the cluster (GetCluster), then delete node pools whose TPUJob is gone: at start (after a crash)
    and then periodically."""
    loop = asyncio.get_running_loop()
    jobs = runtime.indexes.jobs
    while True:
        try:
            await loop.run_in_executor(None, runtime.reconciler.check_cluster)
        except Exception:
            log.exception("reading the GKE cluster failed; will retry")
        live = {body["metadata"]["uid"] for key in list(jobs) for body in jobs.get(key, [])}
        try:
            deleted = await loop.run_in_executor(
                None, runtime.reconciler.sweep_orphans, live, runtime.config.namespace
            )
            if deleted:
                log.warning("orphan sweep deleted node pools: %s", ", ".join(deleted))
        except Exception:
            log.exception("orphan sweep failed; will retry")
        await asyncio.sleep(runtime.config.sweep_seconds)
