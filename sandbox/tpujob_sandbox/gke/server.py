"""The simulated GKE API over HTTP, as `google-cloud-container` (and google-cloud-compute, for workload
policies) send it over REST. `GkeSimulator` is the one object tests and the sandbox hold.

The real clients drive it unchanged through `client_options.api_endpoint`. Requests are parsed with GKE's
own message types (unknown fields are refused, as GKE does) and answered in GKE's JSON.
"""

from __future__ import annotations

import http.server
import json
import logging
import re
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from typing import Any

from google.cloud import container_v1
from kubernetes import client as k8s

from tpujob_sandbox.gke import errors, zones
from tpujob_sandbox.gke.autoscaler import FlexStartAutoscaler
from tpujob_sandbox.gke.cluster import ReleaseChannel, SimCluster
from tpujob_sandbox.gke.errors import GkeError
from tpujob_sandbox.gke.faults import CallFault, Faults, PoolFault, call_fault_error
from tpujob_sandbox.gke.maintenance import HostMaintenance
from tpujob_sandbox.gke.nodepools import NodePools
from tpujob_sandbox.gke.nodes import NodeRegistry
from tpujob_sandbox.gke.operations import Operations
from tpujob_sandbox.gke.policies import WorkloadPolicies, WorkloadPolicy, policy_not_found

log = logging.getLogger(__name__)

ADMIN_PREFIX = "/sandbox/v1/"

_LOCATION = r"^/v1/projects/(?P<p>[^/]+)/locations/(?P<l>[^/]+)"
_CLUSTER = _LOCATION + r"/clusters/(?P<c>[^/:]+)"
_POOLS = _CLUSTER + r"/nodePools"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern), rpc)
    for method, pattern, rpc in (
        ("GET", _CLUSTER + "$", "GetCluster"),
        ("POST", _POOLS + "$", "CreateNodePool"),
        ("GET", _POOLS + "$", "ListNodePools"),
        ("GET", _POOLS + r"/(?P<np>[^/:]+)$", "GetNodePool"),
        ("DELETE", _POOLS + r"/(?P<np>[^/:]+)$", "DeleteNodePool"),
        ("GET", _LOCATION + r"/operations/(?P<op>[^/:]+)$", "GetOperation"),
        ("GET", _LOCATION + r"/operations$", "ListOperations"),
        (
            "GET",
            r"^/compute/v1/projects/(?P<p>[^/]+)/regions/(?P<r>[^/]+)/resourcePolicies/(?P<rp>[^/:]+)$",
            "GetResourcePolicy",
        ),
    )
]


def route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    for route_method, pattern, rpc in _ROUTES:
        match = pattern.match(path)
        if match and route_method == method:
            return rpc, match.groupdict()
    return None


@dataclass(frozen=True)
class _ClusterState:
    model: SimCluster
    operations: Operations
    pools: NodePools


@dataclass(frozen=True)
class RecordedCall:
    rpc: str
    method: str
    path: str
    body: dict[str, Any]


class GkeSimulator:
    """One simulated GKE cluster in one project. Start with `start()`; the endpoint is `endpoint`."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        cluster: SimCluster | None = None,
        time_scale: float = 1.0,
    ) -> None:
        self.time_scale = time_scale
        self.calls: Counter[str] = Counter()
        self.recorded: list[RecordedCall] = []
        self.faults = Faults()
        self.policies = WorkloadPolicies()
        # Capacity and quota belong to zones and the project, shared by every cluster of the project.
        self.capacity = zones.Capacity()
        self.quota = zones.Quota()
        self._core = k8s.CoreV1Api(api_client)
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._clusters: dict[tuple[str, str], _ClusterState] = {}
        default = self.add_cluster(cluster or SimCluster())
        # The first cluster's parts, which most tests and the operator's default settings use.
        self.cluster_model, self.pools, self.operations = default.model, default.pools, default.operations
        self.autoscaler = FlexStartAutoscaler(
            self._core,
            lambda: [state.pools for state in self._clusters.values()],
            later=self._later,
            time_scale=time_scale,
        )
        self.maintenance = HostMaintenance(self._core, later=self._later)
        self._server: http.server.ThreadingHTTPServer | None = None

    def add_cluster(self, model: SimCluster) -> _ClusterState:
        """Another cluster in the same project (for example in a region that offers flex-start)."""
        operations = Operations(model.project, model.location, model.parent)
        nodes = NodeRegistry(self._core, model.project, model.version)
        pools = NodePools(
            model,
            operations,
            nodes,
            self.faults,
            self.policies,
            capacity=self.capacity,
            quota=self.quota,
            time_scale=self.time_scale,
            later=self._later,
        )
        state = _ClusterState(model, operations, pools)
        self._clusters[(model.location, model.name)] = state
        return state

    def cluster_state(self, location: str, name: str) -> _ClusterState:
        return self._clusters[(location, name)]

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
        simulator = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                simulator._handle(self)

            do_POST = do_DELETE = do_PUT = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("gke-sim: " + format, *args)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="gke-sim", daemon=True).start()
        self.autoscaler.start()
        return self

    def stop(self) -> None:
        self.autoscaler.stop()
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

    def client(self) -> container_v1.ClusterManagerClient:
        """The real google-cloud-container client, pointed at this simulator."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        return container_v1.ClusterManagerClient(
            credentials=AnonymousCredentials(),
            transport="rest",
            client_options=ClientOptions(api_endpoint=self.endpoint),
        )

    def _later(self, gke_seconds: float, function: Any, *args: Any) -> None:
        timer = threading.Timer(gke_seconds * self.time_scale, self._guarded, (function, *args))
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

    def set_capacity(self, zone: str, machine_type: str, vms: int | None) -> None:
        """Free VMs of `machine_type` in `zone` (0: stocked out; None: plenty)."""
        self.capacity.set(zone, machine_type, vms)

    def set_quota(self, region: str, machine_type: str, chips: int | None) -> None:
        """Free chips of the machine type's TPU quota in `region` (None: plenty)."""
        self.quota.set(region, zones.quota_family(machine_type), chips)

    def add_workload_policy(self, name: str, accelerator_topology: str, region: str | None = None) -> None:
        self.policies.add(WorkloadPolicy(name, region or self.cluster_model.region, accelerator_topology))

    def announce_maintenance(self, pool: str, at: float, *, location: str = "", cluster: str = "") -> None:
        """Host maintenance for every node of `pool` at Unix time `at` (wall clock, as GKE's label)."""
        state = self._clusters[(location or self.location, cluster or self.cluster)]
        self.maintenance.announce(state.pools, pool, at)

    def clear_faults(self) -> None:
        """Faults, capacity and quota limits, workload policies: back to a healthy project."""
        self.faults.clear()
        self.capacity.clear()
        self.quota.clear()
        self.policies.clear()

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
            return 200, self._dispatch(rpc, params, raw)
        except GkeError as error:
            return error.http_status, error.body()
        except json.JSONDecodeError as error:
            return 400, errors.invalid_argument(f"Invalid JSON payload received. {error}").body()

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

    def _in_location(self, params: dict[str, str]) -> list[_ClusterState]:
        found = [s for (location, _), s in self._clusters.items() if location == params["l"]]
        if params["p"] != self.project or not found:
            raise errors.not_found(f"projects/{params['p']}/locations/{params['l']}")
        return found

    def _cluster_of(self, params: dict[str, str]) -> _ClusterState:
        self._in_location(params)
        state = self._clusters.get((params["l"], params["c"]))
        if state is None:
            raise errors.not_found(f"projects/{params['p']}/locations/{params['l']}/clusters/{params['c']}")
        return state

    def _dispatch(self, rpc: str, params: dict[str, str], raw: bytes) -> Any:
        if rpc == "GetResourcePolicy":
            return self._get_policy(params)
        if rpc in ("GetOperation", "ListOperations"):
            return self._operations(rpc, params)
        state = self._cluster_of(params)
        if rpc == "CreateNodePool":
            return state.pools.create(raw)
        if rpc == "DeleteNodePool":
            return state.pools.delete(params["np"])
        fault = self.faults.take_call(rpc, params.get("np"))
        if fault is not None:
            raise call_fault_error(fault, state.model.name, state.model.region, "")
        if rpc == "GetCluster":
            return state.model.resource()
        if rpc == "ListNodePools":
            return container_v1.ListNodePoolsResponse(node_pools=list(state.pools.all().values()))
        return state.pools.get(params["np"])

    def _operations(self, rpc: str, params: dict[str, str]) -> Any:
        states = self._in_location(params)
        fault = self.faults.take_call(rpc, None)
        if fault is not None:
            raise call_fault_error(fault, states[0].model.name, states[0].model.region, "")
        if rpc == "ListOperations":
            return container_v1.ListOperationsResponse(
                operations=[op for state in states for op in state.operations.all()]
            )
        for state in states:
            operation = state.operations.get(params["op"])
            if operation is not None:
                return operation
        raise errors.not_found(f"projects/{params['p']}/locations/{params['l']}/operations/{params['op']}")

    def _get_policy(self, params: dict[str, str]) -> dict[str, Any]:
        policy = self.policies.find(params["r"], params["rp"])
        if params["p"] != self.project or policy is None:
            raise policy_not_found(params["p"], params["r"], params["rp"])
        return policy.resource(self.project)

    def _admin(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Test controls over HTTP, for a sandbox running in another process (`tpujob sandbox up`):
        POST /sandbox/v1/faults {"fault": "quota", "rpc": "CreateNodePool", "pool": null, "times": 1}
        POST /sandbox/v1/faults {"poolFault": "slow", "pool": null, "times": 1, "provisioningSeconds": 900}
        PUT /sandbox/v1/capacity {"zone": "us-central1-a", "machineType": "ct5p-hightpu-4t", "vms": 0}
        PUT /sandbox/v1/quota {"region": "us-central1", "machineType": "ct5p-hightpu-4t", "chips": 8}
        POST /sandbox/v1/workloadPolicies {"name": "p", "acceleratorTopology": "2x2x2"}
        DELETE /sandbox/v1/faults; GET /sandbox/v1/calls (calls received per RPC)."""
        try:
            action = (method, path.removeprefix(ADMIN_PREFIX))
            if action == ("GET", "calls"):
                with self._lock:
                    return dict(self.calls)
            if action == ("DELETE", "faults"):
                self.clear_faults()
                return {}
            if action == ("POST", "faults") and "fault" in body:
                self.inject_call_fault(
                    body["fault"],
                    body.get("rpc", "CreateNodePool"),
                    pool=body.get("pool"),
                    times=body.get("times", 1),
                )
                return {}
            if action == ("POST", "faults") and "poolFault" in body:
                self.inject_pool_fault(
                    body["poolFault"],
                    pool=body.get("pool"),
                    times=body.get("times", 1),
                    provisioning_seconds=body.get("provisioningSeconds"),
                )
                return {}
            if action == ("PUT", "capacity"):
                self.set_capacity(body["zone"], body["machineType"], body.get("vms"))
                return {}
            if action == ("PUT", "quota"):
                self.set_quota(body["region"], body["machineType"], body.get("chips"))
                return {}
            if action == ("POST", "workloadPolicies"):
                self.add_workload_policy(body["name"], body["acceleratorTopology"], body.get("region"))
                return {}
        except (ValueError, KeyError) as error:
            raise errors.invalid_argument(f"bad sandbox control: {error}") from None
        raise GkeError(404, "NOT_FOUND", f"No sandbox control at {method} {path}.")


__all__ = ["CallFault", "GkeSimulator", "PoolFault", "ReleaseChannel", "SimCluster"]
