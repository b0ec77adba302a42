"""`tpujob operator` as users run it, in a subprocess under a least-privilege ServiceAccount's token, on the
test bed: the CRD install, the operator's ServiceAccount and RBAC, its kubeconfig and the process. Shared by
the e2e and chart tests and the operator benchmark (bench/operator_bench.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import urllib3
import yaml
from kubernetes import client as k8s

from tpujob import peering
from tpujob.api import constants as c
from tpujob.api.crd import crd
from tpujob.rbac import cluster_role
from tpujob_sandbox.bed import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, Sandbox
from tpujob_sandbox.processes import free_port
from tpujob_sandbox.reads import get_json
from tpujob_sandbox.timescale import poll_provisioning_seconds
from tpujob_sandbox.waiting import wait_for

# The operator with a probe into what it keeps (probe.py, run as a script by the operator's Python).
PROBE_SCRIPT = str(Path(__file__).with_name("probe.py"))
PROBE_ENV = "TPUJOB_PROBE"


# How often the operator looks at every job on the test bed (TPUJOB_RESYNC_SECONDS; 30 s by default).
RESYNC_SECONDS = 2.0
# The namespace whose TPUJobs may hold 4 chips at once on the test bed (tests/e2e/test_tenancy.py).
CHIP_LIMITED_NAMESPACE = "tenancy-chip-limit"
# The namespace whose TPUJobs run only through Kueue (requireQueue; tests/e2e/test_kueue.py).
QUEUE_REQUIRED_NAMESPACE = "tenancy-queue-required"
# The test bed's tenancy policy: the defaults, but a startupTimeoutSeconds floor of 1 s (the startup tests
# wait seconds, not the default floor's minute), a namespace with a chip limit and one that needs a queue.
TENANCY_POLICY = {
    "defaults": {"minStartupTimeoutSeconds": 1},
    "namespaces": {
        CHIP_LIMITED_NAMESPACE: {"maxChips": 4},
        QUEUE_REQUIRED_NAMESPACE: {"requireQueue": True},
    },
}


def operator_env(sandbox: Sandbox, folder: Path) -> dict[str, str]:
    """The operator's settings on the test bed, under the chart's least-privilege ServiceAccount (with its
    kueue.enabled rules), with the operator's periods shortened so tests see its reactions within seconds,
    and its GKE poll at the simulated GKE's time scale."""
    return {
        **os.environ,
        "KUBECONFIG": str(operator_kubeconfig(sandbox, folder / "kubeconfig")),
        "TPUJOB_GKE_ENDPOINT": sandbox.gke.endpoint,
        "TPUJOB_GKE_PROJECT": sandbox.gke.project,
        "TPUJOB_GKE_LOCATION": sandbox.gke.location,
        "TPUJOB_GKE_CLUSTER": sandbox.gke.cluster,
        "TPUJOB_GKE_ZONE": sandbox.default_zone,
        "TPUJOB_RESYNC_SECONDS": str(RESYNC_SECONDS),
        "TPUJOB_RESTART_BACKOFF_SECONDS": "0.5",
        "TPUJOB_REFUSED_BACKOFF_SECONDS": "1",
        "TPUJOB_SWEEP_SECONDS": "2",
        "TPUJOB_METRICS_PORT": "0",
        "TPUJOB_HEALTH_PORT": str(free_port()),
        "TPUJOB_UNSCHEDULABLE_GRACE_SECONDS": "1",
        "TPUJOB_STARTUP_GRACE_SECONDS": "1",
        "TPUJOB_POLL_PROVISIONING_SECONDS": str(poll_provisioning_seconds(sandbox.gke.time_scale)),
        # As the chart with kueue.enabled: queued jobs go through Kueue (when its CRDs are installed), and
        # every other test proves a job without the label runs as it always did.
        "TPUJOB_KUEUE": "true",
        # As the chart sets it: the trainers' metrics port admits the operator's pods and a Prometheus.
        "TPUJOB_NETWORK_POLICY_METRICS_FROM": json.dumps(E2E_METRICS_FROM),
        "TPUJOB_TENANCY_POLICY": json.dumps(TENANCY_POLICY),
    }


# The chart's TPUJOB_NETWORK_POLICY_METRICS_FROM for a release "tpujob" in tpujob-system with its default
# networkPolicy.metricsFrom (tests/chart/test_chart.py renders the same).
E2E_METRICS_FROM = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tpujob-system"}},
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/instance": "tpujob",
                "app.kubernetes.io/name": "tpujob-operator",
            }
        },
    },
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    },
]


def install_peering_crds(sandbox: Sandbox) -> None:
    """kopf's peering CRDs, as the chart ships them: the replicas' operator creates its object in one."""
    api = k8s.ApiextensionsV1Api(sandbox.api_client)
    for cluster_wide in (True, False):
        ensure_crd(api, peering.peering_crd(cluster_wide))


def ensure_crd(api: k8s.ApiextensionsV1Api, definition: dict[str, Any]) -> None:
    """Create the CRD unless it exists, and return once it is served at the cluster's address."""
    _create_or_keep(api.create_custom_resource_definition, definition)
    wait_crd_served(api, definition["metadata"]["name"])


# How many times a create whose answer was cut mid-body is sent again (each resend of one that had landed
# answers 409, which the callers take as "there").
CREATE_ATTEMPTS = 3


def _create(create: Callable[[dict[str, Any]], object], body: dict[str, Any]) -> None:
    """POST `body`, sent again when the answer was cut mid-body: with the 1.36 CRD server, kube-apiserver's
    aggregator proxies apiextensions and may abort a proxied stream (IncompleteRead), as it does for reads
    (reads.py). urllib3 retries no POST, and the create may or may not have landed: its resend says which."""
    for attempt in range(CREATE_ATTEMPTS):
        try:
            create(body)
            return
        except urllib3.exceptions.ProtocolError:
            if attempt == CREATE_ATTEMPTS - 1:
                raise


def _create_or_keep(create: Callable[[dict[str, Any]], object], body: dict[str, Any]) -> None:
    try:
        _create(create, body)
    except k8s.ApiException as error:
        if error.status != 409:
            raise


def _create_or_replace(
    create: Callable[[dict[str, Any]], object],
    read: Callable[[str], Any],
    replace: Callable[[str, dict[str, Any]], object],
    body: dict[str, Any],
) -> None:
    """Create `body`, or replace what has its name: a running sandbox's control plane (attach_sandbox) may
    hold an older CRD or ClusterRole from the code a test ran before."""
    try:
        _create(create, body)
    except k8s.ApiException as error:
        if error.status != 409:
            raise
        name = body["metadata"]["name"]
        version = read(name).metadata.resource_version
        replace(name, {**body, "metadata": {**body["metadata"], "resourceVersion": version}})


def wait_crd_served(api: k8s.ApiextensionsV1Api, name: str) -> None:
    """Established, and served at the cluster's address: with the 1.36 CRD server, kube-apiserver proxies the
    CRD's group only once the test bed's registrar has registered it and the aggregator found it available."""
    wait_for(
        lambda: any(
            cond.type == "Established" and cond.status == "True"
            for cond in api.read_custom_resource_definition(name).status.conditions or []
        ),
        timeout=30,
        what=f"the CRD {name} to be established",
    )
    definition = api.read_custom_resource_definition(name)
    group, plural = definition.spec.group, definition.spec.names.plural
    versions = [v.name for v in definition.spec.versions if v.served]
    registration = k8s.ApiregistrationV1Api(api.api_client)
    remote = registration.read_api_service("v1.apiextensions.k8s.io").spec.service is not None
    wait_for(
        lambda: all(
            _serves(api.api_client, group, version, plural)
            and (not remote or _proxied(registration, f"{version}.{group}"))
            for version in versions
        ),
        timeout=30,
        what=f"{plural}.{group} to be served at the cluster's address",
    )


def _proxied(registration: k8s.ApiregistrationV1Api, name: str) -> bool:
    """The group's APIService sends it to the CRD server, and the aggregator found it available."""
    found = registration.read_api_service(name)
    conditions = found.status.conditions or []
    return found.spec.service is not None and any(
        c.type == "Available" and c.status == "True" for c in conditions
    )


def _serves(api_client: k8s.ApiClient, group: str, version: str, plural: str) -> bool:
    try:
        resources = get_json(api_client, f"/apis/{group}/{version}").get("resources", [])
    except k8s.ApiException:
        return False
    return any(r["name"] == plural for r in resources)


def install_crd(sandbox: Sandbox) -> None:
    """The CRD with its CEL where the API machinery has CEL (the 1.36 CRD server); without on kube-apiserver
    1.20's own (a bench's in-process mode), which predates x-kubernetes-validations."""
    api = k8s.ApiextensionsV1Api(sandbox.api_client)
    _create_or_replace(
        api.create_custom_resource_definition,
        api.read_custom_resource_definition,
        api.replace_custom_resource_definition,
        crd(cel=sandbox.control_plane.serves_crds),
    )
    wait_crd_served(api, c.CRD_NAME)


def operator_kubeconfig(sandbox: Sandbox, path: Path) -> Path:
    """A kubeconfig holding the operator ServiceAccount's token, so the test bed enforces our RBAC."""
    core = k8s.CoreV1Api(sandbox.api_client)
    rbac = k8s.RbacAuthorizationV1Api(sandbox.api_client)
    for create, args in (
        (core.create_namespace, ({"metadata": {"name": OPERATOR_NAMESPACE}},)),
        (
            core.create_namespaced_service_account,
            (OPERATOR_NAMESPACE, {"metadata": {"name": OPERATOR_ACCOUNT}}),
        ),
        (
            rbac.create_cluster_role_binding,
            (
                {
                    "metadata": {"name": OPERATOR_ACCOUNT},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": OPERATOR_ACCOUNT,
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE}
                    ],
                },
            ),
        ),
    ):
        try:
            create(*args)
        except k8s.ApiException as error:
            if error.status != 409:
                raise
    _create_or_replace(
        rbac.create_cluster_role,
        rbac.read_cluster_role,
        rbac.replace_cluster_role,
        cluster_role(OPERATOR_ACCOUNT, kueue=True),
    )
    return token_kubeconfig(sandbox, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, path)


def service_account_token(sandbox: Sandbox, namespace: str, account: str) -> str:
    """A ServiceAccount's token, once its token Secret has one (the test bed's API server is 1.20)."""
    core = k8s.CoreV1Api(sandbox.api_client)

    def token() -> str | None:
        found = core.read_namespaced_service_account(account, namespace)
        if not found.secrets:
            return None
        secret = core.read_namespaced_secret(found.secrets[0].name, namespace)
        return base64.b64decode(secret.data["token"]).decode() if secret.data else None

    return str(wait_for(token, timeout=30, what=f"{account}'s token"))


def token_kubeconfig(sandbox: Sandbox, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding the ServiceAccount's token, so the test bed enforces that account's RBAC."""
    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    config["users"] = [
        {"name": account, "user": {"token": service_account_token(sandbox, namespace, account)}}
    ]
    for context in config["contexts"]:
        context["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    return path


def operator_python() -> str:
    """The interpreter of the operator's own environment, beside the test bed's (Makefile OPERATOR_VENV): the
    image's dependencies (operator/constraints.txt) and none of the test bed's. In the test bed's own
    environment kopf would import the `kubernetes` package, which the image does not have (42 MiB)."""
    python = Path(sys.prefix) / "operator" / "bin" / "python"
    if not python.is_file():
        raise FileNotFoundError(f"{python}: the operator's environment is missing; `make venv` builds it")
    return str(python)


class OperatorProcess:
    """`tpujob operator` in a subprocess of its own environment (operator_python): start, SIGKILL, start
    again. `running` holds the live ones, so a test can make sure no other operator reconciles its jobs."""

    running: ClassVar[set[OperatorProcess]] = set()

    def __init__(self, env: dict[str, str], log_path: Path, probe: Path | None = None) -> None:
        """`probe`: run the operator under probe.py, which writes what the operator keeps to that file."""
        self.env = env if probe is None else {**env, PROBE_ENV: str(probe)}
        self.log_path = log_path
        self.probe = probe
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        log = self.log_path.open("ab")
        command = [PROBE_SCRIPT] if self.probe is not None else ["-m", "tpujob.cli", "operator"]
        self.process = subprocess.Popen(
            [operator_python(), *command],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        OperatorProcess.running.add(self)
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last status write; what a node failure or OOM does."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        OperatorProcess.running.discard(self)

    @contextlib.contextmanager
    def killed(self) -> Iterator[None]:
        """The operator dies mid-way (SIGKILL) and is started again when the block ends."""
        self.kill()
        try:
            yield
        finally:
            self.start()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        OperatorProcess.running.discard(self)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
