"""Host maintenance of TPU nodes, as GKE announces and carries it out.

GKE ≥ 1.31.1-gke.2008000 labels a node due for maintenance with `cloud.google.com/scheduled-maintenance-time`
(Unix seconds; about 7 days ahead for TPU hosts), and one host's event interrupts the whole slice (TPU VMs
cannot live-migrate). A node about to go is tainted `cloud.google.com/impending-node-termination`
(shared/reference/gke-tpu.md, GKE "Manage GKE node disruption for GPUs and TPUs"). Here: `announce` labels
the pool's nodes; at that time they are tainted and shut down as a reclaimed VM is, and after the
maintenance (GKE time) the same VMs register again, without the label.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client as k8s

from tpujob_sandbox.gke.nodepools import NodePools

MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"
TERMINATION_TAINT = "cloud.google.com/impending-node-termination"
MAINTENANCE_SECONDS = 600.0  # GKE time the hosts are away (not documented: README)


class HostMaintenance:
    def __init__(self, core: k8s.CoreV1Api, *, later: Callable[..., None]) -> None:
        self.core = core
        # Shuts the given nodes down gracefully (the simulated kubelet's node shutdown); set by the test bed.
        self.shut_down_nodes: Callable[[list[str]], None] = lambda nodes: None
        self._later = later

    def announce(
        self, pools: NodePools, pool: str, at: float, *, wall_clock: Callable[[], float] = time.time
    ) -> None:
        """Maintenance for every node of `pool` at Unix time `at` (a wall-clock time, as the label is)."""
        nodes = pools.node_names(pool)
        for node in nodes:
            self.core.patch_node(node, {"metadata": {"labels": {MAINTENANCE_LABEL: str(int(at))}}})
        delay = max(at - wall_clock(), 0.0)
        # `later` counts GKE time; this delay is wall-clock (the label's), so it is given unscaled.
        self._later(
            delay / pools.time_scale if pools.time_scale else 0.0, self._carry_out, pools, pool, nodes
        )

    def _carry_out(self, pools: NodePools, pool: str, nodes: list[str]) -> None:
        for node in nodes:
            found = self.core.read_node(node)
            taints = [self.core.api_client.sanitize_for_serialization(t) for t in found.spec.taints or []]
            taints.append({"key": TERMINATION_TAINT, "value": "true", "effect": "NoSchedule"})
            self.core.patch_node(node, {"spec": {"taints": taints}})
        self.shut_down_nodes(nodes)
        pools.recreate_nodes(pool, MAINTENANCE_SECONDS)
