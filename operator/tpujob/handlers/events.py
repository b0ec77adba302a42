"""Watch events that ask for a pass: a TPUJob changed (not our own status write) or one of its pods did; a
TPUJob deleted with our finalizer goes to the finalizer's task (deletion.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

# kopf's private watch stream (see handlers/owned.py, and tests/unit/test_kopf_private.py for the pin).
from kopf._cogs.clients import watching

from tpujob.api import constants as c
from tpujob.handlers.deletion import finalize_soon, is_being_finalized, release_when_gone
from tpujob.handlers.indexes import index_job
from tpujob.handlers.workqueue import Runtime, forget, request_pass

log = logging.getLogger(__name__)

PODS = ("", "v1", "pods")
SERVICES = ("", "v1", "services")
NETWORK_POLICIES = ("networking.k8s.io", "v1", "networkpolicies")
WORKLOADS = (c.KUEUE_GROUP, "workloads")  # in whichever version Kueue serves (reconciler/kueue.py)
# The pods and Services the operator made. The API server filters the watches by it (kopf's
# settings.watching.label_selectors, set in startup.configure), so other pods in the cluster reach the
# operator not at all: no watch event to decode, index or filter, and none held in memory.
OWNED_SELECTOR = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"


class JobFeed:
    """The TPUJob watch (handlers/owned.watch_owned runs it on kopf's stream), one event at a time, into the
    jobs' map and what each event asks for. kopf's own handling of a TPUJob event (a worker task per object,
    its cause, patch and logger, its handler invocation) was most of the operator's CPU per job, for an
    event that needs only this. A listing indexes each job as it comes; when it ends, a job the map held
    and the listing did not was deleted while the watch was down, and is let go as a DELETED event would.
    Never raises: a failure is logged and the watch goes on with the next event."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._listing: set[tuple[str, str]] | None = None  # the keys of a listing being read

    def __call__(self, event: Any) -> None:
        try:
            if event is watching.Bookmark.LISTED:
                self._listed()
            elif isinstance(event, watching.Bookmark) or event.get("type") == "BOOKMARK":
                return
            else:
                body, event_type = event["object"], event["type"]
                if event_type is None:  # an object of a listing
                    meta = body["metadata"]
                    (self._listing if self._listing is not None else self._begin()).add(
                        (meta["namespace"], meta["name"])
                    )
                job_changed(self.runtime, event_type or "ADDED", body)
        except Exception:  # a bug of ours: said in full, and the watch goes on
            log.exception("a TPUJob watch event could not be handled; the watch goes on")

    def _begin(self) -> set[tuple[str, str]]:
        self._listing = set()
        return self._listing

    def _listed(self) -> None:
        listing, self._listing = self._listing or set(), None
        jobs = self.runtime.indexes.jobs
        for key in [key for key in jobs if key not in listing]:
            indexed = jobs[key][0]
            job_changed(self.runtime, "DELETED", indexed.body())


def job_changed(runtime: Runtime, event_type: str, body: Mapping[str, Any]) -> None:
    """A TPUJob watch event (ADDED, MODIFIED, DELETED): the map, the namespace's chip count, and a pass, the
    finalizer's task, or the job forgotten."""
    meta = body["metadata"]
    key, uid = (meta["namespace"], meta["name"]), meta["uid"]
    index_job(runtime.indexes.jobs, event_type, key, body)  # every event, our own writes too
    if event_type == "DELETED":
        runtime.finalizers.cancel(uid)
        forget(runtime, key, uid)
        gone = dict(body)
        runtime.finalizers.start(uid, lambda _wake: release_when_gone(runtime, key, uid, gone))
        return
    runtime.reconciler.chips.seen(body)  # its namespace's chip count, before any pass reads it
    if is_being_finalized(body):
        finalize_soon(runtime, key, uid)
    elif not runtime.reconciler.is_own_write(body):  # not the echo of the last pass' status write
        request_pass(runtime, *key)


def pod_changed(runtime: Runtime, event_type: str, body: Mapping[str, Any], job: tuple[str, str]) -> None:
    """A watch event of one of the operator's pods (handlers/owned.py feeds them): a pass for its job."""
    indexed = runtime.indexes.jobs.get(job)
    if indexed:
        runtime.reconciler.saw_pod(body, indexed[0].uid)
    if event_type == "ADDED" and runtime.reconciler.is_own_create(body):
        return  # the echo of the pass' own create: that pass saw it coming
    request_pass(runtime, *job)
