"""The writes a pass makes, to Kubernetes and GKE: each a small method, each GKE call counted in the
metrics the same way. No decisions: what to write comes from tpujob.status."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import logging
import socket
from typing import Any

from tpujob import kube, metrics
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.gke import NodePools

log = logging.getLogger(__name__)

# Pod and Service creates of one pass run at once, this many at a time.
CREATE_CONCURRENCY = 8
# Events name the operator as their source (kubectl get events: FROM tpujob-operator).
EVENT_COMPONENT = "tpujob-operator"
MAX_EVENT_MESSAGE = 1024


def event_manifest(meta: dict[str, Any], event: s.Event, now: dt.datetime, instance: str) -> dict[str, Any]:
    """A core/v1 Event about a TPUJob (`meta`: its name, namespace, uid)."""
    moment = s.timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": f"{c.GROUP}/{c.VERSION}",
            "kind": c.KIND,
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


class Actions:
    def __init__(self, api: kube.Kube, pools: NodePools | None) -> None:
        self.api = api
        self.pools = pools
        self.instance = socket.gethostname()  # the pod's name, in Events
        self._creators = concurrent.futures.ThreadPoolExecutor(CREATE_CONCURRENCY, "tpujob-create")

    # --- GKE -------------------------------------------------------------------------------------

    def create_pool(self, request: dict[str, Any]) -> tuple[str, s.GKEError | None]:
        """Ask GKE for a pool: (its operation's name, GKE's refusal or None)."""
        assert self.pools is not None
        operation, error = self.pools.create(request)
        metrics.record_pool_call("create", error)
        return operation, error

    def delete_pool(self, name: str) -> bool:
        """Ask GKE to delete a pool; whether GKE took the request."""
        assert self.pools is not None
        error = self.pools.delete(name)
        metrics.record_pool_call("delete", error)
        return error is None

    # --- Kubernetes ------------------------------------------------------------------------------

    def delete_pod(self, namespace: str, name: str) -> None:
        self.api.delete_pod(namespace, name)

    def create_pods_and_service(
        self, namespace: str, pods: list[dict[str, Any]], service: dict[str, Any] | None
    ) -> None:
        """Pods all at once (a slice's hosts start together), with the Service that names them for DNS.
        What exists already is fine; the first other error is raised after every call ended."""
        creates = [(self.api.create_pod, pod) for pod in pods]
        if service is not None:
            creates.append((self.api.create_service, service))
        futures = [self._creators.submit(create, namespace, body) for create, body in creates]
        for error in [f.exception() for f in futures]:
            if error is not None:
                raise error

    def ensure_finalizer(self, meta: dict[str, Any]) -> None:
        """Before the first pool is requested: a deletion from then on waits for the pools (kopf adds no
        finalizer of its own, see tpujob.handlers)."""
        finalizers = list(meta.get("finalizers") or [])
        if c.FINALIZER in finalizers:
            return
        patch = {
            "metadata": {"finalizers": [*finalizers, c.FINALIZER], "resourceVersion": meta["resourceVersion"]}
        }
        self.api.patch_tpujob(meta["namespace"], meta["name"], patch)

    def post_events(self, meta: dict[str, Any], events: list[s.Event], now: dt.datetime) -> None:
        """Through the operator's own bounded connection pool (kopf's poster opens a connection per
        object at once: hundreds in a burst). Best effort: a lost event must not fail the pass."""
        namespace, name = meta["namespace"], meta["name"]
        for event in events:
            try:
                self.api.create_event(namespace, event_manifest(meta, event, now, self.instance))
            except Exception as error:
                log.warning("%s/%s: event %s not posted: %s", namespace, name, event.reason, error)

    def patch_status(self, meta: dict[str, Any], status: dict[str, Any]) -> str | None:
        """Write the status subresource; the written resourceVersion, None if the job is gone."""
        try:
            written = self.api.patch_tpujob_status(meta["namespace"], meta["name"], {"status": status})
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
