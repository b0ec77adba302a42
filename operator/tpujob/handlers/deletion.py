"""Deleting a TPUJob: our finalizer holds the job until its node pools are gone, then lets it go.

The finalizer is added by the pass before the first node pool is requested (reconciler/act.py): a job
that never had pools is deleted at once, its pods and Service by garbage collection. A job deleted while
it holds the finalizer gets one task (`finalize_soon`) that, on the active replica, starts each pool's
delete, waits for GKE, and removes the finalizer with a patch conditional on the job's resourceVersion, as
client-go controllers do. The task wakes at each watch event of its job (a conflict is answered by the
next event, not by a guess at a delay) and at least every poll interval while GKE deletes. The job's
DELETED event ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from tpujob import kube, logs
from tpujob.api import constants as c
from tpujob.handlers.indexes import JobKey
from tpujob.handlers.workqueue import Runtime, forget
from tpujob.peering import NotLeading

log = logging.getLogger(__name__)

# A failure that is neither GKE's wait nor a conflict (an unreachable API server, a bug): tried again after.
RETRY_SECONDS = 5.0


def holds_finalizer(body: Mapping[str, Any]) -> bool:
    return c.FINALIZER in ((body.get("metadata") or {}).get("finalizers") or [])


def is_being_finalized(body: Mapping[str, Any]) -> bool:
    """Deleted, and held by our finalizer: the finalizer's task has it, no pass."""
    return bool((body.get("metadata") or {}).get("deletionTimestamp")) and holds_finalizer(body)


def without_finalizer(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that removes our finalizer and keeps the others, on the job as it was read (a
    resourceVersion makes it conditional: a 409 when the list changed meanwhile)."""
    finalizers = [f for f in meta.get("finalizers") or [] if f != c.FINALIZER]
    return {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}


def finalize_soon(runtime: Runtime, key: JobKey, uid: str) -> None:
    """The job is deleted and holds our finalizer: its task, unless it runs already (then it looks again)."""
    runtime.finalizers.start(uid, lambda wake: finalize(runtime, key, uid, wake))


async def finalize(runtime: Runtime, key: JobKey, uid: str, wake: asyncio.Event) -> None:
    """Until the finalizer is gone: on the active replica, the pools' deletes started (one GetNodePool per
    slice, a DeleteNodePool for each still there), then, once GKE has none of them, the finalizer removed.
    A standby waits (it wakes with the job's next event, or after a period); the wait for GKE is said once."""
    said = False
    while True:
        wake.clear()
        indexed = runtime.indexes.jobs.get(key)
        if not indexed or indexed[0].uid != uid:
            return  # gone: its DELETED event forgets it
        body = indexed[0].body()
        if not holds_finalizer(body):
            return  # someone else removed it
        delay = runtime.config.peering_lifetime_seconds / 5
        if runtime.active:
            try:
                if await _finalized(runtime, key, uid, body):
                    return
                delay = runtime.config.poll_provisioning_seconds  # GKE deletes as slowly as it creates
                if not said:
                    said = True
                    log.info("%s/%s deleted: %s", *key, logs.WAITING_FOR_POOLS, extra=logs.job(*key))
            except NotLeading:
                pass  # stood down meanwhile: the active one finishes it
            except kube.ApiError as error:
                if error.status != 409:  # 409: the job changed after this read; its event wakes us
                    log.warning("%s/%s deleted: removing its finalizer failed: %s", *key, error)
                    delay = RETRY_SECONDS
            except Exception:
                log.exception("%s/%s deleted: releasing its node pools failed; trying again", *key)
                delay = RETRY_SECONDS
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), delay)


async def _finalized(runtime: Runtime, key: JobKey, uid: str, body: dict[str, Any]) -> bool:
    """One look: True once the finalizer is removed (or the job is gone); False while GKE still has pools
    (their deletes started). Under the job's lock, so a pass that began before the deletion and is
    creating a pool ends first."""
    assert runtime.api is not None
    loop = asyncio.get_running_loop()
    runtime.queue.drop(key)
    async with runtime.queue.locks.hold(uid):
        remaining = await loop.run_in_executor(None, runtime.reconciler.release_pools, body)
    if remaining:
        return False
    try:
        await loop.run_in_executor(None, runtime.api.patch_tpujob, *key, without_finalizer(body["metadata"]))
    except kube.ApiError as error:
        if error.status != 404:
            raise
    forget(runtime, key, uid)
    return True


async def release_when_gone(runtime: Runtime, key: JobKey, uid: str, body: dict[str, Any]) -> None:
    """A job's DELETED event: its pools, if any are left, are deleted now rather than at the next orphan
    sweep (5 minutes by default). The finalizer normally sees to them first, but the API server may lose a
    finalizer it acknowledged: a DELETE that began before the finalizer's patch removes the job anyway
    (kubernetes/kubernetes#77988; the fix, #129768, was reverted by #133979, and #133995 is open). The soak
    bench met it on the test bed's 1.36 CRD server (README, "A day of churn"). Under the job's lock, so a
    pass creating a pool now ends first; one GetNodePool per slice when, as usual, nothing is left."""
    if not runtime.active:
        return
    loop = asyncio.get_running_loop()
    try:
        async with runtime.queue.locks.hold(uid):
            remaining = await loop.run_in_executor(None, runtime.reconciler.release_pools, body)
    except Exception as error:  # the orphan sweep is the net under this one
        log.warning("%s/%s deleted: releasing its node pools failed: %r", *key, error)
        return
    if remaining:
        log.warning(
            "%s/%s was deleted without its finalizer's release (the API server dropped the finalizer): "
            "deleting its node pools: %s",
            *key,
            ", ".join(remaining),
            extra=logs.job(*key),
        )
