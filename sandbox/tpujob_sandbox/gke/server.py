"""The simulated GKE: `GkeSimulator`, the one object tests and the sandbox hold, with its clusters, the
project's capacity, quota, faults and workload policies, its lifecycle and the test controls. Its HTTP API,
which the real clients drive unchanged through `client_options.api_endpoint`, is `http.GkeHttpApi`.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.cloud import container_v1
from kubernetes import client as k8s

from tpujob_sandbox.gke import zones
from tpujob_sandbox.gke.autoscaler import FlexStartAutoscaler
from tpujob_sandbox.gke.cluster import ReleaseChannel, SimCluster
from tpujob_sandbox.gke.device_plugin import TpuDevicePlugin
from tpujob_sandbox.gke.faults import CallFault, Faults, PoolFault
from tpujob_sandbox.gke.http import GkeHttpApi, RecordedCall
from tpujob_sandbox.gke.maintenance import HostMaintenance
from tpujob_sandbox.gke.nodepools import NodePools
from tpujob_sandbox.gke.nodes import STANDALONE_NODE_OWNER, NodeRegistry
from tpujob_sandbox.gke.operations import Operations
from tpujob_sandbox.gke.policies import WorkloadPolicies, WorkloadPolicy
from tpujob_sandbox.gke.queued_provisioning import QueuedProvisioning
from tpujob_sandbox.gke.reservations import Reservations
from tpujob_sandbox.gke.state import ClusterState
from tpujob_sandbox.gke.upgrades import NodeUpgrades

log = logging.getLogger(__name__)


@dataclass
class _AcceptHook:
    rpc: str
    remaining: int
    action: Callable[[], None]


class GkeSimulator:
    """One simulated GKE cluster in one project. Start with `start()`; the endpoint is `endpoint`."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        cluster: SimCluster | None = None,
        time_scale: float = 1.0,
        node_owner: str = STANDALONE_NODE_OWNER,
    ) -> None:
        self.time_scale = time_scale
        self.node_owner = node_owner  # the SIMULATED_NODE_LABEL value of its Nodes
        self.calls: Counter[str] = Counter()
        self.recorded: list[RecordedCall] = []
        self.faults = Faults()
        self.policies = WorkloadPolicies()
        # Capacity and quota belong to zones and the project, shared by every cluster of the project.
        self.capacity = zones.Capacity()
        self.quota = zones.Quota()
        # Compute reservations of the project (test control: `reservations.create(name, zone, type, vms)`).
        cluster = cluster or SimCluster()
        self.reservations = Reservations(cluster.project)
        self._core = k8s.CoreV1Api(api_client)
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._clusters: dict[tuple[str, str], ClusterState] = {}
        self._versions: dict[tuple[str, str], str] = {}  # each cluster's GKE version as it was made
        self._on_accepted: list[_AcceptHook] = []
        default = self.add_cluster(cluster)
        # The first cluster's parts, which most tests and the operator's default settings use.
        self.cluster_model, self.pools, self.operations = default.model, default.pools, default.operations
        self.autoscaler = FlexStartAutoscaler(
            self._core,
            lambda: [state.pools for state in self._clusters.values()],
            later=self._later,
            time_scale=time_scale,
        )
        # ProvisioningRequests of class queued-provisioning.gke.io (Kueue's ProvisioningRequest check).
        self.queued_provisioning = QueuedProvisioning(
            api_client, self.pools, later=self._later, zone=cluster.default_node_zones[0]
        )
        self.maintenance = HostMaintenance(self._core, later=self._later)
        self.upgrades = NodeUpgrades(self._core, later=self._later)
        # GKE's TPU device plugin on each TPU node: its Prometheus endpoint (device_plugin.py).
        self.device_plugin = TpuDevicePlugin(self._core, owner=node_owner, time_scale=time_scale)
        self._http = GkeHttpApi(self)

    def add_cluster(self, model: SimCluster) -> ClusterState:
        """Another cluster in the same project (for example in a region that offers flex-start)."""
        operations = Operations(model.project, model.location, model.parent)
        nodes = NodeRegistry(self._core, model.project, model.version, self.node_owner)
        pools = NodePools(
            model,
            operations,
            nodes,
            self.faults,
            self.policies,
            capacity=self.capacity,
            quota=self.quota,
            reservations=self.reservations,
            time_scale=self.time_scale,
            later=self._later,
        )
        state = ClusterState(model, operations, pools)
        self._clusters[(model.location, model.name)] = state
        self._versions[(model.location, model.name)] = model.version
        return state

    def cluster_state(self, location: str, name: str) -> ClusterState:
        return self._clusters[(location, name)]

    def clusters_in(self, location: str) -> list[ClusterState]:
        return [state for (where, _), state in self._clusters.items() if where == location]

    # ---- where -----------------------------------------------------------------------------------------

    @property
    def project(self) -> str:
        return self.cluster_model.project

    @property
    def location(self) -> str:
        return self.cluster_model.location

    @property
    def cluster(self) -> str:
        return self.cluster_model.name

    @property
    def parent(self) -> str:
        return self.cluster_model.parent

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self, port: int = 0) -> GkeSimulator:
        self._http.start(port)
        self.autoscaler.start()
        self.queued_provisioning.start()
        self.device_plugin.start()
        return self

    def stop(self) -> None:
        self.autoscaler.stop()
        self.queued_provisioning.stop()
        self.device_plugin.stop()
        with self._lock:
            for timer in self._timers:
                timer.cancel()
        self._http.stop()

    @property
    def endpoint(self) -> str:
        return self._http.endpoint

    def client(self) -> container_v1.ClusterManagerClient:
        """The real google-cloud-container client, pointed at this simulator."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        return container_v1.ClusterManagerClient(
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            transport="rest",
            client_options=ClientOptions(api_endpoint=self.endpoint),
        )

    def _later(self, gke_seconds: float, function: Any, *args: Any, min_real_seconds: float = 0.0) -> None:
        """Run `function(*args)` after `gke_seconds` of GKE time. Periodic work passes `min_real_seconds`: at
        time scale 0 (an instant GKE) a loop must not spin."""
        delay = max(gke_seconds * self.time_scale, min_real_seconds)
        timer = threading.Timer(delay, self._guarded, (function, *args))
        timer.daemon = True
        with self._lock:
            self._timers = [t for t in self._timers if t.is_alive()]
            self._timers.append(timer)
        timer.start()

    @staticmethod
    def _guarded(function: Any, *args: Any) -> None:
        try:
            function(*args)
        except Exception:
            log.exception("gke-sim: %s failed", getattr(function, "__name__", function))

    # ---- test controls ---------------------------------------------------------------------------------

    def inject_call_fault(
        self,
        fault: CallFault | str,
        rpc: str = "CreateNodePool",
        *,
        pool: str | None = None,
        times: int | None = 1,
    ) -> None:
        """Answer the next `times` calls of `rpc` (optionally only for node pool `pool`) with `fault`."""
        self.faults.inject_call(fault, rpc, pool, times)

    def inject_pool_fault(
        self,
        fault: PoolFault | str,
        *,
        pool: str | None = None,
        times: int | None = 1,
        provisioning_seconds: float | None = None,
    ) -> None:
        """Make the next `times` created pools (or those named `pool`) end as `fault` describes;
        `provisioning_seconds` is GKE time."""
        self.faults.inject_pool(fault, pool, times, provisioning_seconds)

    def refuse_upgrade_shield(
        self,
        message: str = 'Invalid JSON payload received. Unknown name "exclusionUntilEndOfSupport" at '
        "'node_pool.maintenance_policy': Cannot find field.",
    ) -> None:
        """Test control: CreateNodePool refuses (400 INVALID_ARGUMENT, `message`) every pool that carries its
        own upgrade exclusion, until clear_faults (nodepools.py says why this is not a known GKE fact)."""
        self.pools.refuse_upgrade_shield = message

    def update_node_pool(
        self, pool: str, gke_seconds: float = 60.0, *, location: str = "", cluster: str = ""
    ) -> str:
        """Test control: a metadata-only update of `pool` (labels, say): an UPGRADE_NODES operation that
        leaves the nodes alone (upgrades.py), RECONCILING for `gke_seconds` of GKE time. Its operation."""
        return self.upgrades.update_metadata(self._state(location, cluster), pool, gke_seconds)

    def set_capacity(self, zone: str, machine_type: str, vms: int | None) -> None:
        """Free VMs of `machine_type` in `zone` (0: stocked out; None: plenty)."""
        self.capacity.set(zone, machine_type, vms)

    def set_cluster_version(self, version: str, *, location: str = "", cluster: str = "") -> None:
        """Test control: the cluster (default: the first) runs GKE `version` until clear_faults, as after an
        upgrade or for a cluster made on an older one. GetCluster and the version rules see it."""
        self._clusters[(location or self.location, cluster or self.cluster)].model.version = version

    def set_quota(self, region: str, machine_type: str, chips: int | None, *, spot: bool = False) -> None:
        """Free chips of the machine type's TPU quota in `region` (None: plenty)."""
        self.quota.set(region, zones.quota_family(machine_type, spot=spot), chips)

    def add_workload_policy(self, name: str, accelerator_topology: str, region: str | None = None) -> None:
        self.policies.add(WorkloadPolicy(name, region or self.cluster_model.region, accelerator_topology))

    def announce_maintenance(self, pool: str, at: float, *, location: str = "", cluster: str = "") -> None:
        """Host maintenance for every node of `pool` at Unix time `at` (wall clock, as GKE's label)."""
        state = self._clusters[(location or self.location, cluster or self.cluster)]
        self.maintenance.announce(state.pools, pool, at)

    def add_maintenance_exclusion(
        self,
        name: str,
        start: dt.datetime,
        end: dt.datetime,
        scope: str = "NO_MINOR_OR_NODE_UPGRADES",
        *,
        location: str = "",
        cluster: str = "",
    ) -> None:
        """A maintenance exclusion on the cluster (GetCluster's
        maintenancePolicy.window.maintenanceExclusions), until clear_faults."""
        model = self._state(location, cluster).model
        options = container_v1.MaintenanceExclusionOptions(scope=scope)  # the enum by its name, as in JSON
        model.maintenance_policy.window.maintenance_exclusions[name] = container_v1.TimeWindow(
            start_time=start, end_time=end, maintenance_exclusion_options=options
        )

    def run_upgrade_round(
        self, *, minor: bool = False, end_of_support: bool = False, location: str = "", cluster: str = ""
    ) -> list[str]:
        """GKE's automatic node upgrade reaches the cluster now: the pools it starts upgrading (upgrades.py;
        the exclusions of the cluster and of each pool are respected until `end_of_support`)."""
        return self.upgrades.upgrade_round(
            self._state(location, cluster), minor=minor, end_of_support=end_of_support
        )

    def auto_repair(self, pool: str, node: str = "", *, location: str = "", cluster: str = "") -> None:
        """GKE auto-repairs `node` of `pool` (default: its first): the whole slice is drained, recreated."""
        self.upgrades.auto_repair(self._state(location, cluster), pool, node)

    def _state(self, location: str, cluster: str) -> ClusterState:
        return self._clusters[(location or self.location, cluster or self.cluster)]

    def on_accepted(self, rpc: str, action: Callable[[], None], *, nth: int = 1) -> None:
        """Test control, not a GKE behaviour: run `action` when GKE has accepted the `nth` `rpc` call from
        now, before the caller has GKE's answer (as if the caller died at that instant)."""
        with self._lock:
            self._on_accepted.append(_AcceptHook(rpc, nth, action))

    def accepted(self, rpc: str) -> None:
        """The HTTP layer: GKE accepted a call and is about to answer it."""
        due = []
        with self._lock:
            for hook in list(self._on_accepted):
                if hook.rpc == rpc:
                    hook.remaining -= 1
                    if hook.remaining <= 0:
                        self._on_accepted.remove(hook)
                        due.append(hook.action)
        for action in due:
            action()

    def clear_faults(self) -> None:
        """Faults, capacity and quota limits, reservations, workload policies, test hooks, GKE's retry window,
        the clusters' versions and maintenance policies: back to a healthy project (a test's setting must not
        reach the next test)."""
        with self._lock:
            self._on_accepted.clear()
        self.pools.reset_controls()
        for key, state in self._clusters.items():
            state.model.version = self._versions[key]
            state.model.maintenance_policy = container_v1.MaintenancePolicy()
        self.faults.clear()
        self.queued_provisioning.reset_controls()
        self.capacity.clear()
        self.quota.clear()
        self.reservations.clear()
        self.policies.clear()

    def record_call(self, call: RecordedCall) -> None:
        with self._lock:
            self.calls[call.rpc] += 1
            self.recorded.append(call)

    def calls_received(self) -> dict[str, int]:
        """Calls received per RPC."""
        with self._lock:
            return dict(self.calls)

    def reset_calls(self) -> None:
        with self._lock:
            self.calls.clear()
            self.recorded.clear()

    def remove_all_pools(self, *, drain: bool = True) -> None:
        for state in list(self._clusters.values()):
            state.pools.remove_all(drain=drain)

    def node_pools(self) -> dict[str, container_v1.NodePool]:
        return self.pools.all()

    def node_names(self, pool: str) -> list[str]:
        return self.pools.node_names(pool)

    def recreate_nodes(self, pool: str, after_seconds: float | None = None) -> None:
        """GKE brings a preempted slice's VMs back after `after_seconds` of GKE time (default: the
        provisioning time)."""
        self.pools.recreate_nodes(pool, after_seconds)


__all__ = ["CallFault", "ClusterState", "GkeSimulator", "PoolFault", "ReleaseChannel", "SimCluster"]
