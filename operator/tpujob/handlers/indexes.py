"""The watched state every pass reads without API calls: kopf's index of the jobs (the operator's pods and
Services are in handlers/owned.py's maps, off kopf's per-object path).

The index function is a coroutine although it does no I/O: kopf runs a plain function in a worker
thread and awaits it there and back, for every watch event (kopf/_core/actions/invocation.py), which
costs more than the indexing itself."""

from __future__ import annotations

import json
from dataclasses import dataclass
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
    return {(namespace, name): IndexedJob.of(body)}


@dataclass(frozen=True, slots=True)
class IndexedJob:
    """A watched job as the index keeps it: what a pass reads, as compact JSON. A job's spec and status as
    decoded objects take about 3 times the bytes of their text (each dict, list and string an object of
    its own), held for every live job; a pass decodes its job's text again, in its worker thread."""

    uid: str
    deleting: bool
    wire: str

    @classmethod
    def of(cls, body: Any) -> IndexedJob:
        meta = body["metadata"]
        kept = {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "metadata": {key: meta[key] for key in INDEXED_METADATA if key in meta},
            "spec": body.get("spec"),
        }
        if body.get("status") is not None:
            kept["status"] = body["status"]
        return cls(meta["uid"], bool(meta.get("deletionTimestamp")), json.dumps(kept, separators=(",", ":")))

    def body(self) -> dict[str, Any]:
        """A fresh copy of the job's body: the pass may keep or change it."""
        decoded: dict[str, Any] = json.loads(self.wire)
        return decoded
