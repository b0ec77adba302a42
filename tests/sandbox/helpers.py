"""Node pools through the real client, and CRDs of the tests' own, for the tests of the test bed."""

from __future__ import annotations

import json
from typing import Any

from google.cloud import container_v1

from tpujob.api import constants as c
from tpujob.render import Cluster
from tpujob_sandbox import GkeSimulator, wait_for

DONE = container_v1.Operation.Status.DONE
ANY_FIELDS = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def namespaced_crd(group: str, kind: str, plural: str, schema: dict[str, Any] = ANY_FIELDS) -> dict[str, Any]:
    """A namespaced CRD of one version, v1, whose objects `schema` describes (default: any fields)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
            ],
        },
    }


def render_cluster(gke: GkeSimulator) -> Cluster:
    """The operator's view of the simulated cluster: its pools go to the cluster's first zone."""
    zone = gke.cluster_model.default_node_zones[0]
    return Cluster(project=gke.project, location=gke.location, cluster=gke.cluster, zone=zone)


def pool_request(**fields) -> container_v1.NodePool:
    """A v5e pool in us-central1-a (a zone of the sandbox's region that offers v5e and v5p)."""
    pool = {
        "name": "pool",
        "initialNodeCount": 1,
        "locations": ["us-central1-a"],
        "config": {"machineType": "ct5lp-hightpu-4t"},
        **fields,
    }
    return container_v1.NodePool.from_json(json.dumps(pool))


def wait_operation(client: container_v1.ClusterManagerClient, gke: GkeSimulator, operation, timeout=30):
    name = f"projects/{gke.project}/locations/{gke.location}/operations/{operation.name}"
    return wait_for(
        lambda: (op := client.get_operation(name=name)).status == DONE and op,
        timeout=timeout,
        what=f"operation {operation.name}",
    )


def create_pool(gke: GkeSimulator, pool: container_v1.NodePool) -> container_v1.Operation:
    client = gke.client()
    operation = client.create_node_pool(parent=gke.parent, node_pool=pool)
    return wait_operation(client, gke, operation)


def nodes_of(core, pool: str):
    return core.list_node(label_selector=f"{c.NODE_LABEL_NODEPOOL}={pool}").items


def tpu_nodes(gke: GkeSimulator, core, pool: str, count: int = 1) -> list[str]:
    """`count` single-host v5e nodes (4 chips each) in a new pool; their names."""
    create_pool(gke, pool_request(name=pool, initialNodeCount=count))
    return sorted(node.metadata.name for node in nodes_of(core, pool))
