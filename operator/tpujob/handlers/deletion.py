"""Deleting a TPUJob: the finalizer releases its node pools before the job goes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from tpujob import logs
from tpujob.api import constants as c
from tpujob.handlers.events import JOBS
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
