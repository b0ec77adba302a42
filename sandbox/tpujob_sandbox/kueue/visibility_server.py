"""Kueue's visibility API server on the test bed: an extension API server behind kube-apiserver's aggregator,
as Kueue runs one (pkg/visibility/server.go; its release manifests register it with APIServices
v1beta1/v1beta2.visibility.kueue.x-k8s.io, config/components/visibility/, insecureSkipTLSVerify as there).

- It serves the versions its release serves (v1beta1 in v0.14; v1beta2 and v1beta1 from v0.17), answering from
  the simulated Kueue's last pass (visibility.py), as Kueue answers from its queue manager.
- Authentication is the aggregator's: the client must present the front-proxy client cert, and the caller is
  who its X-Remote-User / X-Remote-Group headers say (Kueue's server: RequestHeader authentication from
  extension-apiserver-authentication). Authorization is delegated to kube-apiserver with a SubjectAccessReview
  (options.Authorization: get on clusterqueues/pendingworkloads, or localqueues/pendingworkloads in the
  namespace), so a caller without RBAC for it gets 403 as from Kueue.
- The aggregator reaches it through an ExternalName Service (aggregation.py), as it reaches the CRD server.

Not modelled: Kueue's API Priority and Fairness configuration for it (visibility-apf.yaml), watch and list.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import ssl
import threading
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client as k8s

from tpujob_sandbox import aggregation
from tpujob_sandbox.kueue import visibility
from tpujob_sandbox.kueue.simulator import KueueSimulator
from tpujob_sandbox.pki import FRONT_PROXY_CLIENT, Pki
from tpujob_sandbox.waiting import wait_for

log = logging.getLogger(__name__)

SERVICE = "kueue-visibility-server"
# Kueue's own APIService priorities (config/components/visibility/apiservice_v1beta2.yaml).
GROUP_PRIORITY, VERSION_PRIORITY = 100, 100
# The versions each release serves (apis/visibility/ of each tag; server.go installs them).
RELEASE_VERSIONS = {
    "v0.14.8": ("v1beta1",),
    "v0.17.1": ("v1beta2", "v1beta1"),
    "v0.19.2": ("v1beta2", "v1beta1"),
}
PREFIX = f"/apis/{visibility.GROUP}/"
CLUSTER_QUEUE = re.compile(r"^(v1beta[12])/clusterqueues/([^/]+)/pendingworkloads$")
LOCAL_QUEUE = re.compile(r"^(v1beta[12])/namespaces/([^/]+)/localqueues/([^/]+)/pendingworkloads$")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "code": code,
        "message": message,
    }


class VisibilityServer:
    def __init__(self, api_client: k8s.ApiClient, simulator: KueueSimulator, pki: Pki) -> None:
        self.api_client = api_client
        self.simulator = simulator
        self.pki = pki
        self.versions: tuple[str, ...] = ()  # the versions served now (none until registered)
        self.requests = 0  # pending-workload reads answered (tests bound them)
        self._server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> VisibilityServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.pki.crd_server_cert, self.pki.crd_server_key)
        context.load_verify_locations(cafile=str(self.pki.ca_cert))
        context.verify_mode = ssl.CERT_REQUIRED  # the aggregator's front-proxy client cert
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, name="kueue-visibility", daemon=True).start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # --- registration in the aggregator -------------------------------------------------------------------

    def register(self, release: str, timeout: float = 60) -> None:
        """The release's APIServices and the Service behind them; returns once the aggregator finds them
        available."""
        core = k8s.CoreV1Api(self.api_client)
        service = aggregation.external_name_service(SERVICE, self.port)
        try:
            core.create_namespaced_service(aggregation.NAMESPACE, service)
        except k8s.ApiException as error:
            if error.status != 409:
                raise
            core.replace_namespaced_service(
                SERVICE,
                aggregation.NAMESPACE,
                {
                    **service,
                    "metadata": core.read_namespaced_service(SERVICE, aggregation.NAMESPACE).metadata,
                },
            )
        self.versions = RELEASE_VERSIONS[release]
        api = k8s.ApiregistrationV1Api(self.api_client)
        for version in ("v1beta1", "v1beta2"):
            name = f"{version}.{visibility.GROUP}"
            with contextlib.suppress(k8s.ApiException):
                api.delete_api_service(name)
            if version not in self.versions:
                continue
            body = {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": name},
                "spec": {
                    "group": visibility.GROUP,
                    "version": version,
                    "service": {"namespace": aggregation.NAMESPACE, "name": SERVICE, "port": self.port},
                    "insecureSkipTLSVerify": True,
                    "groupPriorityMinimum": GROUP_PRIORITY,
                    "versionPriority": VERSION_PRIORITY,
                },
            }
            wait_for(partial(self._created, api, body), timeout=timeout, what=f"APIService {name} created")
            wait_for(
                partial(self._available, api, name),
                timeout=timeout,
                what=f"the aggregator to find {name} available",
            )

    @staticmethod
    def _available(api: k8s.ApiregistrationV1Api, name: str) -> bool:
        conditions = api.read_api_service(name).status.conditions or []
        return any(c.type == "Available" and c.status == "True" for c in conditions)

    @staticmethod
    def _created(api: k8s.ApiregistrationV1Api, body: dict[str, Any]) -> bool:
        try:
            api.create_api_service(body)
        except k8s.ApiException as error:
            if error.status == 409:  # the deletion not done yet
                return False
            raise
        return True

    def unregister(self) -> None:
        api = k8s.ApiregistrationV1Api(self.api_client)
        for version in ("v1beta1", "v1beta2"):
            with contextlib.suppress(k8s.ApiException):
                api.delete_api_service(f"{version}.{visibility.GROUP}")
        self.versions = ()

    # --- requests -------------------------------------------------------------------------------------------

    def allowed(self, user: str, groups: list[str], attributes: dict[str, Any]) -> bool:
        """Delegated authorization: kube-apiserver's SubjectAccessReview."""
        review = k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=user, groups=groups, resource_attributes=k8s.V1ResourceAttributes(**attributes)
            )
        )
        answer = k8s.AuthorizationV1Api(self.api_client).create_subject_access_review(review)
        return bool(answer.status.allowed)

    def answer(self, path: str, user: str, groups: list[str]) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(path)
        query = parse_qs(parts.query)
        if not parts.path.startswith(PREFIX):
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        rest = parts.path[len(PREFIX) :].rstrip("/")
        if rest in self.versions:
            return 200, visibility.resource_list(rest)
        try:
            limit = int(query.get("limit", [str(visibility.DEFAULT_LIMIT)])[0])
            offset = int(query.get("offset", ["0"])[0])
        except ValueError:
            return 400, status(400, "BadRequest", "limit and offset must be integers")
        world = self.simulator.latest
        if cq := CLUSTER_QUEUE.match(rest):
            version, name = cq.groups()
            attributes = {
                "verb": "get",
                "group": visibility.GROUP,
                "resource": "clusterqueues",
                "subresource": "pendingworkloads",
                "name": name,
            }
            found = None
            if version in self.versions and world is not None:
                found = lambda: visibility.cluster_queue_summary(world, version, name, limit, offset)  # noqa: E731
            kind = "clusterqueue"
        elif lq := LOCAL_QUEUE.match(rest):
            version, namespace, name = lq.groups()
            attributes = {
                "verb": "get",
                "group": visibility.GROUP,
                "resource": "localqueues",
                "subresource": "pendingworkloads",
                "namespace": namespace,
                "name": name,
            }
            found = None
            if version in self.versions and world is not None:
                found = lambda: visibility.local_queue_summary(world, version, namespace, name, limit, offset)  # noqa: E731
            kind = "localqueue"
        else:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        if not self.allowed(user, groups, attributes):
            where = (
                f' in the namespace "{attributes["namespace"]}"'
                if "namespace" in attributes
                else " at the cluster scope"
            )
            message = (
                f'{kind}s.{visibility.GROUP} "{name}" is forbidden: User "{user}" cannot get resource '
                f'"{kind}s/pendingworkloads" in API group "{visibility.GROUP}"{where}'
            )
            return 403, status(403, "Forbidden", message)
        self.requests += 1
        answer = found() if found is not None else None
        if answer is None:
            return 404, status(404, "NotFound", f'{kind}.{visibility.GROUP} "{name}" not found')
        return 200, answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self.reply(200, {"status": "ok"})
                    return
                peer: Any = (
                    self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                )
                names = [
                    value
                    for rdn in (peer or {}).get("subject", ())
                    for key, value in rdn
                    if key == "commonName"
                ]
                if names != [FRONT_PROXY_CLIENT]:  # --requestheader-allowed-names
                    self.reply(401, status(401, "Unauthorized", "Unauthorized"))
                    return
                user = self.headers.get("X-Remote-User") or ""
                groups = self.headers.get_all("X-Remote-Group") or []
                try:
                    code, body = server.answer(self.path, user, groups)
                except Exception as error:  # an API server answers 500, never drops the connection
                    log.warning("kueue visibility: %s", error, exc_info=True)
                    code, body = 500, status(500, "InternalError", str(error))
                self.reply(code, body)

            def reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        return Handler
