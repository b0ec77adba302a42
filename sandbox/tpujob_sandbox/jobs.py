"""TPUJobs on the test bed as a test sees them: create, read, delete and wait on what the operator does."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from tpujob.api import constants as c
from tpujob_sandbox.bed import Sandbox
from tpujob_sandbox.waiting import wait_for


class Jobs:
    """Create TPUJobs and wait on what the operator does with them."""

    def __init__(self, sandbox: Sandbox, namespace: str) -> None:
        self.namespace = namespace
        self.custom = k8s.CustomObjectsApi(sandbox.api_client)
        self.core = k8s.CoreV1Api(sandbox.api_client)

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": self.namespace}}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, manifest
        )
        return created

    def get(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
        )
        return found

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, self.namespace, c.PLURAL, name)

    def gone(self, name: str) -> bool:
        try:
            self.get(name)
        except k8s.ApiException as error:
            return bool(error.status == 404)
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
        pods: list[Any] = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return pods

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
