"""The jobs every pass reads without API calls: the operator's own map of the watched TPUJobs, kept by the
TPUJob watch (handlers/events.JobFeed); the pods and Services are in handlers/owned.py's maps.

Not a kopf index: kopf holds every handler, and the body of every object it lists at start, until the
initial listings of all indexed resources are indexed, and its wait for that wakes every waiting worker
at each object listed (kopf 1.45 _core/reactor/queueing.py watcher, _core/reactor/processing.py): 4,000
objects took 27.6 s of CPU before the first handler ran, and a restart among 10,000 jobs spent 515 s in
it. Without an index kopf has nothing to wait for, and each job's watch event fills the map as it comes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

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


JobKey = tuple[str, str]  # (namespace, name)
# The jobs by key, each as a one-item list (how a pass reads every map: handlers/workqueue._values).
JobIndex = dict[JobKey, list["IndexedJob"]]


def index_job(jobs: JobIndex, event_type: str | None, key: JobKey, body: Any) -> None:
    """A TPUJob watch event into the map: a deleted job leaves it; any other replaces the job's entry."""
    if event_type == "DELETED":
        jobs.pop(key, None)
    else:
        jobs[key] = [IndexedJob.of(body)]


@dataclass(frozen=True, slots=True)
class IndexedJob:
    """A watched job as the index keeps it: what a pass reads, as compact JSON. A job's spec and status as
    decoded objects take about 3 times the bytes of their text (each dict, list and string an object of
    its own), held for every live job; a pass decodes its job's text again, in its worker thread. Encoded
    without the circular-reference check, made on every watch event of a job: a watch event's decoded JSON
    is a tree."""

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
        return cls(
            meta["uid"],
            bool(meta.get("deletionTimestamp")),
            json.dumps(kept, separators=(",", ":"), check_circular=False),
        )

    def body(self) -> dict[str, Any]:
        """A fresh copy of the job's body: the pass may keep or change it."""
        decoded: dict[str, Any] = json.loads(self.wire)
        return decoded
