"""Node pools: what GKE accepts, how provisioning goes (and fails, and retries), and deletion.

Time here is GKE time, multiplied by the simulator's `time_scale` (1.0: as slow as GKE; tests use a small
factor, never a special case).

Provisioning, as GKE does it for a TPU pool:
- the create call is validated and accepted at once: the pool is PROVISIONING, its operation RUNNING;
- after PROVISIONING_SECONDS the VMs are requested. A multi-host slice is all or nothing. Quota short or no
  capacity in the zone: the pool goes to ERROR with the reason in `conditions[]` (GCE_QUOTA_EXCEEDED or
  GCE_STOCKOUT, canonicalCode RESOURCE_EXHAUSTED) while the operation keeps RUNNING and GKE retries every
  RETRY_INTERVAL_SECONDS. Meanwhile that operation keeps every other operation of the cluster out, and the
  pool cannot be deleted (shared/reference/gke-tpu.md, "Realities to design for");
- capacity back within RETRY_WINDOW_SECONDS: nodes register, the pool is RUNNING, its conditions clear, the
  operation is DONE. Otherwise the operation ends with RESOURCE_EXHAUSTED and GKE's message; the pool stays in
  ERROR until someone deletes it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.cloud import container_v1
from google.protobuf import json_format
from kubernetes.client.rest import ApiException

from tpujob_sandbox import gke_facts
from tpujob_sandbox.gke import errors, zones
from tpujob_sandbox.gke.cluster import FLEX_START_MAX_RUN_SECONDS, SimCluster, check_flex_start, check_tpu7x
from tpujob_sandbox.gke.faults import Faults, PoolFault, call_fault_error
from tpujob_sandbox.gke.nodes import NodeRegistry, node_name
from tpujob_sandbox.gke.operations import CONCURRENT_OPERATIONS_QUOTA, Operations
from tpujob_sandbox.gke.policies import WorkloadPolicies, pool_policy_missing
from tpujob_sandbox.gke.reservations import Reservations, specific_reservation

log = logging.getLogger(__name__)

# GKE time (seconds). Creating a TPU node pool takes minutes (GKE docs: "can take several minutes"); deleting
# one about two. How long the managed instance group retries: GKE's own stockout message says "Not all
# instances running in IGM after 35m0s". How often: not documented. The one public account is a single log of
# one CPU VM's CreateNodePool, whose stocked-out insert was "retried ... every ~4 min from 03:26 to 04:02"
# before that message (NVIDIA/aicr#2764); other public failures end after 15 s or a minute, and how GKE
# retries a multi-host TPU slice is not documented at all. So the cadence is a setting of the simulator
# (`retry_interval_seconds`), 240 s by default after that one log, not a fact the operator may rely on.
PROVISIONING_SECONDS = 300.0
DELETION_SECONDS = 120.0
# However fast the test bed's clock runs, a periodic loop (a stockout's retries) runs
# at most 50 times a second: at time scale 0 (an instant GKE) it would otherwise spin a core.
MIN_LOOP_REAL_SECONDS = 0.02
# A scan that lists objects from the API server (the autoscaler's pending pods, its ProvisioningRequests) runs
# at most 4 times a second: at the tests' time scale (0.002) GKE's 10 s scan interval is 20 ms, and two such
# scans were a third of a test worker's CPU (py-spy, tests/e2e/test_capacity.py and test_kueue.py) and as
# much again of the API server's. The cluster autoscaler reads an informer's cache; here each scan is a
# list, so its real cadence is the test bed's cost, not GKE's: no test relies on a scan sooner than this.
MIN_SCAN_REAL_SECONDS = 0.25
RETRY_INTERVAL_SECONDS = 240.0
RETRY_WINDOW_SECONDS = 35 * 60.0

Status = container_v1.NodePool.Status
Code = container_v1.StatusCondition.Code


@dataclass
class _Pool:
    pool: container_v1.NodePool
    shape: gke_facts.PoolShape
    zone: str
    node_names: list[str] = field(default_factory=list)
    create_operation: str = ""
    delete_operation: str = ""
    retry_until: float = 0.0  # when GKE stops retrying the VMs (monotonic, real seconds)
    attempt_started: float = 0.0  # when GKE first asked for the VMs (monotonic, real seconds)
    # Flex-start: the pool waits empty; its pods pending since (real seconds), and when its VMs must go.
    queued_since: float | None = None
    run_ends: float | None = None

    @property
    def flex(self) -> bool:
        return bool(self.pool.config.flex_start)

    @property
    def max_run_seconds(self) -> float:
        duration = self.pool.config.max_run_duration
        return duration.total_seconds() if duration else float(FLEX_START_MAX_RUN_SECONDS)

    holds_capacity: bool = False
    # Every zone the pool lists, and the zones its VMs are in once it has them (all of them; a flex-start
    # pool's autoscaler, with location policy ANY, puts the slice in one zone with capacity), and each node's
    # zone.
    zones: list[str] = field(default_factory=list)
    placed: list[str] = field(default_factory=list)
    node_zones: dict[str, str] = field(default_factory=dict)
    # The specific reservation its VMs come out of ((project, name)), taken at create, given back at delete.
    reservation: tuple[str, str] | None = None


def _duration(real_seconds: float, time_scale: float) -> str:
    """GKE time elapsed, as Go prints a duration in GKE's messages (35m4.03s)."""
    seconds = real_seconds / time_scale if time_scale else 0.0
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.2f}s" if minutes else f"{rest:.2f}s"


class NodePools:
    def __init__(
        self,
        cluster: SimCluster,
        operations: Operations,
        nodes: NodeRegistry,
        faults: Faults,
        policies: WorkloadPolicies,
        *,
        capacity: zones.Capacity,
        quota: zones.Quota,
        reservations: Reservations,
        time_scale: float,
        later: Callable[..., None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.operations = operations
        self.nodes = nodes
        self.faults = faults
        self.policies = policies
        self.capacity = capacity
        self.quota = quota
        self.reservations = reservations
        self.time_scale = time_scale
        self.reset_controls()
        self._later = later  # (gke_seconds, function, *args)
        self._clock = clock  # real (monotonic) seconds
        self._pools: dict[str, _Pool] = {}
        # Times GKE asked for each pool's VMs (the first try and every retry), for tests to wait on.
        self.attempts: Counter[str] = Counter()
        self._lock = threading.RLock()

    def reset_controls(self) -> None:
        """The tests' settings of this part of GKE, back to GKE's own."""
        self.retry_window_seconds = RETRY_WINDOW_SECONDS
        self.retry_interval_seconds = RETRY_INTERVAL_SECONDS  # see RETRY_INTERVAL_SECONDS: one log's cadence
        # GKE refusing a pool that carries its own upgrade exclusion (maintenancePolicy.
        # exclusionUntilEndOfSupport): None: taken, as the field is in the API (container_v1 NodePool, since
        # google-cloud-container 2.65). Whether GKE takes it on TPU pools, flex-start pools or every cluster
        # version is not known (README); a test sets GKE's words here to play a GKE that does not.
        self.refuse_upgrade_shield: str | None = None
        # Real GKE refuses a second node pool operation while one runs on the cluster in some cases (see
        # operations.py); off by default, the exclusive retrying create always applies.
        self.serialize_operations = False

    # --- reads ------------------------------------------------------------------------------------------

    def get(self, name: str) -> container_v1.NodePool:
        with self._lock:
            if name not in self._pools:
                raise errors.not_found(f"{self.cluster.parent}/nodePools/{name}")
            return container_v1.NodePool(self._pools[name].pool)

    def all(self) -> dict[str, container_v1.NodePool]:
        with self._lock:
            return {name: container_v1.NodePool(record.pool) for name, record in self._pools.items()}

    def node_names(self, pool: str) -> list[str]:
        with self._lock:
            return list(self._pools[pool].node_names) if pool in self._pools else []

    # --- create -----------------------------------------------------------------------------------------

    def create(self, raw: bytes) -> container_v1.Operation:
        text = raw.decode() or "{}"
        try:
            request = container_v1.CreateNodePoolRequest.from_json(text)
        except json_format.ParseError as error:
            raise errors.invalid_argument(f"Invalid JSON payload received. {error}") from None
        pool = request.node_pool
        machine_type = pool.config.machine_type or "e2-medium"
        fault = self.faults.take_call("CreateNodePool", pool.name)
        if fault is not None:
            raise call_fault_error(fault, self.cluster.name, self.cluster.project, machine_type)
        if (
            self.refuse_upgrade_shield is not None
            and pool.maintenance_policy.exclusion_until_end_of_support.enabled
        ):
            # A 400 INVALID_ARGUMENT, as GKE answers a field it will not take (no public body of GKE refusing
            # this field is known: the words are the test's, by default the shape Google's API front end
            # gives a field it does not know, e.g. 'Invalid JSON payload received. Unknown name "x": Cannot
            # find field.', seen in many public Google API bodies).
            raise errors.invalid_argument(self.refuse_upgrade_shield)
        shape, pool_zones = self._validate(pool, machine_type, json.loads(text))
        with self._lock:
            if pool.name in self._pools:
                raise errors.GkeError(
                    409, "ALREADY_EXISTS", f"Already exists: {self.cluster.parent}/nodePools/{pool.name}."
                )
            busy = self.operations.blocking(serialize=self.serialize_operations)
            if busy:
                raise errors.incompatible_operation(busy)
            self._check_concurrent_operations()
            reservation = self._take_reservation(pool, machine_type, pool_zones[0], shape.nodes)
            pool.config.machine_type = machine_type
            pool.locations = pool_zones
            pool.status = Status.PROVISIONING
            pool.self_link = (
                f"https://container.googleapis.com/v1/{self.cluster.parent}/nodePools/{pool.name}"
            )
            pool.version = pool.version or self.cluster.version
            pool.etag = secrets.token_hex(8)
            exclusion = pool.maintenance_policy.exclusion_until_end_of_support
            if exclusion.enabled:
                # Output only: "the exclusion creation time" (NodePool.ExclusionUntilEndOfSupport); its end
                # (the version's end of support) is left unset: no table of those dates here (README).
                exclusion.start_time = dt.datetime.now(dt.UTC)
            operation = self.operations.start(container_v1.Operation.Type.CREATE_NODE_POOL, pool.name)
            record = _Pool(
                pool,
                shape,
                pool_zones[0],
                create_operation=operation.name,
                reservation=reservation,
                zones=list(pool_zones),
            )
            self._pools[pool.name] = record
            injected = self.faults.take_pool(pool.name)
        delay = PROVISIONING_SECONDS
        if injected is not None and injected.provisioning_seconds is not None:
            delay = injected.provisioning_seconds
        self._later(delay, self._provision, record, injected.fault if injected else None)
        return operation

    def _check_concurrent_operations(self) -> None:
        """At most CONCURRENT_OPERATIONS_QUOTA operations run on a cluster; the next is a 429 (operations.py).
        Checked after the incompatible-operation refusal, which a retrying create answers first (the order
        GKE uses between the two is not documented: README, "Assumed")."""
        if self.operations.running() >= CONCURRENT_OPERATIONS_QUOTA:
            raise errors.too_many_operations(self.cluster.name, CONCURRENT_OPERATIONS_QUOTA)

    def _validate(
        self, pool: container_v1.NodePool, machine_type: str, request_json: dict[str, Any]
    ) -> tuple[gke_facts.PoolShape, list[str]]:
        """GKE's synchronous checks, each an INVALID_ARGUMENT: the pool itself, then the cluster's rules."""
        policy_topology = ""
        policy_name = pool.placement_policy.policy_name
        if policy_name:
            policy = self.policies.find(self.cluster.region, policy_name)
            if policy is None:
                raise pool_policy_missing(self.cluster.project, self.cluster.region, policy_name)
            policy_topology = policy.accelerator_topology
        # A flex-start pool starts empty (initialNodeCount 0); the autoscaler brings its slice up whole, so
        # the slice's size is the autoscaling maximum.
        flex = pool.config.flex_start
        nodes = pool.autoscaling.max_node_count if flex else pool.initial_node_count
        try:
            shape = gke_facts.pool_shape(
                pool.name,
                machine_type,
                nodes,
                pool.placement_policy.tpu_topology,
                policy_topology=policy_topology,
            )
        except gke_facts.InvalidNodePool as error:
            raise errors.invalid_argument(str(error)) from None
        self.cluster.check_management(request_json)
        pool_zones = self.cluster.check_locations(list(pool.locations))
        multi_host = shape.machine.is_tpu and shape.topology != shape.machine.single_host_topology
        if multi_host and len(pool_zones) != 1:
            # A multi-host slice lives in one zone (GKE "Plan TPUs": one node location for a multi-host TPU
            # slice pool). Single-host TPU pools may list several (GKE's flex-start how-to, as
            # shared/reference/gke-tpu.md's fourth audit read it): each zone then gets the pool's node count,
            # as gcloud's --num-nodes is "the number of nodes in the node pool in each of the node pool's
            # zones"; a flex-start pool's slice goes to one zone with capacity (location policy ANY). The
            # refusal's words are ours (no public body found).
            raise errors.invalid_argument(
                f"Multi-host TPU slice node pools must have exactly one node location; got "
                f"{', '.join(pool_zones)}."
            )
        self.cluster.check_machine_type(machine_type, shape.machine.is_tpu, pool_zones)
        check_tpu7x(self.cluster, shape.machine.accelerator)
        if flex:
            run_seconds = (
                int(pool.config.max_run_duration.total_seconds()) if pool.config.max_run_duration else 0
            )
            check_flex_start(self.cluster, shape.machine.accelerator, pool_zones[0], run_seconds)
        return shape, pool_zones

    def _take_reservation(
        self, pool: container_v1.NodePool, machine_type: str, zone: str, vms: int
    ) -> tuple[str, str] | None:
        """A pool consuming a specific reservation takes its VMs from it when GKE accepts the create, or is
        refused at once: 404 when it does not exist, 429 when it is too small (reservations.py's sources)."""
        affinity = pool.config.reservation_affinity
        value = specific_reservation(
            affinity.consume_reservation_type.name, affinity.key, list(affinity.values)
        )
        if value is None:
            return None
        return self.reservations.take(value, pool.name, zone, machine_type, vms)

    def _provision(self, record: _Pool, fault: PoolFault | None) -> None:
        with self._lock:
            if self._pools.get(record.pool.name) is not record or record.delete_operation:
                return
            record.attempt_started = self._clock()
            record.retry_until = record.attempt_started + self.retry_window_seconds * self.time_scale
        if record.flex:  # created empty: its nodes come when its pods wait (autoscaler.py)
            with self._lock:
                record.pool.status = Status.RUNNING  # type: ignore[assignment]  # proto-plus enum members type as int
            self.operations.finish(record.create_operation)
            return
        if fault is PoolFault.ERROR:
            message = (
                "Google Compute Engine: An internal error has occurred. Instances could not be created; "
                "the node pool is in ERROR."
            )
            self._set_error(record, message, Code.UNKNOWN, errors.INTERNAL)
            self.operations.finish(record.create_operation, errors.INTERNAL, message)
            return
        self._attempt(record)

    def _attempt(self, record: _Pool) -> None:
        """Ask for the slice's VMs once; on failure retry later, or give up after the window."""
        with self._lock:
            if self._pools.get(record.pool.name) is not record or record.delete_operation:
                return
            problem = self._reserve(record)
            self.attempts[record.pool.name] += 1
        if problem is None:
            self._bring_up(record)
            return
        code, message = problem
        self._set_error(record, message, code, errors.RESOURCE_EXHAUSTED)
        # A quota shortfall ends the create in seconds (issue #27's audit: GKE does not wait for quota as it
        # waits for capacity); a stockout is retried until the window ends.
        if code == Code.GCE_QUOTA_EXCEEDED or self._clock() >= record.retry_until:
            self.operations.finish(record.create_operation, errors.RESOURCE_EXHAUSTED, message)
            return
        self.operations.hold_cluster(record.create_operation)
        self._later(
            self.retry_interval_seconds, self._attempt, record, min_real_seconds=MIN_LOOP_REAL_SECONDS
        )

    def _reserve(self, record: _Pool) -> tuple[int, str] | None:  # (a Code, GKE's message)
        """Quota, then capacity, for the whole pool at once (every listed zone; a flex-start slice in the
        first listed zone with capacity); None when both are taken."""
        machine = record.shape.machine
        pool_zones = record.zones or [record.zone]
        if not machine.is_tpu or record.reservation is not None:
            # Reserved VMs are held for the project already: no on-demand capacity or quota is asked for
            # (Compute "Reservations overview": a reservation's VMs count against quota when it is made).
            record.placed = [record.zone] if record.flex else list(pool_zones)
            return None
        region = zones.region_of(record.zone)
        family = zones.quota_family(machine.name, spot=bool(record.pool.config.spot))
        vms = record.shape.nodes  # per zone
        wanted = 1 if record.flex else len(pool_zones)
        chips = machine.chips * vms * wanted
        instance = node_name(self.cluster.name, record.pool.name, 0)
        waited = _duration(self._clock() - record.attempt_started, self.time_scale)
        if not self.quota.take(region, family, chips):
            limit = self.quota.available(region, family) or 0
            message = errors.quota_message(family, region, instance, vms * wanted, limit, waited)
            return Code.GCE_QUOTA_EXCEEDED, message
        placed: list[str] = []
        for zone in pool_zones:
            if len(placed) == wanted:
                break
            if self.capacity.take(zone, machine.name, vms):
                placed.append(zone)
            elif not record.flex:
                break  # every zone of the pool, or none
        if len(placed) < wanted:
            for zone in placed:
                self.capacity.give_back(zone, machine.name, vms)
            self.quota.give_back(region, family, chips)
            short = next(z for z in pool_zones if z not in placed)
            message = errors.stockout_message(self.cluster.project, short, instance, vms, waited)
            return Code.GCE_STOCKOUT, message
        record.placed, record.zone = placed, placed[0]
        record.holds_capacity = True
        return None

    def _release_reservation(self, record: _Pool) -> None:
        if record.reservation is not None:
            self.reservations.give_back(record.reservation, record.shape.nodes)
            record.reservation = None

    def _release_capacity(self, record: _Pool) -> None:
        if not record.holds_capacity:
            return
        machine = record.shape.machine
        placed = record.placed or [record.zone]
        for zone in placed:
            self.capacity.give_back(zone, machine.name, record.shape.nodes)
        self.quota.give_back(
            zones.region_of(record.zone),
            zones.quota_family(machine.name, spot=bool(record.pool.config.spot)),
            machine.chips * record.shape.nodes * len(placed),
        )
        record.holds_capacity = False

    def _bring_up(self, record: _Pool) -> None:
        try:
            self.register_slice(record)
        except ApiException as error:
            message = f"Nodes failed to register: {error.reason}"
            self._set_error(record, message, Code.UNKNOWN, errors.INTERNAL)
            self.operations.finish(record.create_operation, errors.INTERNAL, message)
            return
        with self._lock:
            record.pool.status = Status.RUNNING  # type: ignore[assignment]  # proto-plus enum members type as int
            record.pool.status_message = ""
            record.pool.conditions = []
            record.pool.instance_group_urls = [
                f"https://www.googleapis.com/compute/v1/projects/{self.cluster.project}/zones/{record.zone}/"
                f"instanceGroupManagers/gke-{self.cluster.name}-{record.pool.name}-grp"
            ]
        self.operations.finish(record.create_operation)

    def register_slice(self, record: _Pool) -> list[str]:
        """One Node per VM of the pool, all at once (a multi-host slice is all or nothing), in each zone it
        has VMs in."""
        placed = record.placed or [record.zone]
        count = record.shape.nodes
        zoned = {
            node_name(self.cluster.name, record.pool.name, z * count + i): zone
            for z, zone in enumerate(placed)
            for i in range(count)
        }
        for name, zone in zoned.items():
            self.nodes.register(name, record.pool, record.shape, zone)
        with self._lock:
            record.node_names, record.node_zones = list(zoned), zoned
        return list(zoned)

    def flex_pools(self) -> list[_Pool]:
        with self._lock:
            return [
                r
                for r in self._pools.values()
                if r.flex and not r.delete_operation and r.pool.status == Status.RUNNING
            ]

    def take_capacity(self, record: _Pool) -> bool:
        """Quota and capacity for the whole slice, for the autoscaler (None problem: taken)."""
        with self._lock:
            return self._reserve(record) is None

    def release_slice(self, record: _Pool) -> list[str]:
        """The autoscaler took the slice's VMs away: their capacity is free again; the names that went."""
        with self._lock:
            names, record.node_names = record.node_names, []
            self._release_capacity(record)
            record.queued_since = record.run_ends = None
        return names

    def _set_error(self, record: _Pool, message: str, code: int, canonical: int) -> None:
        with self._lock:
            record.pool.status = Status.ERROR  # type: ignore[assignment]  # proto-plus enum members type as int
            record.pool.status_message = message  # deprecated, still filled by GKE
            # Two conditions, as GKE reports a pool it could not make (the audit of issue #27): the cause's
            # deprecated `code` on one only, `canonicalCode` on both. Their order is not documented: the one
            # without the code comes first here, so a reader of the first alone would miss the cause.
            record.pool.conditions = [
                container_v1.StatusCondition(message=message, canonical_code=canonical),
                container_v1.StatusCondition(code=code, message=message, canonical_code=canonical),
            ]

    def set_reconciling(self, name: str, reconciling: bool) -> None:
        """GKE works on the pool's nodes (an upgrade, a repair): RECONCILING ("some work is actively being
        done on the node pool, such as upgrading node software": container_v1 NodePool.Status), then
        RUNNING."""
        with self._lock:
            record = self._pools.get(name)
            if record is not None and not record.delete_operation:
                record.pool.status = Status.RECONCILING if reconciling else Status.RUNNING  # type: ignore[assignment]  # proto-plus enum members type as int

    def recreate_nodes(self, pool: str, after_gke_seconds: float | None = None) -> None:
        """After a preemption GKE recreates the slice's VMs: register the pool's missing Nodes again."""
        self._later(
            PROVISIONING_SECONDS if after_gke_seconds is None else after_gke_seconds, self.restore_nodes, pool
        )

    def restore_nodes(self, pool: str) -> None:
        """Register the pool's Nodes that are missing (its VMs are back)."""
        with self._lock:
            record = self._pools.get(pool)
        if record is None:
            return
        present = self.nodes.present(pool)
        for name in record.node_names:
            if name not in present:
                self.nodes.register(name, record.pool, record.shape, record.node_zones.get(name, record.zone))

    # --- delete -----------------------------------------------------------------------------------------

    def delete(self, name: str) -> container_v1.Operation:
        fault = self.faults.take_call("DeleteNodePool", name)
        if fault is not None:
            raise call_fault_error(fault, self.cluster.name, self.cluster.project, "")
        with self._lock:
            if name not in self._pools:
                raise errors.not_found(f"{self.cluster.parent}/nodePools/{name}")
            record = self._pools[name]
            # A pool whose creation still runs (even while GKE retries a stockout) cannot be deleted.
            if self.operations.is_running(record.create_operation):
                raise errors.incompatible_operation(record.create_operation)
            busy = self.operations.blocking(serialize=self.serialize_operations)
            if busy:
                raise errors.incompatible_operation(busy)
            if record.delete_operation:  # already being deleted: its delete is the incompatible operation
                raise errors.incompatible_operation(record.delete_operation)
            self._check_concurrent_operations()
            record.pool.status = Status.STOPPING  # type: ignore[assignment]  # proto-plus enum members type as int
            operation = self.operations.start(container_v1.Operation.Type.DELETE_NODE_POOL, name)
            record.delete_operation = operation.name
        self._later(DELETION_SECONDS, self._finish_delete, record)
        return operation

    def _finish_delete(self, record: _Pool) -> None:
        name = record.pool.name
        with self._lock:
            current = self._pools.get(name) is record  # a pool created again under the name stays
        if current:
            self.nodes.drain_and_remove(list(record.node_names))
            with self._lock:
                self._pools.pop(name, None)
                self._release_capacity(record)
                self._release_reservation(record)
        self.operations.finish(record.delete_operation)

    def remove_all(self, *, drain: bool = True) -> None:
        """Drop every pool and its nodes at once, outside the API (between tests; counts no calls).
        drain=False deletes the Node objects without listing their pods first (for a benchmark)."""
        with self._lock:
            records = list(self._pools.values())
            self._pools.clear()
            for record in records:
                self._release_capacity(record)
                self._release_reservation(record)
        self.operations.cancel_running("The node pool was removed.")
        for record in records:
            if drain:
                self.nodes.drain_and_remove(list(record.node_names))
                continue
            for node in record.node_names:
                self.nodes.remove(node)
