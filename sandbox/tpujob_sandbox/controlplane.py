"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
(Kubernetes 1.20), and beside them Kubernetes 1.36's CRD server with its own etcd, which serves every custom
resource through kube-apiserver's aggregator (aggregation.py), so CRDs have CEL, ratcheting and 1.36's
validation, at the one address every client uses.

Everything lives in one state folder: data, keys, kubeconfigs and a log per program (`logs/<name>.log`).
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from tpujob_sandbox import aggregation
from tpujob_sandbox.binaries import KUBERNETES_VERSION, Binaries
from tpujob_sandbox.binaries.crdserver import CACHE_PREFIX as CRD_CACHE_PREFIX
from tpujob_sandbox.binaries.crdserver import ETCD as CRD_ETCD
from tpujob_sandbox.binaries.crdserver import SERVER as CRD_SERVER_BINARY
from tpujob_sandbox.binaries.crdserver import kubernetes_version as crd_server_kubernetes_version
from tpujob_sandbox.pki import FRONT_PROXY_CLIENT, Pki, ensure_aggregation_pki, ensure_pki
from tpujob_sandbox.processes import free_port, log_tail, start_process, stop_process
from tpujob_sandbox.waiting import wait_for

LOOPBACK = "127.0.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Nodes are simulated and send no heartbeats: the node lifecycle controller would mark them NotReady and
# evict their pods. Cloud controllers have no cloud to talk to.
CONTROLLERS = "*,-nodelifecycle,-nodeipam,-cloud-node-lifecycle,-route,-service"
START_TIMEOUT_SECONDS = 60.0
# Users the bootstrap RBAC policy already grants what each component needs.
ADMIN = ("admin", ("system:masters",))
SCHEDULER = ("system:kube-scheduler", ())
CONTROLLER_MANAGER = ("system:kube-controller-manager", ())
# The CRD server's own identity at kube-apiserver: it reviews tokens and access there (delegated auth) and
# reads Namespaces for its NamespaceLifecycle admission.
CRD_SERVER = ("system:tpujob-crd-server", ("system:masters",))
USERS = (ADMIN, SCHEDULER, CONTROLLER_MANAGER, CRD_SERVER)


# An audit policy that names who touches a resource, or what a user does: every request to the resource,
# and every request of those users, at Metadata level (user, user agent, verb, URI; no bodies), nothing
# else. Audit logging costs the API server CPU, so it is off unless a bench asks for it.
# https://kubernetes.io/docs/tasks/debug/debug-cluster/audit/
def audit_policy(group: str | None, resource: str | None, users: tuple[str, ...] = ()) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    if resource is not None:
        rules.append({"level": "Metadata", "resources": [{"group": group or "", "resources": [resource]}]})
    if users:
        rules.append({"level": "Metadata", "users": list(users)})
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [*rules, {"level": "None"}],
    }


class ControlPlaneError(RuntimeError):
    """A component failed to start; the message carries the tail of its log."""


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    crd_etcd_client: int
    crd_etcd_peer: int
    crd_server: int
    crd_gate: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(*(free_port() for _ in range(9)))


@dataclass(frozen=True)
class Tokens:
    """One bearer token per user, written to the API server's static token file."""

    by_user: dict[str, str]

    @classmethod
    def generate(cls) -> Tokens:
        return cls({name: secrets.token_hex(16) for name, _ in USERS})

    def token_file(self) -> str:
        groups = dict(USERS)
        lines = [f'{token},{user},{user},"{",".join(groups[user])}"' for user, token in self.by_user.items()]
        return "\n".join(lines) + "\n"


def kubeconfig(
    server: str, ca_pem: str, user: str, token: str, context: str = "tpujob-sandbox"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": user, "namespace": "default"}}
        ],
        "current-context": context,
    }


def etcd_args(binary: Path, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client = f"http://{LOOPBACK}:{client_port}"
    peer = f"http://{LOOPBACK}:{peer_port}"
    return [
        str(binary),
        "--name=sandbox",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=sandbox={peer}",
        "--log-level=warn",
    ]


def apiserver_args(
    binary: Path,
    state: Path,
    pki: Pki,
    ports: Ports,
    audit_policy_file: Path | None = None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    audit = (
        [
            f"--audit-policy-file={audit_policy_file}",
            f"--audit-log-path={state / 'logs' / 'audit.log'}",
            "--audit-log-format=json",
            # Written as requests complete, not batched: a bench reads the file right after its phase.
            "--audit-log-mode=blocking",
        ]
        if audit_policy_file
        else []
    )
    return [
        str(binary),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        "--insecure-port=0",
        f"--cert-dir={state / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        # Front-proxy settings: what the servers behind the aggregator trust (and without them every component
        # logs a missing CA bundle forever).
        f"--requestheader-client-ca-file={pki.ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--token-auth-file={state / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        f"--service-account-key-file={pki.service_account_public_key}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        # Only one API server and no real network: nothing should rewrite the `kubernetes` endpoints.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        # Priority and fairness as 1.20 implements it (beta) was 30-40% of this server's CPU under the tests
        # (pprof, 2026-11-29: its watermark histograms sampled on every request and every millisecond), a
        # cost later releases cut. Off, every request is still bounded, by the max-in-flight limits (400
        # reads, 200 writes at once) APF replaced; nothing the operator does depends on which bounds it.
        "--enable-priority-and-fairness=false",
        *audit,
        *extra,
        "--v=1",
    ]


def _component_common(kubeconfig_path: Path, port: int, cert_dir: Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig_path}",
        f"--authentication-kubeconfig={kubeconfig_path}",
        f"--authorization-kubeconfig={kubeconfig_path}",
        "--leader-elect=false",
        "--port=0",
        f"--secure-port={port}",
        f"--bind-address={LOOPBACK}",
        f"--cert-dir={cert_dir}",
        "--v=1",
    ]


def controller_manager_args(
    binary: Path, state: Path, pki: Pki, ports: Ports, extra: tuple[str, ...] = ()
) -> list[str]:
    return [
        str(binary),
        *_component_common(
            state / "controller-manager.kubeconfig", ports.controller_manager, state / "cm-certs"
        ),
        f"--controllers={CONTROLLERS}",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca_cert}",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.ca_key}",
        "--use-service-account-credentials=true",
        *extra,
    ]


def scheduler_args(binary: Path, state: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        *_component_common(state / "scheduler.kubeconfig", ports.scheduler, state / "scheduler-certs"),
    ]


def _https_ok(url: str, context: ssl.SSLContext, token: str | None = None) -> bool:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/health", timeout=2) as response:
            return bool(json.load(response).get("health") == "true")
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _available(api_service: Any) -> bool:
    return any(c.type == "Available" and c.status == "True" for c in api_service.status.conditions or [])


# A program of the control plane: its name, its command line, and when it is healthy.
Component = tuple[str, list[str], Callable[[], bool]]


@dataclass
class ControlPlane:
    """Start with `start()`, stop with `stop()`; `kubeconfig` is the admin's."""

    binaries: Binaries
    state_dir: Path
    ports: Ports = field(default_factory=Ports.pick)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # More kube-controller-manager flags, e.g. its client-side limit (--kube-api-qps) for a benchmark.
    controller_manager_flags: tuple[str, ...] = ()
    # (group, resource) whose requests the API server writes to `audit_log`, and users whose every request
    # it writes there; neither: no audit log.
    audit: tuple[str, str] | None = None
    audit_users: tuple[str, ...] = ()
    # Serve custom resources from the 1.36 CRD server when the binaries have one; False: kube-apiserver's own
    # (a bench's in-process mode: on GKE the CRD server runs inside kube-apiserver, with no hop between).
    crd_server: bool = True

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.ports.apiserver}"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def audit_log(self) -> Path:
        """One JSON audit event a line (only with `audit` or `audit_users`)."""
        return self.logs / "audit.log"

    @property
    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    @property
    def serves_crds(self) -> bool:
        """True when the 1.36 CRD server serves custom resources; False: kube-apiserver does, in process."""
        return self.crd_server and self.binaries.crd_server is not None

    @property
    def servers(self) -> dict[str, str]:
        """Which server serves which API groups, as `tpujob sandbox up` says it."""
        core = f"Kubernetes {KUBERNETES_VERSION} kube-apiserver"
        if not self.serves_crds:
            return {core: "every group, custom resources included"}
        assert self.binaries.crd_server is not None
        version = self.binaries.crd_server.name.removeprefix(CRD_CACHE_PREFIX)
        return {
            core: "core, apps, batch, rbac and the other built-in groups, in front of the other",
            f"Kubernetes {crd_server_kubernetes_version(version)} apiextensions-apiserver": (
                "CRDs and every custom resource (tpujob.dev, kueue.x-k8s.io, kopf.dev, ...), with CEL"
            ),
        }

    def start(self) -> ControlPlane:
        """Start etcd and the API server together (and the CRD server's etcd), then the CRD server and its
        registrar (its authorizer) and its registration in the aggregator, then the controller-manager and the
        scheduler."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pki = ensure_pki(self.state_dir / "pki", hosts=(LOOPBACK, "localhost", "10.96.0.1", "kubernetes"))
        if self.serves_crds:
            ensure_aggregation_pki(pki, (LOOPBACK, "localhost", *aggregation.SERVICE_DNS_NAMES))
        tokens = self._write_credentials(pki)
        trusted = ssl.create_default_context(cafile=str(pki.ca_cert))
        # Self-signed serving certs: only liveness is checked on these two, not identity.
        unverified = ssl._create_unverified_context()
        admin_token = tokens.by_user[ADMIN[0]]
        policy_file = None
        if self.audit or self.audit_users:
            policy_file = self.state_dir / "audit-policy.yaml"
            group, resource = self.audit or (None, None)
            policy_file.write_text(yaml.safe_dump(audit_policy(group, resource, self.audit_users)))
        ports = self.ports
        proxy = tuple(aggregation.kube_apiserver_flags(pki)) if self.serves_crds else ()
        until_registered = aggregation.UNTIL_REGISTERED if self.serves_crds else ""
        core: list[Component] = [
            (
                "etcd",
                etcd_args(
                    self.binaries.path("etcd"), self.state_dir / "etcd", ports.etcd_client, ports.etcd_peer
                ),
                lambda: _etcd_healthy(ports.etcd_client),
            ),
            (
                "kube-apiserver",
                apiserver_args(
                    self.binaries.path("kube-apiserver"), self.state_dir, pki, ports, policy_file, proxy
                ),
                lambda: _https_ok(f"{self.server}/readyz{until_registered}", trusted, admin_token),
            ),
        ]
        controllers: list[Component] = [
            (
                "kube-controller-manager",
                controller_manager_args(
                    self.binaries.path("kube-controller-manager"),
                    self.state_dir,
                    pki,
                    ports,
                    self.controller_manager_flags,
                ),
                lambda: _https_ok(f"https://{LOOPBACK}:{ports.controller_manager}/healthz", unverified),
            ),
            (
                "kube-scheduler",
                scheduler_args(self.binaries.path("kube-scheduler"), self.state_dir, ports),
                lambda: _https_ok(f"https://{LOOPBACK}:{ports.scheduler}/healthz", unverified),
            ),
        ]
        # envtest folders (KUBEBUILDER_ASSETS) may hold only etcd and kube-apiserver.
        core = [c for c in core if self.binaries.has(c[0])]
        controllers = [c for c in controllers if self.binaries.has(c[0])]
        crd_server: list[Component] = []
        if self.serves_crds:
            crd_etcd, server, registrar = self._crd_server_components(pki, trusted, admin_token)
            core.append(crd_etcd)
            crd_server += [server, registrar]  # the registrar serves the gate the CRD API goes through
        # The API server waits for etcd by itself; the CRD server needs kube-apiserver for its delegated auth;
        # the controller-manager and scheduler exit if the API server's RBAC is not bootstrapped yet, and the
        # controller-manager's garbage collector discovers custom resources through the aggregator.
        try:
            for stage in (core, crd_server, controllers):
                for name, args, _ in stage:
                    self._start_component(name, args)
                for name, _, healthy in stage:
                    self._wait_until_healthy(name, healthy)
                if stage is crd_server and crd_server:
                    self._serve_crds_through_the_aggregator(pki)
                    self._wait_until_healthy(
                        "kube-apiserver", lambda: _https_ok(f"{self.server}/readyz", trusted, admin_token)
                    )
        except BaseException:
            self.stop()
            raise
        return self

    def _crd_server_components(
        self, pki: Pki, trusted: ssl.SSLContext, admin_token: str
    ) -> tuple[Component, Component, Component]:
        assert self.binaries.crd_server is not None
        folder, ports = self.binaries.crd_server, self.ports
        crd_etcd = (
            "crd-etcd",
            etcd_args(
                folder / CRD_ETCD, self.state_dir / "crd-etcd", ports.crd_etcd_client, ports.crd_etcd_peer
            ),
            lambda: _etcd_healthy(ports.crd_etcd_client),
        )
        server = (
            "crd-server",
            aggregation.crd_server_args(
                folder / CRD_SERVER_BINARY,
                etcd_port=ports.crd_etcd_client,
                port=ports.crd_server,
                pki=pki,
                kubeconfig=self.state_dir / "crd-server.kubeconfig",
                cert_dir=self.state_dir / "crd-server-certs",
                loopback=LOOPBACK,
            ),
            lambda: _https_ok(f"https://{LOOPBACK}:{ports.crd_server}/readyz", trusted, admin_token),
        )
        registrar = (
            "crd-registrar",
            [
                sys.executable,
                "-m",
                "tpujob_sandbox.crdregistrar",
                f"--kubeconfig={self.kubeconfig}",
                f"--port={ports.crd_server}",
                f"--ca={pki.ca_cert}",
                f"--gate-port={ports.crd_gate}",
                f"--cert={pki.crd_server_cert}",
                f"--key={pki.crd_server_key}",
                f"--front-proxy-cert={pki.front_proxy_cert}",
                f"--front-proxy-key={pki.front_proxy_key}",
            ],
            lambda: _https_ok(f"https://{LOOPBACK}:{ports.crd_gate}/healthz", trusted),
        )
        return crd_etcd, server, registrar

    def _serve_crds_through_the_aggregator(self, pki: Pki) -> None:
        """The ExternalName Service in front of the CRD server, and `apiextensions.k8s.io/v1` sent to it;
        returns once the aggregator finds it available."""
        api_client = k8s_config.new_client_from_config(config_file=str(self.kubeconfig))
        try:
            core = k8s.CoreV1Api(api_client)
            registration = k8s.ApiregistrationV1Api(api_client)
            for name, port in (
                (aggregation.SERVICE, self.ports.crd_server),
                (aggregation.GATE_SERVICE, self.ports.crd_gate),
            ):
                service = aggregation.external_name_service(name, port)
                try:
                    core.create_namespaced_service(aggregation.NAMESPACE, service)
                except ApiException as error:
                    if error.status != 409:
                        raise
                    # A state folder started before: its Service, pointed at this start's port.
                    current = core.read_namespaced_service(name, aggregation.NAMESPACE)
                    service["metadata"]["resourceVersion"] = current.metadata.resource_version
                    core.replace_namespaced_service(name, aggregation.NAMESPACE, service)
            group, version = aggregation.APIEXTENSIONS
            name = f"{version}.{group}"
            body = aggregation.api_service(
                group,
                version,
                port=self.ports.crd_gate,
                ca_pem=pki.ca_cert.read_bytes(),
                group_priority=aggregation.APIEXTENSIONS_GROUP_PRIORITY,
                version_priority=aggregation.APIEXTENSIONS_VERSION_PRIORITY,
                registrar=False,
                service=aggregation.GATE_SERVICE,
            )
            try:
                registration.create_api_service(body)
            except ApiException as error:  # a state folder started before
                if error.status != 409:
                    raise
                current = registration.read_api_service(name)
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                registration.replace_api_service(name, body)
            wait_for(
                lambda: _available(registration.read_api_service(name)),
                timeout=START_TIMEOUT_SECONDS,
                what=f"the aggregator to find {name} at the CRD server available",
            )

        finally:
            api_client.close()

    def _write_credentials(self, pki: Pki) -> Tokens:
        tokens = Tokens.generate()
        (self.state_dir / "tokens.csv").write_text(tokens.token_file())
        ca_pem = pki.ca_cert.read_text()
        for filename, (user, _) in (
            ("kubeconfig", ADMIN),
            ("scheduler.kubeconfig", SCHEDULER),
            ("controller-manager.kubeconfig", CONTROLLER_MANAGER),
            ("crd-server.kubeconfig", CRD_SERVER),
        ):
            path = self.state_dir / filename
            path.write_text(yaml.safe_dump(kubeconfig(self.server, ca_pem, user, tokens.by_user[user])))
            path.chmod(0o600)
        return tokens

    def _start_component(self, name: str, args: list[str]) -> None:
        self.processes[name] = start_process(args, self.logs / f"{name}.log")

    def _wait_until_healthy(self, name: str, healthy: Callable[[], bool]) -> None:
        process = self.processes[name]
        log = self.logs / f"{name}.log"

        def ready_or_dead() -> bool:
            if process.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {process.returncode}; log {log}:\n{log_tail(log)}"
                )
            return healthy()

        try:
            wait_for(ready_or_dead, timeout=START_TIMEOUT_SECONDS, what=f"{name} to become healthy")
        except AssertionError as error:
            raise ControlPlaneError(f"{error}; log {log}:\n{log_tail(log)}") from None

    def stop(self) -> None:
        """Stop in reverse start order, so nothing logs errors about a dependency that vanished first."""
        for name in reversed(list(self.processes)):
            stop_process(self.processes[name])


@dataclass(frozen=True)
class RunningControlPlane:
    """The control plane of a sandbox another process runs (`tpujob sandbox up`): used, never stopped."""

    kubeconfig: Path
    logs: Path
    pids: dict[str, int] = field(default_factory=dict)  # none of its processes are this one's to stop
    serves_crds: bool = False
    servers: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        """Nothing to stop: `tpujob sandbox down` does."""
