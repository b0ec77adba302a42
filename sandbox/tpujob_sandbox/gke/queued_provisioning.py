"""GKE's cluster autoscaler serving ProvisioningRequests of class queued-provisioning.gke.io (Dynamic
Workload Scheduler's queued provisioning) for TPU slices.

GKE (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest, and NodePool.
QueuedProvisioning in the GKE API: "nodes can be only obtained through queuing via the Cluster Autoscaler
ProvisioningRequest API"): the autoscaler accepts the request (Accepted=True), provisions all of its nodes
at once in a node pool with queued provisioning (node auto-provisioning creates the pool), reports
Provisioned=True when they are up, and removes the nodes when the request is deleted. The request's pods
find the nodes by their pod template (accelerator and topology node selectors, google.com/tpu requests).
What the request's conditions carry is cluster-autoscaler's v1 API (apis/provisioningrequest/
autoscaling.x-k8s.io/v1/types.go: Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked).

Here: one pool per PodSet of the request (a TPU slice is one pool), made through the simulated GKE's own
pool create (so it is validated, provisioned, stocked out and registered like any pool, and counted apart
from the API's calls: `created`). Not modelled: the booking's 10 minutes for pods to arrive
(BookingExpired comes only when a test calls `expire`), the request's maxRunDurationSeconds, NAP's own
pool names (GKE's are not documented: here qp-<hash>). A test makes a request fail with `fail_next`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from google.cloud import container_v1
from kubernetes import client as k8s

from tpujob.api import constants
from tpujob_sandbox import gke_facts
from tpujob_sandbox.gke import errors
from tpujob_sandbox.gke.nodepools import MIN_SCAN_REAL_SECONDS, NodePools
from tpujob_sandbox.listwatch import ListWatch

log = logging.getLogger(__name__)

CLASS = "queued-provisioning.gke.io"
GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
QUEUED_LABEL = "cloud.google.com/gke-queued"  # on the nodes of a queued provisioning pool (GKE docs)
SCAN_SECONDS = 10.0  # the cluster autoscaler's --scan-interval
Obj = dict[str, Any]


def pool_name(namespace: str, request: str, index: int) -> str:
    return "qp-" + hashlib.sha256(f"{namespace}/{request}/{index}".encode()).hexdigest()[:12]


def _condition(kind: str, reason: str, message: str) -> Obj:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "observedGeneration": 1,
    }


def _has(request: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (request.get("status") or {}).get("conditions") or []
    )


class QueuedProvisioning:
    def __init__(
        self, api_client: k8s.ApiClient, pools: NodePools, *, later: Callable[..., None], zone: str
    ) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)
        # Scanned as the autoscaler scans them: from a cache a watch keeps (listwatch.py), not a list a scan.
        self._requests = ListWatch(
            functools.partial(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL),
            name="provisioningrequests",
            retry_seconds=MIN_SCAN_REAL_SECONDS,
        )
        self.core = k8s.CoreV1Api(api_client)
        self.pools = pools
        self.zone = zone
        self._later = later
        self._stopped = False
        self._lock = threading.Lock()
        self._made: dict[str, tuple[str, str]] = {}  # pool -> its request (namespace, name)
        self._fail: list[str] = []  # messages for the next requests: Failed instead of provisioned
        self.created: list[str] = []  # pools made for requests, in order

    def start(self) -> None:
        self._requests.start()
        self._later(SCAN_SECONDS, self._scan, min_real_seconds=MIN_SCAN_REAL_SECONDS)

    def stop(self) -> None:
        self._stopped = True
        self._requests.stop()

    def fail_next(self, message: str) -> None:
        """The next request GKE looks at fails (Failed=True with `message`), as when the capacity cannot be
        found (the words are the test's; GKE's are not documented)."""
        with self._lock:
            self._fail.append(message)

    def reset_controls(self) -> None:
        with self._lock:
            self._fail.clear()

    def expire(self, namespace: str, name: str, message: str = "booking expired") -> None:
        """The request's booking expires (BookingExpired=True); GKE removes its nodes."""
        self._write(namespace, name, [_condition("BookingExpired", "BookingExpired", message)])

    def _scan(self) -> None:
        if self._stopped:
            return
        try:
            with self._lock:
                self._scan_once()
        except Exception as error:
            log.warning("gke-sim queued provisioning: %s", error, exc_info=True)
        finally:
            self._later(SCAN_SECONDS, self._scan, min_real_seconds=MIN_SCAN_REAL_SECONDS)

    def _scan_once(self) -> None:
        requests = self._requests.items()  # none while the CRD is not installed
        live = set()
        for request in requests:
            meta = request["metadata"]
            key = (meta["namespace"], meta["name"])
            if (request.get("spec") or {}).get("provisioningClassName") != CLASS:
                continue
            ended = any(_has(request, k) for k in ("Failed", "BookingExpired", "CapacityRevoked"))
            if not meta.get("deletionTimestamp") and not ended:
                live.add(key)
            if ended or _has(request, "Provisioned"):
                continue
            if not _has(request, "Accepted"):
                if self._fail:
                    self._write(*key, [_condition("Failed", "ProvisioningFailed", self._fail.pop(0))])
                    live.discard(key)
                    continue
                self._create_pools(request)
                self._write(*key, [_condition("Accepted", "Accepted", "Provisioning Request was accepted")])
                continue
            names = [n for n, owner in self._made.items() if owner == key]
            pools = self.pools.all()
            if names and all(
                n in pools and pools[n].status == container_v1.NodePool.Status.RUNNING for n in names
            ):
                self._write(
                    *key,
                    [
                        _condition(
                            "Provisioned", "Provisioned", "Provisioning Request was successfully provisioned"
                        )
                    ],
                )
        existing = self.pools.all()
        for name, owner in list(self._made.items()):
            if name not in existing:  # gone (deleted below in an earlier scan, or by a test's cleanup)
                del self._made[name]
            elif owner not in live:  # deleted, failed or expired: GKE removes the nodes
                with contextlib.suppress(Exception):  # a create still running: the next scan tries again
                    self.pools.delete(name)

    def _create_pools(self, request: Obj) -> None:
        meta = request["metadata"]
        for index, pod_set in enumerate(request["spec"].get("podSets") or []):
            template = self.core.read_namespaced_pod_template(
                pod_set["podTemplateRef"]["name"], meta["namespace"]
            )
            spec = template.template.spec
            selector = spec.node_selector or {}
            chips = max(
                int(
                    ((c.resources.limits or {}) | (c.resources.requests or {})).get(constants.TPU_RESOURCE, 0)
                    or 0
                )
                for c in spec.containers
            )
            accelerator = selector.get(constants.NODE_LABEL_ACCELERATOR, "")
            topology = selector.get(constants.NODE_LABEL_TOPOLOGY, "")
            machine = next(
                m
                for m in gke_facts.MACHINE_TYPES.values()
                if m.accelerator == accelerator and m.chips == chips
            )
            hosts = int(pod_set.get("count") or 1)
            pool: Obj = {
                "name": pool_name(meta["namespace"], meta["name"], index),
                "initialNodeCount": hosts,
                "locations": [self.zone],
                "config": {"machineType": machine.name},
                "queuedProvisioning": {"enabled": True},
                "management": {"autoUpgrade": True, "autoRepair": True},  # a release channel needs both
            }
            if hosts > 1 or topology != machine.single_host_topology:
                pool["placementPolicy"] = {"type": "COMPACT", "tpuTopology": topology}
            self._made[pool["name"]] = (meta["namespace"], meta["name"])
            try:
                self.pools.create(json.dumps({"nodePool": pool}).encode())
            except errors.GkeError as error:
                # Made by an earlier scan that stopped before the request said Accepted: the request's pool
                # (its name is the request's and the pod set's), as GKE makes one per request, not two.
                if error.http_status != 409:
                    raise
                continue
            self.created.append(pool["name"])

    def _write(self, namespace: str, name: str, conditions: list[Obj]) -> None:
        request = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        kinds = {c["type"] for c in conditions}
        kept = [
            c for c in (request.get("status") or {}).get("conditions") or [] if c.get("type") not in kinds
        ]
        body = {
            "metadata": {"resourceVersion": request["metadata"]["resourceVersion"]},
            "status": {"conditions": kept + conditions},
        }
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, body)
