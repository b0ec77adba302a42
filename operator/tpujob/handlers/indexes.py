"""The watched state every pass reads without API calls: kopf's index of the jobs (the operator's pods and
Services are in handlers/owned.py's maps, off kopf's per-object path).

The index function is a coroutine although it does no I/O: kopf runs a plain function in a worker
thread and awaits it there and back, for every watch event (kopf/_core/actions/invocation.py), which
costs more than the indexing itself."""

from __future__ import annotations

from typing import Any

import kopf

from tpujob.handlers.events import JOBS

# The metadata a pass, the finalizer patch and the Events read; managedFields and annotations (kubectl's
# last-applied copy of the spec) would only be held in memory, once per job.
INDEXED_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "labels",
    "finalizers",
    "deletionTimestamp",
)


@kopf.index(*JOBS)
async def tpujob_index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): indexed_job(body)}


def indexed_job(body: Any) -> dict[str, Any]:
    meta = body["metadata"]
    indexed = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: meta[key] for key in INDEXED_METADATA if key in meta},
        "spec": body.get("spec"),
    }
    if body.get("status") is not None:
        indexed["status"] = body["status"]
    return indexed
