"""One simulated cluster's parts, as the simulator holds them and the HTTP layer serves them."""

from __future__ import annotations

from dataclasses import dataclass

from tpujob_sandbox.gke.cluster import SimCluster
from tpujob_sandbox.gke.nodepools import NodePools
from tpujob_sandbox.gke.operations import Operations


@dataclass(frozen=True)
class ClusterState:
    model: SimCluster
    operations: Operations
    pools: NodePools
