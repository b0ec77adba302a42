"""The simulated GKE, one module per GKE resource: the cluster and its rules (cluster), zones, capacity and
quota (zones), node pools and their provisioning (nodepools), operations, the Nodes a pool registers (nodes),
workload policies (policies), faults on demand (faults), GKE's refusals as sent (errors), reservations,
upgrades and auto-repair (upgrades), host maintenance (maintenance), flex-start's autoscaler (autoscaler),
queued provisioning of ProvisioningRequests (queued_provisioning), the
TPU device plugin's metrics (device_plugin), the REST API (http) and the simulator that ties them (server;
state: one cluster's parts).

Every behaviour stands for something GKE documents or is seen doing; the source is beside the code.
"""

from tpujob_sandbox.gke.cluster import ReleaseChannel, SimCluster
from tpujob_sandbox.gke.faults import CallFault, PoolFault
from tpujob_sandbox.gke.nodes import SIMULATED_NODE_LABEL
from tpujob_sandbox.gke.server import GkeSimulator

__all__ = ["SIMULATED_NODE_LABEL", "CallFault", "GkeSimulator", "PoolFault", "ReleaseChannel", "SimCluster"]
