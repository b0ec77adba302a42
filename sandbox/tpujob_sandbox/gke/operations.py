"""GKE long-running operations: one per create or delete, polled by the client until DONE.

GKE runs node pool operations of one cluster one at a time where they conflict; a client that starts a
conflicting one is refused with "Cluster is running incompatible operation" (errors.incompatible_operation).
And a cluster runs at most CONCURRENT_OPERATIONS_QUOTA operations at once: the next one is refused with 429
"Too many operations: cluster "C" hits the concurrent operations quota 5, please try again later."
(hashicorp/terraform-provider-google#15205 on CreateNodePool/DeleteNodePool, #15579; the provider retries it,
GoogleCloudPlatform/magic-modules#8828), errors.too_many_operations.
"""

from __future__ import annotations

import threading

from google.cloud import container_v1

from tpujob_sandbox.gke.errors import new_operation_name
from tpujob_sandbox.gke.nodes import now_rfc3339

RUNNING_STATES = (container_v1.Operation.Status.PENDING, container_v1.Operation.Status.RUNNING)
# "hits the concurrent operations quota 5" (hashicorp/terraform-provider-google#15205, #15579).
CONCURRENT_OPERATIONS_QUOTA = 5


class Operations:
    def __init__(self, project: str, location: str, cluster_parent: str) -> None:
        self.project, self.location, self.cluster_parent = project, location, cluster_parent
        self._operations: dict[str, container_v1.Operation] = {}
        # Operations that keep every other operation of the cluster out (a create GKE keeps retrying).
        self._exclusive: set[str] = set()
        self._lock = threading.RLock()

    def start(self, kind: int, pool: str, node: str = "") -> container_v1.Operation:
        """A running operation on `pool`; with `node`, its target is that node of the pool, as a repair's is
        ("For node pool repairs, there may be multiple nodes being repaired, but only one will be the target":
        container_v1 Operation.target_link, whose example ends `/nodePools/my-np/node/my-node`)."""
        name = new_operation_name()
        base = "https://container.googleapis.com/v1"
        target = f"{base}/{self.cluster_parent}/nodePools/{pool}" + (f"/node/{node}" if node else "")
        operation = container_v1.Operation(
            name=name,
            zone=self.location,
            location=self.location,
            operation_type=kind,
            status=container_v1.Operation.Status.RUNNING,
            self_link=f"{base}/projects/{self.project}/locations/{self.location}/operations/{name}",
            target_link=target,
            start_time=now_rfc3339(),
        )
        with self._lock:
            self._operations[name] = operation
        return container_v1.Operation(operation)

    def finish(self, name: str, error_code: int = 0, message: str = "") -> None:
        with self._lock:
            operation = self._operations[name]
            operation.status = container_v1.Operation.Status.DONE  # type: ignore[assignment]  # proto-plus enums type as int
            operation.end_time = now_rfc3339()
            if error_code:
                operation.status_message = message
                operation.error.code = error_code
                operation.error.message = message
            self._exclusive.discard(name)

    def hold_cluster(self, name: str) -> None:
        """The running operation `name` keeps every other operation of the cluster out until it ends."""
        with self._lock:
            self._exclusive.add(name)

    def is_running(self, name: str) -> bool:
        with self._lock:
            operation = self._operations.get(name)
            return operation is not None and operation.status in RUNNING_STATES

    def blocking(self, *, serialize: bool, exclude: str = "") -> str | None:
        """The running operation a new one conflicts with: an exclusive one always, any one if serialized."""
        with self._lock:
            for name, operation in self._operations.items():
                if name == exclude or operation.status not in RUNNING_STATES:
                    continue
                if serialize or name in self._exclusive:
                    return name
        return None

    def running(self) -> int:
        """How many operations of the cluster run now (what the concurrent operations quota counts)."""
        with self._lock:
            return sum(1 for operation in self._operations.values() if operation.status in RUNNING_STATES)

    def get(self, name: str) -> container_v1.Operation | None:
        with self._lock:
            operation = self._operations.get(name)
            return container_v1.Operation(operation) if operation is not None else None

    def all(self) -> list[container_v1.Operation]:
        with self._lock:
            return [container_v1.Operation(op) for op in self._operations.values()]

    def cancel_running(self, message: str) -> None:
        """Outside the API (between tests): every running operation ends CANCELLED."""
        with self._lock:
            for operation in self._operations.values():
                if operation.status in RUNNING_STATES:
                    operation.status = container_v1.Operation.Status.DONE  # type: ignore[assignment]  # proto-plus enums type as int
                    operation.error.code, operation.error.message = 1, message
            self._exclusive.clear()
