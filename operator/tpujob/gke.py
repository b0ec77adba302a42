"""GKE node pools through `google-cloud-container`: the operator's only GKE I/O.

Every call is short: create/delete return a long-running operation that is never waited on here;
the reconcile loop polls the pool's state on its next pass instead.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import container_v1

from tpujob import status as s
from tpujob.api import constants as c
from tpujob.render import Cluster

log = logging.getLogger(__name__)

# Seconds per GKE call: a hung call must not stall a reconcile pass.
CALL_TIMEOUT = 30.0


@dataclass(frozen=True)
class OwnedPool:
    name: str
    namespace: str
    job: str
    job_uid: str
    state: str


def classify_error(error: Exception) -> s.GKEError:
    """GKE's answer -> the reason the status shows while the operator retries."""
    message = getattr(error, "message", None) or str(error)
    text = message.lower()
    if s.classify_stockout(text):
        return s.GKEError(s.REASON_STOCKOUT, message)
    if "quota" in text and isinstance(error, gexc.Forbidden | gexc.TooManyRequests):
        return s.GKEError(s.REASON_QUOTA, message)
    if "incompatible operation" in text or isinstance(error, gexc.FailedPrecondition):
        return s.GKEError(s.REASON_GKE_BUSY, message)
    if isinstance(error, gexc.TooManyRequests):
        return s.GKEError(s.REASON_GKE_BUSY, message)
    return s.GKEError(s.REASON_GKE_UNAVAILABLE, message)


def make_client(endpoint: str | None) -> container_v1.ClusterManagerClient:
    """The real client; with an endpoint (the sandbox's simulated GKE) over REST without credentials."""
    if endpoint:
        return container_v1.ClusterManagerClient(
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            transport="rest",
            client_options=ClientOptions(api_endpoint=endpoint),
        )
    return container_v1.ClusterManagerClient()  # Application Default Credentials / Workload Identity


class NodePools:
    """Create, inspect and delete one cluster's node pools."""

    def __init__(self, cluster: Cluster, client: container_v1.ClusterManagerClient) -> None:
        self.cluster = cluster
        self.client = client

    def _path(self, name: str) -> str:
        return f"{self.cluster.parent}/nodePools/{name}"

    def state(self, slice_index: int, name: str) -> s.PoolView:
        try:
            pool = self.client.get_node_pool(name=self._path(name), timeout=CALL_TIMEOUT)
        except gexc.NotFound:
            return s.PoolView(slice_index, name, s.POOL_MISSING)
        return s.PoolView(slice_index, name, pool.status.name, pool.status_message)

    def create(self, pool: dict[str, Any]) -> s.GKEError | None:
        """Ask GKE for a pool (rendered REST JSON). None when accepted or already there."""
        request = container_v1.NodePool.from_json(json.dumps(pool))
        try:
            self.client.create_node_pool(parent=self.cluster.parent, node_pool=request, timeout=CALL_TIMEOUT)
        except gexc.AlreadyExists:
            return None
        except gexc.GoogleAPICallError as error:
            log.warning("create node pool %s: %s", pool["name"], error)
            return classify_error(error)
        log.info("node pool %s: create requested", pool["name"])
        return None

    def delete(self, name: str) -> s.GKEError | None:
        """Start deleting a pool. None when accepted or already gone."""
        try:
            self.client.delete_node_pool(name=self._path(name), timeout=CALL_TIMEOUT)
        except gexc.NotFound:
            return None
        except gexc.GoogleAPICallError as error:
            log.info("delete node pool %s: %s (will retry)", name, error)
            return classify_error(error)
        log.info("node pool %s: delete requested", name)
        return None

    def owned(self) -> list[OwnedPool]:
        """Pools labelled as made by this operator, to find the ones whose TPUJob is gone."""
        response = self.client.list_node_pools(parent=self.cluster.parent, timeout=CALL_TIMEOUT)
        found = []
        for pool in response.node_pools:
            labels = dict(pool.config.labels)
            if labels.get(c.POOL_LABEL_MANAGED_BY) != c.MANAGED_BY:
                continue
            found.append(
                OwnedPool(
                    name=pool.name,
                    namespace=labels.get(c.POOL_LABEL_NAMESPACE, ""),
                    job=labels.get(c.POOL_LABEL_JOB, ""),
                    job_uid=labels.get(c.POOL_LABEL_JOB_UID, ""),
                    state=pool.status.name,
                )
            )
        return found
