"""The operator as users run it: `tpujob operator`, a separate process, under the least-privilege
ServiceAccount the Helm chart ships, against the session's test bed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tpujob.api import constants as c
from tpujob.sandbox.bed import Sandbox
from tpujob.sandbox.controlplane import free_port
from tpujob.sandbox.gke import GkeSimulator
from tpujob.sandbox.operators import OperatorProcess, install_crd, operator_kubeconfig
from tpujob.sandbox.waiting import wait_for


def operator_env(sandbox: Sandbox, folder: Path) -> dict[str, str]:
    """The operator's settings on the test bed, under the chart's least-privilege ServiceAccount."""
    return {
        **os.environ,
        "KUBECONFIG": str(operator_kubeconfig(sandbox, folder / "kubeconfig")),
        "TPUJOB_GKE_ENDPOINT": sandbox.gke.endpoint,
        "TPUJOB_GKE_PROJECT": sandbox.gke.project,
        "TPUJOB_GKE_LOCATION": sandbox.gke.location,
        "TPUJOB_GKE_CLUSTER": sandbox.gke.cluster,
        "TPUJOB_GKE_ZONE": sandbox.default_zone,
        "TPUJOB_RESYNC_SECONDS": "2",
        "TPUJOB_RESTART_BACKOFF_SECONDS": "0.5",
        "TPUJOB_SWEEP_SECONDS": "2",
        "TPUJOB_METRICS_PORT": "0",
        "TPUJOB_HEALTH_PORT": str(free_port()),
        "TPUJOB_UNSCHEDULABLE_GRACE_SECONDS": "1",
    }


@pytest.fixture(scope="session")
def operator(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    install_crd(sandbox)
    folder = tmp_path_factory.mktemp("operator")
    process = OperatorProcess(operator_env(sandbox, folder), folder / "operator.log").start()
    yield process
    process.stop()


@pytest.fixture
def custom(sandbox: Sandbox) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(sandbox.api_client)


class Jobs:
    """Create TPUJobs and wait on what the operator does with them."""

    def __init__(self, sandbox: Sandbox, namespace: str) -> None:
        self.namespace = namespace
        self.custom = k8s.CustomObjectsApi(sandbox.api_client)
        self.core = k8s.CoreV1Api(sandbox.api_client)

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": self.namespace}}
        return self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, manifest
        )

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.namespace, c.PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, self.namespace, c.PLURAL, name)

    def gone(self, name: str) -> bool:
        try:
            self.get(name)
        except k8s.ApiException as error:
            return error.status == 404
        return False

    def wait_phase(self, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
        return wait_for(
            lambda: self.status(name) if self.status(name).get("phase") == phase else None,
            timeout=timeout,
            what=f"TPUJob {name} to be {phase}",
            last_state=lambda: self.status(name),
        )

    def pods(self, name: str, attempt: int | None = None) -> list[Any]:
        selector = f"{c.LABEL_JOB_NAME}={name}"
        if attempt is not None:
            selector += f",{c.LABEL_ATTEMPT}={attempt}"
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def wait_pods_running(self, name: str, count: int, attempt: int = 0, timeout: float = 60) -> list[Any]:
        def running() -> list[Any] | None:
            pods = [p for p in self.pods(name, attempt) if p.status.phase == "Running"]
            return pods if len(pods) == count else None

        return wait_for(
            running,
            timeout=timeout,
            what=f"{count} running pods of {name} attempt {attempt}",
            last_state=lambda: [(p.metadata.name, p.status.phase) for p in self.pods(name)],
        )

    def events(self, name: str) -> list[Any]:
        return [
            e
            for e in self.core.list_namespaced_event(self.namespace).items
            if e.involved_object.kind == c.KIND and e.involved_object.name == name
        ]


@pytest.fixture
def jobs(sandbox: Sandbox, namespace: str, operator: OperatorProcess, gke: GkeSimulator) -> Iterator[Jobs]:
    """Torn down before `gke`: every TPUJob of the test is deleted through the operator (finalizer
    and all), so no job outlives its test and recreates pools in the next one."""
    handle = Jobs(sandbox, namespace)
    yield handle
    for job in handle.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)["items"]:
        handle.delete(job["metadata"]["name"])
    wait_for(
        lambda: (
            not handle.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)["items"]
        ),
        timeout=90,
        what=f"the TPUJobs of {namespace} to be deleted",
    )
