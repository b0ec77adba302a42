"""Deleting a TPUJob: the finalizer releases its node pools before the job goes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from tpujob import logs
from tpujob.api import constants as c
from tpujob.handlers.indexes import JOBS
from tpujob.handlers.workqueue import Runtime, forget

log = logging.getLogger(__name__)


def _holds_finalizer(body: kopf.Body, **_: Any) -> bool:
    return c.FINALIZER in (body.get("metadata", {}).get("finalizers") or [])


# Only for jobs holding our finalizer (added by the pass before the first node pool is requested): kopf
# adds no finalizer of its own, so a job that never had pools is deleted at once, its pods and Service by
# garbage collection. When the handler is done, kopf removes the finalizer.
@kopf.on.delete(*JOBS, when=_holds_finalizer)
async def on_delete(
    body: kopf.Body, uid: str, namespace: str | None, name: str, memo: kopf.Memo, retry: int, **_: Any
) -> None:
    """The finalizer: node pools go first; pods and the Service follow by garbage collection."""
    runtime: Runtime = memo.runtime
    if not runtime.active:  # kopf may retry a deletion on a replica that has just stood down
        raise kopf.TemporaryError("this replica stands by", delay=runtime.config.peering_lifetime_seconds)
    assert namespace is not None  # TPUJobs are namespaced
    runtime.queue.drop((namespace, name))
    loop = asyncio.get_running_loop()
    # Under the job's lock: a pass that began before the deletion must not recreate a pool after it.
    async with runtime.queue.locks.hold(uid):
        remaining = await loop.run_in_executor(None, runtime.reconciler.release_pools, dict(body))
    if remaining:
        if retry == 0:  # kopf's line for each retry is dropped (logs.QuietWaits): the wait is said once
            log.info(
                "%s/%s deleted: %s: %s",
                namespace,
                name,
                logs.WAITING_FOR_POOLS,
                ", ".join(remaining),
                extra=logs.job(namespace, name),
            )
        raise kopf.TemporaryError(
            f"{logs.WAITING_FOR_POOLS}: {', '.join(remaining)}",
            delay=runtime.config.poll_provisioning_seconds,  # GKE deletes as slowly as it creates
        )
    forget(runtime, (namespace, name), uid)


async def release_when_gone(
    runtime: Runtime, namespace: str, name: str, uid: str, body: dict[str, Any]
) -> None:
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
        log.warning("%s/%s deleted: releasing its node pools failed: %r", namespace, name, error)
        return
    if remaining:
        log.warning(
            "%s/%s was deleted without its finalizer's release (the API server dropped the finalizer): "
            "deleting its node pools: %s",
            namespace,
            name,
            ", ".join(remaining),
            extra=logs.job(namespace, name),
        )
