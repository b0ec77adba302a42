"""Everything the operator creates for a job, in the order it creates it (reconciler/act.py): the Kueue
Workload first when the job is queued (nothing else until Kueue admits it), then one GKE CreateNodePool
request per slice, and once the pools are up, the namespace's workers' NetworkPolicy (made by its first
job, before any pod: a worker never runs open to the pod network), each large slice's host-list ConfigMap,
the pods, and the headless Service after them (reconciler/behind.py). For `tpujob render`; a test holds it to
what a pass really creates.

Pure. What only the running cluster decides is left out: a Kueue admission's flavors (their node labels and
taints on the pools and pods), the Workload's priority (its PriorityClass' value: 0 here), and the pods'
affinity away from nodes with GKE maintenance due (it depends on the time of the create).
"""

from __future__ import annotations

from typing import Any

from tpujob.api.job import TPUJob
from tpujob.render.cluster import Cluster
from tpujob.render.network import network_policy
from tpujob.render.plan import hosts_config_maps, pods, service
from tpujob.render.pools import node_pools
from tpujob.render.workload import PriorityFact, workload

# How a GKE request shows among the Kubernetes objects: the RPC, then its fields (REST JSON).
GKE_CREATE_NODE_POOL = "CreateNodePool"


def create_node_pool_request(cluster: Cluster, pool: dict[str, Any]) -> dict[str, Any]:
    """The CreateNodePool request as GKE's REST API takes it (projects.locations.clusters.nodePools)."""
    return {"gke": GKE_CREATE_NODE_POOL, "parent": cluster.parent, "nodePool": pool}


def creates(job: TPUJob, cluster: Cluster, queued: bool) -> list[dict[str, Any]]:
    """What the operator makes for `job`, in order; `queued`: its first pass makes a Kueue Workload."""
    made: list[dict[str, Any]] = []
    if queued:
        made.append(workload(job, cluster, PriorityFact()))
    made += [create_node_pool_request(cluster, pool) for pool in node_pools(job, cluster)]
    if cluster.network_policy:
        made.append(network_policy(job.metadata.namespace or "default", cluster.metrics_from))
    made += hosts_config_maps(job)
    made += pods(job, cluster)
    made.append(service(job))
    return made
