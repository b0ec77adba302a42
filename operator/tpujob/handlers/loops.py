"""The periodic loops: which replica is active (peering), a resync pass for every job (and maintenance
notices), and the orphan sweep. A standby replica runs none of the work."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable

from tpujob import metrics, peering
from tpujob.handlers.passes import Runtime, reconcile, request_pass

log = logging.getLogger(__name__)

RESYNC_CONCURRENCY = 8


async def lead_forever(runtime: Runtime) -> None:
    """Read the peering object a few times per lifetime: this replica works while no live peer outranks
    it, as kopf's own watches do. Becoming active, it looks at every job at once."""
    name, api = runtime.config.peering, runtime.api
    if name is None or api is None:
        return
    loop = asyncio.get_running_loop()
    period = runtime.config.peering_lifetime_seconds / 5
    while True:
        try:
            found = await loop.run_in_executor(None, api.get_peering, name, runtime.config.namespace)
            peers = (found or {}).get("status") or {}
            active = found is not None and peering.leads(
                peers, runtime.identity, runtime.priority, dt.datetime.now(dt.UTC)
            )
        except Exception:
            log.exception("reading the peering object %s failed; will retry", name)
            active = runtime.active
        if active != runtime.active:
            log.warning("replica %s is now %s", runtime.identity, "active" if active else "standby")
            runtime.active = active
            metrics.OPERATOR_ACTIVE.set(1 if active else 0)
            if active:
                for namespace, job in list(runtime.indexes.jobs):
                    request_pass(runtime, namespace, job)
        await asyncio.sleep(period)


async def resync_forever(runtime: Runtime) -> None:
    """A safety net: every job gets a pass at least every resync interval, so a lost watch event or a
    lost requeue is made good. One loop for all jobs, a few passes at a time; a standby skips its rounds."""
    while True:
        await asyncio.sleep(runtime.config.resync_seconds)
        if not runtime.active:
            continue
        await resync_round(runtime)


async def resync_round(
    runtime: Runtime,
    pass_for: Callable[[Runtime, str, str], Awaitable[None]] = reconcile,
    concurrency: int = RESYNC_CONCURRENCY,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """One round: the maintenance notices (cluster-wide operator only), then a pass for every job known at
    the round's start, `concurrency` at a time. Records how long the whole round took and how many jobs it
    covered (tpujob_resync_round_seconds / _jobs) and when it ended."""
    started = clock()
    if runtime.config.namespace is None:  # nodes are cluster-scoped: a namespaced operator cannot read them
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, runtime.reconciler.refresh_maintenance)
        except Exception:
            log.exception("reading maintenance notices failed; will retry")
    keys = list(runtime.indexes.jobs)
    await pass_all(keys, lambda namespace, name: pass_for(runtime, namespace, name), concurrency)
    metrics.RESYNC_ROUND_SECONDS.set(clock() - started)
    metrics.RESYNC_ROUND_JOBS.set(len(keys))
    metrics.RESYNC_ROUND_END.set_to_current_time()


async def pass_all(
    keys: list[tuple[str, str]],
    pass_for: Callable[[str, str], Awaitable[None]],
    concurrency: int,
) -> None:
    """A pass for every key, at most `concurrency` at once: a fixed set of workers each taking the next key
    when its pass ends, so one slow pass holds up one worker, not a whole batch. A failed pass is logged;
    the others go on."""
    pending = iter(keys)  # shared: the workers run on one event loop, so each key is taken once

    async def worker() -> None:
        for namespace, name in pending:
            try:
                await pass_for(namespace, name)
            except Exception as error:
                log.error("resync pass of %s/%s failed: %r", namespace, name, error)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(keys))))))


async def sweep_forever(runtime: Runtime) -> None:
    """Read the cluster (GetCluster), then delete node pools whose TPUJob is gone: at start (after a crash)
    and then periodically."""
    loop = asyncio.get_running_loop()
    jobs = runtime.indexes.jobs
    while True:
        if not runtime.active:  # a standby sweeps as soon as it takes over: the active one may have crashed
            await asyncio.sleep(1.0)
            continue
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
