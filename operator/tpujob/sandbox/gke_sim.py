"""A simulated GKE API: node pools and operations over REST, as `google-cloud-container` sends them.

The real client drives it unchanged through `client_options.api_endpoint`. Requests are parsed with GKE's own
message types (unknown fields are refused, as GKE does) and answered in GKE's JSON. A node pool goes
PROVISIONING -> RUNNING after a delay and registers one Node per VM in the API server, labelled, tainted and
sized like a real GKE TPU node; deleting the pool drains and removes them.

Faults, as the client sees them from real GKE:
- call faults answer one request with an HTTP error (quota 403, too many operations 429, incompatible
  operation 400, internal 500, unavailable 503);
- pool faults change how provisioning ends (stockout: the operation ends with RESOURCE_EXHAUSTED and the
  pool in ERROR; error: the pool ends in ERROR; slow: a longer provisioning delay).
"""

from __future__ import annotations

import enum
import hashlib
import http.server
import json
import logging
import re
import secrets
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from google.cloud import container_v1
from google.protobuf import json_format
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tpujob.api import constants
from tpujob.sandbox import gke_facts

log = logging.getLogger(__name__)

SIMULATED_NODE_LABEL = "sandbox.tpujob.dev/simulated"
NODE_VERSION = "1.20.2-gke.sim"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
TPU_TAINT_VALUE = "present"
MAX_PODS_PER_NODE = 110


class CallFault(enum.StrEnum):
    """A request answered with the HTTP error real GKE gives in that situation."""

    QUOTA = "quota"
    TOO_MANY_OPERATIONS = "too_many_operations"
    INCOMPATIBLE_OPERATION = "incompatible_operation"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"


class PoolFault(enum.StrEnum):
    """How a node pool's provisioning ends."""

    STOCKOUT = "stockout"
    ERROR = "error"
    SLOW = "slow"


@dataclass
class GkeError(Exception):
    http_status: int
    status: str  # google.rpc.Code name
    message: str
    reason: str = ""

    def body(self) -> dict[str, Any]:
        details: list[dict[str, Any]] = []
        if self.reason:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": "container.googleapis.com",
                }
            )
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RequestInfo", "requestId": f"0x{secrets.token_hex(8)}"}
        )
        return {
            "error": {
                "code": self.http_status,
                "message": self.message,
                "status": self.status,
                "details": details,
            }
        }


# google.rpc.Code values used in Operation.error.
CANCELLED = 1
RESOURCE_EXHAUSTED = 8
INTERNAL = 13


def incompatible_operation(operation: str) -> GkeError:
    return GkeError(
        400,
        "FAILED_PRECONDITION",
        f"Cluster is running incompatible operation {operation}.",
        "CLUSTER_ALREADY_HAS_OPERATION",
    )


def call_fault_error(fault: CallFault, cluster: str, location: str, machine_type: str) -> GkeError:
    """The error real GKE answers for each injected call fault (wording from real responses)."""
    if fault is CallFault.QUOTA:
        resource = machine_type.upper().replace("-", "_") or "CPUS"
        return GkeError(
            403,
            "PERMISSION_DENIED",
            f'Insufficient regional quota to satisfy request: resource "{resource}": request requires '
            f"'1.0' and is short '1.0'. project has a quota of '0.0' with '0.0' available. "
            "View and manage quotas at https://console.cloud.google.com/iam-admin/quotas.",
            "QUOTA_EXCEEDED",
        )
    if fault is CallFault.TOO_MANY_OPERATIONS:
        return GkeError(
            429,
            "RESOURCE_EXHAUSTED",
            f'Too many operations: cluster "{cluster}" hits the concurrent operations quota 5, '
            "please try again later.",
            "RATE_LIMIT_EXCEEDED",
        )
    if fault is CallFault.INCOMPATIBLE_OPERATION:
        return incompatible_operation(f"operation-{int(time.time() * 1000)}-{secrets.token_hex(4)}")
    if fault is CallFault.INTERNAL:
        return GkeError(500, "INTERNAL", "Internal error encountered.")
    return GkeError(503, "UNAVAILABLE", "The service is currently unavailable.")


def stockout_message(location: str) -> str:
    return (
        "Google Compute Engine: Not all instances running in IGM. Current errors: [GCE_STOCKOUT]: "
        f"Instance creation failed: The zone 'projects/sandbox/zones/{location}' does not have enough "
        "resources available to fulfill the request. Try a different zone, or try again later."
    )


ADMIN_PREFIX = "/sandbox/v1/"


@dataclass
class InjectedCallFault:
    fault: CallFault
    rpc: str
    pool: str | None
    remaining: int | None  # None: every matching call


@dataclass
class InjectedPoolFault:
    fault: PoolFault
    pool: str | None
    remaining: int | None
    provisioning_seconds: float | None


@dataclass(frozen=True)
class RecordedCall:
    rpc: str
    method: str
    path: str
    body: dict[str, Any]


@dataclass
class _Pool:
    pool: container_v1.NodePool
    shape: gke_facts.PoolShape
    node_names: list[str] = field(default_factory=list)
    create_operation: str = ""
    delete_operation: str = ""


_LOCATION = r"^/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)"
_POOLS = _LOCATION + r"/clusters/(?P<c>[^/]+)/nodePools"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern), rpc)
    for method, pattern, rpc in (
        ("POST", _POOLS + "$", "CreateNodePool"),
        ("GET", _POOLS + "$", "ListNodePools"),
        ("GET", _POOLS + r"/(?P<np>[^/:]+)$", "GetNodePool"),
        ("DELETE", _POOLS + r"/(?P<np>[^/:]+)$", "DeleteNodePool"),
        ("GET", _LOCATION + r"/operations/(?P<op>[^/:]+)$", "GetOperation"),
        ("GET", _LOCATION + r"/operations$", "ListOperations"),
    )
]


def route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    for route_method, pattern, rpc in _ROUTES:
        match = pattern.match(path)
        if match and route_method == method:
            return rpc, match.groupdict()
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1_000_000:06d}Z"


def node_name(cluster: str, pool: str, index: int) -> str:
    """GKE's shape: gke-<cluster>-<pool>-<8 hex>-<4 chars>, at most 63 characters."""
    digest = hashlib.sha256(f"{cluster}/{pool}".encode()).hexdigest()
    prefix = f"gke-{cluster}-{pool}"[:50].rstrip("-")
    return f"{prefix}-{digest[:8]}-{digest[8:11]}{index:x}"[:63]


def node_manifest(
    name: str, pool: container_v1.NodePool, shape: gke_facts.PoolShape, location: str, internal_ip: str
) -> dict[str, Any]:
    """The Node object GKE's kubelet registers for one VM of `pool` (spec only; status is set after)."""
    machine = shape.machine
    config = pool.config
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": machine.name,
        "topology.kubernetes.io/zone": location,
        "topology.kubernetes.io/region": location.rsplit("-", 1)[0],
        "cloud.google.com/machine-family": machine.name.split("-")[0],
        constants.NODE_LABEL_NODEPOOL: pool.name,
        SIMULATED_NODE_LABEL: "true",
        **dict(config.labels),
    }
    taints = [{"key": t.key, "value": t.value, "effect": _taint_effect(t.effect)} for t in config.taints]
    if machine.is_tpu:
        labels[constants.NODE_LABEL_ACCELERATOR] = machine.accelerator
        labels[constants.NODE_LABEL_TOPOLOGY] = shape.topology
        taints.append({"key": constants.TPU_TAINT_KEY, "value": TPU_TAINT_VALUE, "effect": "NoSchedule"})
    if config.spot:
        labels[constants.NODE_LABEL_SPOT] = "true"
        labels["cloud.google.com/gke-provisioning"] = "spot"
    if config.preemptible:
        labels["cloud.google.com/gke-preemptible"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"gce://sandbox/{location}/{name}", "taints": taints},
    }


def _taint_effect(effect: container_v1.NodeTaint.Effect) -> str:
    return {
        container_v1.NodeTaint.Effect.NO_SCHEDULE: "NoSchedule",
        container_v1.NodeTaint.Effect.PREFER_NO_SCHEDULE: "PreferNoSchedule",
        container_v1.NodeTaint.Effect.NO_EXECUTE: "NoExecute",
    }.get(effect, "NoSchedule")


def node_status(shape: gke_facts.PoolShape, name: str, internal_ip: str) -> dict[str, Any]:
    machine = shape.machine
    capacity = {
        "cpu": str(machine.cpus),
        "memory": f"{machine.memory_gib}Gi",
        "pods": str(MAX_PODS_PER_NODE),
        "ephemeral-storage": "100Gi",
    }
    allocatable = {
        "cpu": f"{gke_facts.allocatable_cpu_millis(machine.cpus)}m",
        "memory": f"{gke_facts.allocatable_memory_mib(machine.memory_gib)}Mi",
        "pods": str(MAX_PODS_PER_NODE),
        "ephemeral-storage": "90Gi",
    }
    if machine.is_tpu:
        capacity[constants.TPU_RESOURCE] = allocatable[constants.TPU_RESOURCE] = str(machine.chips)
    now = _now()

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": [
            condition(
                "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"
            ),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition(
                "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
            ),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}],
        "nodeInfo": {
            "kubeletVersion": f"v{NODE_VERSION}",
            "kubeProxyVersion": f"v{NODE_VERSION}",
            "containerRuntimeVersion": "containerd://sandbox",
            "operatingSystem": "linux",
            "architecture": "amd64",
            "osImage": "Container-Optimized OS from Google",
            "kernelVersion": "sandbox",
            "machineID": name,
            "systemUUID": name,
            "bootID": name,
        },
    }


class GkeSimulator:
    """One simulated GKE zonal cluster. Start with `start()`; the endpoint is `endpoint`."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        project: str = "tpujob-sandbox",
        location: str = "us-central2-b",
        cluster: str = "sandbox",
        provisioning_seconds: float = 1.0,
        deletion_seconds: float = 0.2,
        serialize_operations: bool = False,
    ) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.project, self.location, self.cluster = project, location, cluster
        # Simulated GKE time: how long provisioning and deletion take (seconds).
        self.provisioning_seconds = provisioning_seconds
        self.deletion_seconds = deletion_seconds
        # Real GKE refuses a second node pool operation while one runs on the cluster; off by default.
        self.serialize_operations = serialize_operations
        self.calls: Counter[str] = Counter()
        self.recorded: list[RecordedCall] = []
        self._call_faults: list[InjectedCallFault] = []
        self._pool_faults: list[InjectedPoolFault] = []
        self._pools: dict[str, _Pool] = {}
        self._operations: dict[str, container_v1.Operation] = {}
        self._timers: list[threading.Timer] = []
        self._next_ip = 2
        self._lock = threading.RLock()
        self._server: http.server.ThreadingHTTPServer | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self, port: int = 0) -> GkeSimulator:
        simulator = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                simulator._handle(self)

            do_POST = do_DELETE = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("gke-sim: " + format, *args)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="gke-sim", daemon=True).start()
        return self

    def stop(self) -> None:
        with self._lock:
            for timer in self._timers:
                timer.cancel()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def endpoint(self) -> str:
        assert self._server, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    def client(self) -> container_v1.ClusterManagerClient:
        """The real google-cloud-container client, pointed at this simulator."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        return container_v1.ClusterManagerClient(
            credentials=AnonymousCredentials(),
            transport="rest",
            client_options=ClientOptions(api_endpoint=self.endpoint),
        )

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
        with self._lock:
            self._call_faults.append(InjectedCallFault(CallFault(fault), rpc, pool, times))

    def inject_pool_fault(
        self,
        fault: PoolFault | str,
        *,
        pool: str | None = None,
        times: int | None = 1,
        provisioning_seconds: float | None = None,
    ) -> None:
        """Make the next `times` created pools (or those named `pool`) end as `fault` describes."""
        with self._lock:
            self._pool_faults.append(InjectedPoolFault(PoolFault(fault), pool, times, provisioning_seconds))

    def clear_faults(self) -> None:
        with self._lock:
            self._call_faults.clear()
            self._pool_faults.clear()

    def reset_calls(self) -> None:
        with self._lock:
            self.calls.clear()
            self.recorded.clear()

    def remove_all_pools(self, *, drain: bool = True) -> None:
        """Drop every pool and its nodes at once, outside the API (between tests; counts no calls).
        drain=False deletes the Node objects without looking for their pods first (one pod list per node
        is slow with thousands of pods; for a benchmark whose pods were never scheduled)."""
        with self._lock:
            records = list(self._pools.values())
            self._pools.clear()
            running = (container_v1.Operation.Status.PENDING, container_v1.Operation.Status.RUNNING)
            for operation in self._operations.values():
                if operation.status in running:
                    operation.status = container_v1.Operation.Status.DONE
                    operation.error.code, operation.error.message = CANCELLED, "The node pool was removed."
        for record in records:
            for name in record.node_names:
                if drain:
                    self._drain_and_remove(name)
                else:
                    self._remove_node(name)

    def node_pools(self) -> dict[str, container_v1.NodePool]:
        with self._lock:
            return {name: container_v1.NodePool(record.pool) for name, record in self._pools.items()}

    def node_names(self, pool: str) -> list[str]:
        with self._lock:
            return list(self._pools[pool].node_names) if pool in self._pools else []

    # ---- HTTP ------------------------------------------------------------------------------------------

    def _handle(self, request: http.server.BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(request.path)
        query = urllib.parse.parse_qs(url.query)
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        status, payload = self._answer(request.command, url.path, raw)
        # rest_numeric_enums: the client asks for integer enums with `$alt=json;enum-encoding=int`.
        numeric_enums = any("enum-encoding=int" in value for value in query.get("$alt", []))
        data = self._encode(payload, numeric_enums).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=UTF-8")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def _answer(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        try:
            body = json.loads(raw) if raw else {}
            if path.startswith(ADMIN_PREFIX):
                return 200, self._admin(method, path, body)
            matched = route(method, path)
            if matched is None:
                raise GkeError(404, "NOT_FOUND", f"The requested URL {path} was not found on this server.")
            rpc, params = matched
            with self._lock:
                self.calls[rpc] += 1
                self.recorded.append(RecordedCall(rpc, method, path, body))
            self._check_parent(params)
            return 200, self._dispatch(rpc, params, raw)
        except GkeError as error:
            return error.http_status, error.body()
        except json.JSONDecodeError as error:
            return 400, GkeError(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {error}").body()

    @staticmethod
    def _encode(payload: Any, numeric_enums: bool) -> str:
        if isinstance(payload, dict):
            return json.dumps(payload)
        return type(payload).to_json(
            payload,
            use_integers_for_enums=numeric_enums,
            indent=None,
            always_print_fields_with_no_presence=False,
        )

    def _admin(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Test controls over HTTP, for a sandbox running in another process (`tpujob sandbox up`):
        POST /sandbox/v1/faults {"fault": "quota", "rpc": "CreateNodePool", "pool": null, "times": 1}
        POST /sandbox/v1/faults {"poolFault": "stockout", "pool": null, "times": 1, "provisioningSeconds": 9}
        DELETE /sandbox/v1/faults; GET /sandbox/v1/calls (calls received per RPC)."""
        try:
            if (method, path) == ("GET", ADMIN_PREFIX + "calls"):
                with self._lock:
                    return dict(self.calls)
            if (method, path) == ("DELETE", ADMIN_PREFIX + "faults"):
                self.clear_faults()
                return {}
            if (method, path) == ("POST", ADMIN_PREFIX + "faults") and "fault" in body:
                self.inject_call_fault(
                    body["fault"],
                    body.get("rpc", "CreateNodePool"),
                    pool=body.get("pool"),
                    times=body.get("times", 1),
                )
                return {}
            if (method, path) == ("POST", ADMIN_PREFIX + "faults") and "poolFault" in body:
                self.inject_pool_fault(
                    body["poolFault"],
                    pool=body.get("pool"),
                    times=body.get("times", 1),
                    provisioning_seconds=body.get("provisioningSeconds"),
                )
                return {}
        except ValueError as error:
            raise GkeError(400, "INVALID_ARGUMENT", str(error)) from None
        raise GkeError(404, "NOT_FOUND", f"No sandbox control at {method} {path}.")

    def _check_parent(self, params: dict[str, str]) -> None:
        if params["p"] != self.project or params["l"] != self.location:
            raise GkeError(404, "NOT_FOUND", f"Not found: projects/{params['p']}/locations/{params['l']}.")
        if "c" in params and params["c"] != self.cluster:
            raise GkeError(
                404,
                "NOT_FOUND",
                f"Not found: projects/{self.project}/locations/{self.location}/clusters/{params['c']}.",
            )

    def _dispatch(self, rpc: str, params: dict[str, str], raw: bytes) -> Any:
        if rpc == "CreateNodePool":
            return self._create(raw)
        if rpc == "ListNodePools":
            self._take_call_fault(rpc, None)
            return container_v1.ListNodePoolsResponse(node_pools=list(self.node_pools().values()))
        if rpc == "GetNodePool":
            self._take_call_fault(rpc, params["np"])
            return self._pool(params["np"]).pool
        if rpc == "DeleteNodePool":
            return self._delete(params["np"])
        if rpc == "GetOperation":
            self._take_call_fault(rpc, None)
            with self._lock:
                if params["op"] not in self._operations:
                    raise GkeError(404, "NOT_FOUND", f"Not found: operation {params['op']}.")
                return self._operations[params["op"]]
        self._take_call_fault(rpc, None)
        with self._lock:
            return container_v1.ListOperationsResponse(operations=list(self._operations.values()))

    def _pool(self, name: str) -> _Pool:
        with self._lock:
            if name not in self._pools:
                raise GkeError(404, "NOT_FOUND", f"Not found: {self.parent}/nodePools/{name}.")
            return self._pools[name]

    def _take_call_fault(self, rpc: str, pool: str | None, machine_type: str = "") -> None:
        with self._lock:
            for injected in self._call_faults:
                if injected.rpc == rpc and injected.pool in (None, pool):
                    if injected.remaining is not None:
                        injected.remaining -= 1
                        if injected.remaining <= 0:
                            self._call_faults.remove(injected)
                    raise call_fault_error(injected.fault, self.cluster, self.location, machine_type)

    def _take_pool_fault(self, pool: str) -> InjectedPoolFault | None:
        with self._lock:
            for injected in self._pool_faults:
                if injected.pool in (None, pool):
                    if injected.remaining is not None:
                        injected.remaining -= 1
                        if injected.remaining <= 0:
                            self._pool_faults.remove(injected)
                    return injected
        return None

    def _running_operation(self) -> str | None:
        running = (container_v1.Operation.Status.PENDING, container_v1.Operation.Status.RUNNING)
        return next((name for name, op in self._operations.items() if op.status in running), None)

    # ---- create and delete -----------------------------------------------------------------------------

    def _create(self, raw: bytes) -> container_v1.Operation:
        try:
            request = container_v1.CreateNodePoolRequest.from_json(raw.decode() or "{}")
        except json_format.ParseError as error:
            raise GkeError(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {error}") from None
        pool = request.node_pool
        self._take_call_fault("CreateNodePool", pool.name, pool.config.machine_type)
        machine_type = pool.config.machine_type or "e2-medium"
        try:
            shape = gke_facts.pool_shape(
                pool.name, machine_type, pool.initial_node_count, pool.placement_policy.tpu_topology
            )
        except gke_facts.InvalidNodePool as error:
            raise GkeError(400, "INVALID_ARGUMENT", str(error)) from None
        if pool.locations and list(pool.locations) != [self.location]:
            raise GkeError(
                400,
                "INVALID_ARGUMENT",
                f"Node locations {list(pool.locations)} must be within {self.location}.",
            )
        with self._lock:
            if pool.name in self._pools:
                raise GkeError(409, "ALREADY_EXISTS", f"Already exists: {self.parent}/nodePools/{pool.name}.")
            busy = self._running_operation()
            if self.serialize_operations and busy:
                raise incompatible_operation(busy)
            pool.config.machine_type = machine_type
            pool.locations = [self.location]
            pool.status = container_v1.NodePool.Status.PROVISIONING
            pool.self_link = f"https://container.googleapis.com/v1/{self.parent}/nodePools/{pool.name}"
            pool.version = NODE_VERSION
            pool.etag = secrets.token_hex(8)
            operation = self._new_operation(container_v1.Operation.Type.CREATE_NODE_POOL, pool.name)
            self._pools[pool.name] = _Pool(pool, shape, create_operation=operation.name)
            fault = self._take_pool_fault(pool.name)
            delay = self.provisioning_seconds
            if fault and fault.provisioning_seconds is not None:
                delay = fault.provisioning_seconds
            self._later(delay, self._finish_create, pool.name, operation.name, fault.fault if fault else None)
            return container_v1.Operation(operation)

    def _new_operation(self, kind: container_v1.Operation.Type, pool: str) -> container_v1.Operation:
        name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(4)}"
        operation = container_v1.Operation(
            name=name,
            zone=self.location,
            location=self.location,
            operation_type=kind,
            status=container_v1.Operation.Status.RUNNING,
            self_link=f"https://container.googleapis.com/v1/projects/{self.project}/locations/{self.location}/operations/{name}",
            target_link=f"https://container.googleapis.com/v1/{self.parent}/nodePools/{pool}",
            start_time=_now(),
        )
        self._operations[name] = operation
        return operation

    def _later(self, delay: float, function: Any, *args: Any) -> None:
        timer = threading.Timer(delay, self._guarded, (function, *args))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    @staticmethod
    def _guarded(function: Any, *args: Any) -> None:
        try:
            function(*args)
        except Exception:
            log.exception("gke-sim: %s failed", getattr(function, "__name__", function))

    def _finish_operation(self, name: str, error_code: int = 0, message: str = "") -> None:
        with self._lock:
            operation = self._operations[name]
            operation.status = container_v1.Operation.Status.DONE
            operation.end_time = _now()
            if error_code:
                operation.status_message = message
                operation.error.code = error_code
                operation.error.message = message

    def _finish_create(self, pool_name: str, operation: str, fault: PoolFault | None) -> None:
        with self._lock:
            record = self._pools.get(pool_name)
        if record is None:
            return
        if fault is PoolFault.STOCKOUT:
            message = stockout_message(self.location)
            self._set_pool_error(
                record, message, container_v1.StatusCondition.Code.GCE_STOCKOUT, RESOURCE_EXHAUSTED
            )
            self._finish_operation(operation, RESOURCE_EXHAUSTED, message)
            return
        if fault is PoolFault.ERROR:
            message = (
                "Google Compute Engine: An internal error has occurred. Instances could not be created; "
                "the node pool is in ERROR."
            )
            self._set_pool_error(record, message, container_v1.StatusCondition.Code.UNKNOWN, INTERNAL)
            self._finish_operation(operation, INTERNAL, message)
            return
        try:
            names = self._register_nodes(record)
        except ApiException as error:
            message = f"Nodes failed to register: {error.reason}"
            self._set_pool_error(record, message, container_v1.StatusCondition.Code.UNKNOWN, INTERNAL)
            self._finish_operation(operation, INTERNAL, message)
            return
        with self._lock:
            record.node_names = names
            record.pool.status = container_v1.NodePool.Status.RUNNING
            record.pool.instance_group_urls = [
                f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{self.location}/"
                f"instanceGroupManagers/gke-{self.cluster}-{pool_name}-grp"
            ]
        self._finish_operation(operation)

    def _set_pool_error(
        self, record: _Pool, message: str, code: container_v1.StatusCondition.Code, canonical: int
    ) -> None:
        with self._lock:
            record.pool.status = container_v1.NodePool.Status.ERROR
            record.pool.status_message = message
            record.pool.conditions = [
                container_v1.StatusCondition(code=code, message=message, canonical_code=canonical)
            ]

    def _register_nodes(self, record: _Pool) -> list[str]:
        names = [node_name(self.cluster, record.pool.name, index) for index in range(record.shape.nodes)]
        for name in names:
            self._register_node(record, name)
        return names

    def _register_node(self, record: _Pool, name: str) -> None:
        """Create the Node, post a Ready status, then lift the not-ready taint (as the kubelet and the
        node lifecycle controller would)."""
        with self._lock:
            ip = f"10.128.{self._next_ip // 250}.{self._next_ip % 250 + 2}"
            self._next_ip += 1
        manifest = node_manifest(name, record.pool, record.shape, self.location, ip)
        self.core.create_node(manifest)
        self.core.patch_node_status(name, {"status": node_status(record.shape, name, ip)})
        self.core.patch_node(name, {"spec": {"taints": manifest["spec"]["taints"]}})

    def recreate_nodes(self, pool: str, after_seconds: float | None = None) -> None:
        """After a preemption GKE recreates the slice's VMs: register the pool's missing Nodes again, after
        `after_seconds` (default: the provisioning delay)."""
        delay = self.provisioning_seconds if after_seconds is None else after_seconds
        self._later(delay, self._register_missing_nodes, pool)

    def _register_missing_nodes(self, pool: str) -> None:
        with self._lock:
            record = self._pools.get(pool)
        if record is None:
            return
        present = {
            node.metadata.name
            for node in self.core.list_node(label_selector=f"{constants.NODE_LABEL_NODEPOOL}={pool}").items
        }
        for name in record.node_names:
            if name not in present:
                self._register_node(record, name)

    def _delete(self, pool_name: str) -> container_v1.Operation:
        self._take_call_fault("DeleteNodePool", pool_name)
        record = self._pool(pool_name)
        with self._lock:
            busy = self._running_operation()
            create = self._operations.get(record.create_operation)
            # GKE refuses to delete a pool whose creation still runs (and, serialized, any pool while busy).
            if create and create.status != container_v1.Operation.Status.DONE:
                raise incompatible_operation(create.name)
            if self.serialize_operations and busy:
                raise incompatible_operation(busy)
            # A pool already being deleted: its delete operation is the incompatible one.
            if record.delete_operation:
                raise incompatible_operation(record.delete_operation)
            record.pool.status = container_v1.NodePool.Status.STOPPING
            operation = self._new_operation(container_v1.Operation.Type.DELETE_NODE_POOL, pool_name)
            record.delete_operation = operation.name
            self._later(self.deletion_seconds, self._finish_delete, record, operation.name)
            return container_v1.Operation(operation)

    def _finish_delete(self, record: _Pool, operation: str) -> None:
        pool_name = record.pool.name
        with self._lock:
            # Only the record this delete was for: a pool created again under the same name stays.
            current = self._pools.get(pool_name) is record
        if current:
            for name in record.node_names:
                self._drain_and_remove(name)
            with self._lock:
                self._pools.pop(pool_name, None)
        self._finish_operation(operation)

    def _drain_and_remove(self, node: str) -> None:
        """GKE drains a node (deletes its pods gracefully) before removing its VM and Node object."""
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        for pod in pods:
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
        self._remove_node(node)

    def _remove_node(self, node: str) -> None:
        try:
            self.core.delete_node(node)
        except ApiException as error:
            if error.status != 404:
                raise
