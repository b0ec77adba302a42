"""What a pass knows of Kueue for a job labelled kueue.x-k8s.io/queue-name (its Workload, the admission's
flavors, the LocalQueue) and what it writes to the job's Workload: the pure core's Kueue views, read by
`queue` (status/queue.py) and carried in Observed and Decision (model.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpujob.render.workload import KueueApi, PodSetFacts, PriorityFact
from tpujob.status.queue_position import QueuePosition

if TYPE_CHECKING:  # start_estimate reads the model's helpers
    from tpujob.status.start_estimate import QueueFacts


@dataclass(frozen=True)
class FlavorView:
    """A Kueue ResourceFlavor as read: what it puts on the pods it admits (nodeLabels as node selectors,
    tolerations) and on the nodes it stands for (nodeTaints), as Kueue's podset.FromAssignment reads it."""

    name: str
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: tuple[dict[str, str], ...] = ()
    tolerations: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class WorkloadView:
    """The job's Kueue Workload as the watch last showed it (conditions, admission: Kueue's wire form)."""

    name: str
    resource_version: str
    owner_uid: str = ""  # its controller's UID: the job it belongs to
    conditions: tuple[dict[str, Any], ...] = ()
    admission: dict[str, Any] | None = None  # status.admission: clusterQueue, podSetAssignments
    active: bool = True
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    generation: int = 0
    pod_sets: tuple[PodSetFacts, ...] = ()  # spec.podSets, what of them the job's must match
    # status.admissionChecks: each check's name, state and podSetUpdates (render/podset_updates.py).
    admission_checks: tuple[dict[str, Any], ...] = ()
    priority: int = 0  # spec.priority, Kueue's first order of waiting Workloads
    uid: str = ""  # its UID: Kueue's last order, among equals
    # Kueue's second: its queue-order timestamp (Workload.GetQueueOrderTimestamp, RFC 3339; "" unknown).
    queue_order_time: str = ""

    def condition(self, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def is_true(self, type_: str) -> bool:
        found = self.condition(type_)
        return found is not None and found.get("status") == "True"


@dataclass(frozen=True)
class QueueView:
    """What a pass knows of a job labelled kueue.x-k8s.io/queue-name: the operator's Kueue setting, its
    Workload (once the Workload watch has listed), the admission's flavors and the LocalQueue."""

    name: str  # the LocalQueue
    enabled: bool = True  # TPUJOB_KUEUE: the operator runs as a Kueue job integration
    known: bool = True  # the Workload watch has listed: `workload` None means there is none
    workload: WorkloadView | None = None
    flavors: dict[str, FlavorView] = field(default_factory=dict)  # the admission's, by name (missing: unread)
    cluster_queue: str = ""  # the LocalQueue's spec.clusterQueue ("" not known)
    pending_workloads: int | None = None  # the LocalQueue's status.pendingWorkloads
    # Where its Workload stands in the ClusterQueue (Kueue's visibility API; None: not served, not read yet,
    # or not pending there: status/queue_position.py).
    position: QueuePosition | None = None
    priority: PriorityFact | None = None  # read only while a Workload is to be created
    problem: str = ""  # why Kueue's API cannot be used now ("" none)
    api: KueueApi = field(default_factory=KueueApi)  # the Workload API version found served, its pod-set cap
    # Its ClusterQueue's quota, holders and waiters, for a job waiting for quota (status/start_estimate.py).
    facts: QueueFacts | None = None


@dataclass
class WorkloadWrites:
    """What a pass writes to the job's Workload, as a Kueue job integration does (jobframework)."""

    # The Workload as the pass saw it: the writes are conditional on its resourceVersion.
    name: str = ""
    resource_version: str = ""
    finalizers: tuple[str, ...] = ()
    api: KueueApi = field(default_factory=KueueApi)  # the version the writes speak
    create: bool = False
    priority: PriorityFact | None = None  # of the Workload to create
    # The whole new status.conditions (Kueue's wire form), and whether status.admission goes with them.
    conditions: list[dict[str, Any]] | None = None
    clear_admission: bool = False
    active: bool | None = None  # spec.active to set (a suspended job deactivates its Workload)
    release_finalizer: bool = False  # kueue.x-k8s.io/resource-in-use, once the job lets the Workload go
    delete: bool = False  # the Workload no longer fits the job: let go and deleted (a new one follows)

    def __bool__(self) -> bool:
        return bool(
            self.create or self.conditions is not None or self.active is not None or self.release_finalizer
        )
