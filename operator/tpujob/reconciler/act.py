"""The writes a pass makes, to Kubernetes and GKE: `apply` carries a decision out, in its order, and returns
what happened (status.Applied). The writes are split by what they act on: GKE's pools (act_pools.py), the
workers (act_workers.py: NetworkPolicy, host lists, pods, Service), Kueue's Workload (act_workload.py); the
job's own writes (finalizer, status, Events, deletion) and the chips reserved are here. No decisions: what to
write comes from tpujob.status, the requests from tpujob.render."""

from __future__ import annotations

import datetime as dt
import logging
import socket
from typing import Any

from tpujob import kube
from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api import constants as c
from tpujob.gke import NodePools
from tpujob.reconciler.act_pools import PoolActions
from tpujob.reconciler.act_workers import WorkerActions
from tpujob.reconciler.act_workload import WorkloadActions
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.poster import EventPoster
from tpujob.reconciler.tenancy import NamespaceChips
from tpujob.render import Cluster

log = logging.getLogger(__name__)

# Events name the operator as their source (kubectl get events: FROM tpujob-operator).
EVENT_COMPONENT = "tpujob-operator"
MAX_EVENT_MESSAGE = 1024


# The Event on an object a watch could not read (a tenant's label, annotation or field).
REASON_UNREADABLE = "Unreadable"


def event_manifest(
    meta: dict[str, Any],
    event: s.Event,
    now: dt.datetime,
    instance: str,
    kind: tuple[str, str] = (f"{c.GROUP}/{c.VERSION}", c.KIND),
) -> dict[str, Any]:
    """A core/v1 Event about an object (`meta`: its name, namespace, uid; `kind`: its apiVersion and kind, a
    TPUJob's by default)."""
    moment = s.timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": kind[0],
            "kind": kind[1],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:MAX_EVENT_MESSAGE],
        "firstTimestamp": moment,
        "lastTimestamp": moment,
        "count": 1,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": instance,
    }


class JobGone(Exception):
    """The job is no longer on the API server: the pass ends, and the job is forgotten."""


class Actions:
    def __init__(
        self,
        api: kube.Kube,
        pools: NodePools | None,
        memory: JobMemory,
        chips: NamespaceChips | None = None,
        refused_backoff_seconds: float = s.REJECTED_BACKOFF_BASE_SECONDS,
    ) -> None:
        self.api = api
        self.chips = chips if chips is not None else NamespaceChips(memory.records)
        self.gke = PoolActions(pools)
        self.workers = WorkerActions(api, memory, refused_backoff_seconds)
        self.workload = WorkloadActions(api, self.ensure_finalizer)
        self.instance = socket.gethostname()  # the pod's name, in Events
        self.events = EventPoster(api.create_event)

    def close(self, timeout: float) -> None:
        self.events.stop(timeout)
        self.workers.close()

    def apply(
        self,
        meta: dict[str, Any],
        job: TPUJob | None,
        decision: s.Decision,
        cluster: Cluster,
        now: dt.datetime,
    ) -> s.Applied:
        """Carry the decision out: the chips reserved, pools (after the finalizer), deletes, then pods and the
        Service, then the Workload's writes. `job`: None for a spec that does not parse (its decisions only
        delete)."""
        applied = s.Applied()
        if decision.chips is not None:  # first: nothing is done for a job the limit has no room for now
            budget = self.chips.reserve(meta["uid"], decision.chips)
            if not budget.fits(decision.chips.chips):
                applied.chips_taken = budget
                return applied
        if decision.create_pools and job is not None:
            # The finalizer before any paid resource: a job deleted from now on waits for its pools.
            self.ensure_finalizer(meta)
            self.gke.create_all(job, decision, cluster, applied)
        self.workers.delete_and_restart(meta["namespace"], decision)
        self.gke.delete_all(decision, meta["uid"], applied)
        if job is not None and (
            decision.create_pods or decision.create_service or decision.create_network_policy
        ):
            applied.pods_refused, applied.retry_pods_after = self.workers.create(job, decision, cluster, now)
        if decision.workload and job is not None:
            applied.workload_conflict = not self.workload.write(meta, job, decision.workload, cluster)
        return applied

    def ensure_finalizer(self, meta: dict[str, Any]) -> None:
        """Before the first pool is requested: a deletion from then on waits for the pools (kopf adds no
        finalizer of its own, see tpujob.handlers)."""
        finalizers = list(meta.get("finalizers") or [])
        if c.FINALIZER in finalizers:
            return
        patch = {
            "metadata": {"finalizers": [*finalizers, c.FINALIZER], "resourceVersion": meta["resourceVersion"]}
        }
        try:
            self.api.patch_tpujob(meta["namespace"], meta["name"], patch)
        except kube.ApiError as error:
            if error.status == 404:  # deleted after the watch showed it: no pool is asked for
                raise JobGone(f"{meta['namespace']}/{meta['name']}") from error
            raise

    def post_events(self, meta: dict[str, Any], events: list[s.Event], now: dt.datetime) -> None:
        """Queued for the background poster (poster.py), through the operator's own bounded connection pool
        (kopf's poster opens a connection per object at once: hundreds in a burst). Best effort: a lost
        event must not fail the pass, nor wait for a token before the next job's pods."""
        for event in events:
            self.events.enqueue(meta["namespace"], event_manifest(meta, event, now, self.instance))

    def post_object_event(self, kind: tuple[str, str], meta: dict[str, Any], event: s.Event) -> None:
        """An Event about another object than a job (one of its pods, its Workload), queued as the rest."""
        now = dt.datetime.now(dt.UTC)
        self.events.enqueue(meta["namespace"], event_manifest(meta, event, now, self.instance, kind))

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> str | None:
        """Write the status subresource; the written resourceVersion, None if the job is gone. Its token
        comes after the waiting pod and Service creates of every pass (Priority.STATUS)."""
        try:
            written = self.api.patch_tpujob_status(namespace, name, {"status": status})
        except kube.ApiError as error:
            if error.status == 404:  # deleted meanwhile: nothing to record
                return None
            raise
        return str(written["metadata"]["resourceVersion"])

    def delete_job(self, namespace: str, name: str) -> None:
        self.api.delete_tpujob(namespace, name, propagation="Background")

    def live_job_uids(self, namespace: str | None) -> set[str]:
        return self.api.list_tpujob_uids(namespace)

    def job_exists(self, namespace: str, name: str, uid: str) -> bool:
        job = self.api.get_tpujob(namespace, name)
        return job is not None and bool(job["metadata"]["uid"] == uid)
