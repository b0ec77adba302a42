"""Pure rendering of a TPUJob into node pool requests, pods and a Service."""

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
