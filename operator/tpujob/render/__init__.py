"""Pure rendering of a TPUJob into node pool requests, pods and a Service.

plan (pods, the Service, host-list ConfigMaps), pod_parts (the team's part of a pod, merged), inplace (what a
pod needs to restart in place), pools (the GKE node pool requests), workload (the Kueue Workload), network
(the NetworkPolicy), creates (all of it in the order the operator creates it), cluster (the operator's cluster
settings, a job's slice), naming (stable names), meta (labels and owner), placement (a Kueue admission's
flavors on a slice), podset_updates (an admission check's pod set updates, merged as Kueue's podset.Merge).
"""

from tpujob.render.cluster import Cluster
from tpujob.render.naming import node_pool_name, pod_name, service_name, worker_address, worker_hostname
from tpujob.render.plan import Plan, pod, pods, render_plan, service, worker_env
from tpujob.render.pools import node_pools

__all__ = [
    "Cluster",
    "Plan",
    "node_pool_name",
    "node_pools",
    "pod",
    "pod_name",
    "pods",
    "render_plan",
    "service",
    "service_name",
    "worker_address",
    "worker_env",
    "worker_hostname",
]
