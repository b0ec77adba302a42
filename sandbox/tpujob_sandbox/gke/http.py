"""The simulated GKE's HTTP layer, `GkeHttpApi`: GKE's REST paths as `google-cloud-container` sends them,
the Compute workload-policy path (google-cloud-compute) and the /sandbox/v1/ admin paths.

Requests are parsed with GKE's own message types (unknown fields are refused, as GKE does) and answered in
GKE's JSON.
"""

from __future__ import annotations

import http.server
import json
import logging
import re
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Protocol

from google.cloud import container_v1

from tpujob_sandbox.gke import errors
from tpujob_sandbox.gke.errors import GkeError
from tpujob_sandbox.gke.faults import CallFault, Faults, PoolFault, call_fault_error
from tpujob_sandbox.gke.policies import WorkloadPolicies, policy_not_found
from tpujob_sandbox.gke.state import ClusterState

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
class RecordedCall:
    rpc: str
    method: str
    path: str
    body: dict[str, Any]


class Simulator(Protocol):
    """What the HTTP layer serves: the project's clusters, faults and policies, and the test controls
    (server.GkeSimulator)."""

    faults: Faults
    policies: WorkloadPolicies

    @property
    def project(self) -> str: ...
    def clusters_in(self, location: str) -> list[ClusterState]: ...
    def record_call(self, call: RecordedCall) -> None: ...
    def accepted(self, rpc: str) -> None: ...
    def calls_received(self) -> dict[str, int]: ...
    def clear_faults(self) -> None: ...
    def inject_call_fault(
        self, fault: CallFault | str, rpc: str = ..., *, pool: str | None = ..., times: int | None = ...
    ) -> None: ...
    def inject_pool_fault(
        self,
        fault: PoolFault | str,
        *,
        pool: str | None = ...,
        times: int | None = ...,
        provisioning_seconds: float | None = ...,
    ) -> None: ...
    def set_capacity(self, zone: str, machine_type: str, vms: int | None) -> None: ...
    def set_quota(self, region: str, machine_type: str, chips: int | None) -> None: ...
    def add_workload_policy(self, name: str, accelerator_topology: str, region: str | None = ...) -> None: ...


class GkeHttpApi:
    """Serves one simulator (server.GkeSimulator) over HTTP on 127.0.0.1."""

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator
        self._server: http.server.ThreadingHTTPServer | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self, port: int = 0) -> None:
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api._handle(self)

            do_POST = do_DELETE = do_PUT = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("gke-sim: " + format, *args)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="gke-sim", daemon=True).start()

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def endpoint(self) -> str:
        assert self._server, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ---- requests --------------------------------------------------------------------------------------

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
            self.simulator.record_call(RecordedCall(rpc, method, path, body))
            answer = self._dispatch(rpc, params, raw)
            self.simulator.accepted(rpc)
            return 200, answer
        except GkeError as error:
            return error.http_status, error.body()
        except json.JSONDecodeError as error:
            return 400, errors.invalid_argument(f"Invalid JSON payload received. {error}").body()

    @staticmethod
    def _encode(payload: Any, numeric_enums: bool) -> str:
        if isinstance(payload, dict):
            return json.dumps(payload)
        return type(payload).to_json(  # type: ignore[no-any-return]
            payload,
            use_integers_for_enums=numeric_enums,
            indent=None,
            always_print_fields_with_no_presence=False,
        )

    # ---- GKE and Compute -------------------------------------------------------------------------------

    def _in_location(self, params: dict[str, str]) -> list[ClusterState]:
        found = self.simulator.clusters_in(params["l"])
        if params["p"] != self.simulator.project or not found:
            raise errors.not_found(f"projects/{params['p']}/locations/{params['l']}")
        return found

    def _cluster_of(self, params: dict[str, str]) -> ClusterState:
        found = self._in_location(params)
        state = next((s for s in found if s.model.name == params["c"]), None)
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
        fault = self.simulator.faults.take_call(rpc, params.get("np"))
        if fault is not None:
            raise call_fault_error(fault, state.model.name, state.model.project, "")
        if rpc == "GetCluster":
            return state.model.resource()
        if rpc == "ListNodePools":
            return container_v1.ListNodePoolsResponse(node_pools=list(state.pools.all().values()))
        return state.pools.get(params["np"])

    def _operations(self, rpc: str, params: dict[str, str]) -> Any:
        states = self._in_location(params)
        fault = self.simulator.faults.take_call(rpc, None)
        if fault is not None:
            raise call_fault_error(fault, states[0].model.name, states[0].model.project, "")
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
        project = self.simulator.project
        policy = self.simulator.policies.find(params["r"], params["rp"])
        if params["p"] != project or policy is None:
            raise policy_not_found(params["p"], params["r"], params["rp"])
        return policy.resource(project)

    # ---- sandbox controls ------------------------------------------------------------------------------

    def _admin(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Test controls over HTTP, for a sandbox running in another process (`tpujob sandbox up`):
        POST /sandbox/v1/faults {"fault": "quota", "rpc": "CreateNodePool", "pool": null, "times": 1}
        POST /sandbox/v1/faults {"poolFault": "slow", "pool": null, "times": 1, "provisioningSeconds": 900}
        PUT /sandbox/v1/capacity {"zone": "us-central1-a", "machineType": "ct5p-hightpu-4t", "vms": 0}
        PUT /sandbox/v1/quota {"region": "us-central1", "machineType": "ct5p-hightpu-4t", "chips": 8}
        POST /sandbox/v1/workloadPolicies {"name": "p", "acceleratorTopology": "2x2x2"}
        DELETE /sandbox/v1/faults; GET /sandbox/v1/calls (calls received per RPC)."""
        simulator = self.simulator
        try:
            action = (method, path.removeprefix(ADMIN_PREFIX))
            if action == ("GET", "calls"):
                return simulator.calls_received()
            if action == ("DELETE", "faults"):
                simulator.clear_faults()
                return {}
            if action == ("POST", "faults") and "fault" in body:
                simulator.inject_call_fault(
                    body["fault"],
                    body.get("rpc", "CreateNodePool"),
                    pool=body.get("pool"),
                    times=body.get("times", 1),
                )
                return {}
            if action == ("POST", "faults") and "poolFault" in body:
                simulator.inject_pool_fault(
                    body["poolFault"],
                    pool=body.get("pool"),
                    times=body.get("times", 1),
                    provisioning_seconds=body.get("provisioningSeconds"),
                )
                return {}
            if action == ("PUT", "capacity"):
                simulator.set_capacity(body["zone"], body["machineType"], body.get("vms"))
                return {}
            if action == ("PUT", "quota"):
                simulator.set_quota(body["region"], body["machineType"], body.get("chips"))
                return {}
            if action == ("POST", "workloadPolicies"):
                simulator.add_workload_policy(body["name"], body["acceleratorTopology"], body.get("region"))
                return {}
        except (ValueError, KeyError) as error:
            raise errors.invalid_argument(f"bad sandbox control: {error}") from None
        raise GkeError(404, "NOT_FOUND", f"No sandbox control at {method} {path}.")
