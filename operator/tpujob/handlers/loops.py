"""The periodic loops: which replica is active (peering), a resync pass for every job (and maintenance
notices), and the orphan sweep. A standby replica runs none of the work."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tpujob import heap, metrics, peering
from tpujob.handlers.workqueue import Runtime, passed_since, reconcile_batch, request_pass, vanished

log = logging.getLogger(__name__)

RESYNC_CONCURRENCY = 4
# How often the C heap's free pages go back to the OS (tpujob/heap.py): a few milliseconds a minute.
HEAP_TRIM_SECONDS = 60.0
# The resync round's passes run this many to a worker thread's turn (handlers/workqueue.reconcile_batch).
RESYNC_BATCH = 32


async def lead_forever(runtime: Runtime) -> None:
    """Read the peering object a few times per lifetime: this replica works while no live peer outranks
    it, as kopf's own watches do (peering.next_lead: two reads in a row to take the lead, and not in its
    first lifetime while alone; at the renew deadline without a confirmation, it stands down). Becoming
    active, it looks at every job the API server has; standing by, it forgets what it knew."""
    if runtime.config.peering is None or runtime.api is None:
        return
    lifetime = runtime.config.peering_lifetime_seconds
    period = lifetime / 5
    lead = peering.starting_lead(time.monotonic(), lifetime)
    stood_down = False  # at the renew deadline: rejoins under the replica that took over
    deadline = runtime.config.peering_renew_deadline_seconds
    while True:
        # A read confirms the lead as of when it was sent: the others judge the records as they were then.
        sent = time.monotonic()
        peers = await read_peers(
            runtime, period, peering.wait_within_deadline(lead, sent, deadline, period + 1)
        )
        wall = dt.datetime.now(dt.UTC)
        if peers is not None:
            stood_down, lower = peering.rejoin(stood_down, peers, runtime.identity, wall)
            if lower is not None:
                runtime.set_priority(lower)
        says_leads, sees_peers = None, False
        if peers is not None:
            says_leads = runtime.identity in peers and peering.leads(
                peers, runtime.identity, runtime.priority, wall
            )
            sees_peers = runtime.identity in peers and bool(peering.live_peers(peers, runtime.identity, wall))
        now = sent if peers is not None else time.monotonic()
        lead = peering.next_lead(lead, says_leads, now, deadline, sees_peers)
        if lead.active != runtime.active:
            # The gates first (every write and GKE call checks runtime.active when it starts), then the
            # words: once the log says it stopped, no call starts.
            runtime.active = lead.active
            if says_leads is None:
                stood_down = True
                log.warning(
                    "replica %s could not confirm its lead for %.0f s (renew deadline): it stops writing "
                    "and calling GKE",
                    runtime.identity,
                    deadline,
                )
            log.warning("replica %s is now %s", runtime.identity, "active" if lead.active else "standby")
            metrics.OPERATOR_ACTIVE.set(1 if lead.active else 0)
            if lead.active:
                runtime.queue.resume()
                stood_down = False  # it leads again (no live peer outranked it): nobody to rejoin under
                await take_over(runtime)
            else:
                stand_by(runtime)
        await asyncio.sleep(peering.wait_within_deadline(lead, time.monotonic(), deadline, period))


async def read_peers(runtime: Runtime, timeout: float, within: float) -> dict[str, Any] | None:
    """The peering object's records; None when they are not read within `within` seconds (the lead loop's
    renew deadline may come first) or the read fails. The HTTP read gives up after `timeout` of silence, so
    a black-holed connection holds no thread for long."""
    assert runtime.api is not None and runtime.config.peering is not None
    loop = asyncio.get_running_loop()
    read = functools.partial(
        runtime.api.get_peering, runtime.config.peering, runtime.config.namespace, timeout=(timeout, timeout)
    )
    try:
        found = await asyncio.wait_for(loop.run_in_executor(None, read), within)
    except Exception as error:
        log.warning("reading the peering object %s failed: %r", runtime.config.peering, error)
        return None
    peers: dict[str, Any] = (found or {}).get("status") or {}
    return peers


async def take_over(runtime: Runtime) -> None:
    """A pass for every job the API server has now. The watch's cache may still hold jobs deleted while
    this replica stood by (kopf paused its watches, and a relist drops nothing): those are vanished, and no
    pass acts on them. If the list fails, each pass still reads its job before creating anything."""
    assert runtime.api is not None
    runtime.sweep_requested.set()
    loop = asyncio.get_running_loop()
    # Cached before the list: each of these existed before it, so one the list lacks is gone. (A job the
    # watch adds while the list runs may be newer than the list, and is not judged by it.)
    cached = [
        (namespace, job, indexed.uid)
        for namespace, job in list(runtime.indexes.jobs)
        for indexed in runtime.indexes.jobs.get((namespace, job), [])
    ]
    try:
        live = await loop.run_in_executor(None, runtime.api.list_tpujob_uids, runtime.config.namespace)
    except Exception:
        log.exception("listing TPUJobs at takeover failed; each pass checks its job instead")
        live = None
    for namespace, job, uid in cached:
        if live is not None and uid not in live:
            vanished(runtime, (namespace, job), uid)
        else:
            request_pass(runtime, namespace, job)


def stand_by(runtime: Runtime) -> None:
    """Another replica works now: nothing queued or timed of ours runs, and what this one remembered goes
    stale."""
    runtime.queue.pause()
    runtime.reconciler.forget_all()


async def resync_forever(runtime: Runtime) -> None:
    """A safety net: every job gets a pass at least every resync interval, so a lost watch event or a
    lost requeue is made good (a job that had a pass for another cause within the interval before a round
    waits for the next: at most two intervals between its looks). One loop for all jobs, a few passes at a
    time; a standby skips its rounds."""
    while True:
        await asyncio.sleep(runtime.config.resync_seconds)
        if not runtime.active:
            continue
        await resync_round(runtime)


async def resync_round(
    runtime: Runtime,
    pass_batch: Callable[[Runtime, list[tuple[str, str]]], Awaitable[None]] = reconcile_batch,
    concurrency: int = RESYNC_CONCURRENCY,
    clock: Callable[[], float] = time.monotonic,
    batch: int = RESYNC_BATCH,
) -> None:
    """One round: the maintenance notices (cluster-wide operator only), then a pass for every job known at
    the round's start that had none within the resync interval (in a burst of events most jobs just had
    one), `batch` jobs to a worker thread's turn, `concurrency` turns at once. Records how long the whole
    round took and how many jobs it gave a pass (tpujob_resync_round_seconds / _jobs) and when it ended."""
    started = clock()
    recent = asyncio.get_running_loop().time() - runtime.config.resync_seconds
    if runtime.config.namespace is None:  # nodes are cluster-scoped: a namespaced operator cannot read them
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, runtime.reconciler.refresh_maintenance)
        except Exception:
            log.exception("reading maintenance notices failed; will retry")
    # The safety net under every forget: a record whose job the index no longer has (a pass that raced its
    # job's deletion may have made one after the job was forgotten) goes.
    runtime.reconciler.retain(
        {indexed.uid for entries in list(runtime.indexes.jobs.values()) for indexed in entries}
    )
    keys = [key for key in list(runtime.indexes.jobs) if not passed_since(runtime, key, recent)]
    await pass_all(keys, lambda keys: pass_batch(runtime, keys), concurrency, batch)
    metrics.RESYNC_ROUND_SECONDS.set(clock() - started)
    metrics.RESYNC_ROUND_JOBS.set(len(keys))
    metrics.RESYNC_ROUND_END.set_to_current_time()


async def pass_all(
    keys: list[tuple[str, str]],
    pass_batch: Callable[[list[tuple[str, str]]], Awaitable[None]],
    concurrency: int,
    batch: int = 1,
) -> None:
    """Passes for every key, `batch` keys at a time, at most `concurrency` batches at once: a fixed set of
    workers each taking the next keys when its batch ends, so one slow pass holds up one worker, not the
    round. A failed batch is logged; the others go on."""
    pending = iter(keys)  # shared: the workers run on one event loop, so each key is taken once

    async def worker() -> None:
        while taken := list(itertools.islice(pending, batch)):
            try:
                await pass_batch(taken)
            except Exception as error:
                names = ", ".join(f"{namespace}/{name}" for namespace, name in taken)
                log.error("resync pass of %s failed: %r", names, error)

    workers = max(1, min(concurrency, math.ceil(len(keys) / max(batch, 1))))
    await asyncio.gather(*(worker() for _ in range(workers)))


async def trim_heap_forever(period: float = HEAP_TRIM_SECONDS) -> None:
    """Give the C heap's free pages back every `period` seconds, on a worker thread (malloc_trim takes
    each arena's lock in turn), standby or not: the memory a job's churn left free is the process' either
    way."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(period)
        await loop.run_in_executor(None, heap.trim)


async def sweep_forever(runtime: Runtime) -> None:
    """Read the cluster (GetCluster), then delete node pools whose TPUJob is gone: at start, whenever this
    replica takes over (the active one may have crashed, or jobs gone while it stood by), and then every
    sweep interval."""
    while True:
        runtime.sweep_requested.clear()
        if runtime.active:
            await sweep_once(runtime)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(runtime.sweep_requested.wait(), runtime.config.sweep_seconds)


async def sweep_once(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, runtime.reconciler.check_cluster)
    except Exception:
        log.exception("reading the GKE cluster failed; will retry")
    try:
        # Each pool it deletes is said once, where it is deleted (Reconciler.sweep_orphans).
        await loop.run_in_executor(None, runtime.reconciler.sweep_orphans, runtime.config.namespace)
    except Exception:
        log.exception("orphan sweep failed; will retry")
