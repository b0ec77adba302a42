"""TPUJobs on the test bed as a test sees them: create, read, delete and wait on what the operator does."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from tpujob.api import constants as c
from tpujob_sandbox.bed import Sandbox
from tpujob_sandbox.reads import get_json
from tpujob_sandbox.waiting import wait_for


def _pod_selector(job: str, attempt: int | None) -> str:
    selector = f"{c.LABEL_JOB_NAME}={job}"
    return selector if attempt is None else f"{selector},{c.LABEL_ATTEMPT}={attempt}"


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
        def reached() -> dict[str, Any] | None:
            status = self.status(name)
            return status if status.get("phase") == phase else None

        return wait_for(
            reached,
            timeout=timeout,
            what=f"TPUJob {name} to be {phase}",
            last_state=lambda: self.status(name),
        )

    def pods(self, name: str, attempt: int | None = None) -> list[Any]:
        pods: list[Any] = self.core.list_namespaced_pod(
            self.namespace, label_selector=_pod_selector(name, attempt)
        ).items
        return pods

    @contextlib.contextmanager
    def recording_pods(self, name: str) -> Iterator[PodHistory]:
        """The last state the API server gave each pod of job `name` while the block runs. A finished pod
        can be gone before a test lists it: when a job ends the operator deletes its pool, and GKE's drain
        (or, on real GKE, the pod garbage collector once the node is gone) deletes the pod with it."""
        history = PodHistory(
            self.core.list_namespaced_pod, self.namespace, label_selector=f"{c.LABEL_JOB_NAME}={name}"
        )
        try:
            yield history
        finally:
            history.stop()

    @contextlib.contextmanager
    def recording_job(self, name: str) -> Iterator[JobHistory]:
        """Every status job `name` had while the block runs: one a later pass replaced, too."""
        history = JobHistory(
            self.custom.list_namespaced_custom_object,
            *(c.GROUP, c.VERSION, self.namespace, c.PLURAL),
            field_selector=f"metadata.name={name}",
        )
        try:
            yield history
        finally:
            history.stop()

    def wait_pods_running(self, name: str, count: int, attempt: int = 0, timeout: float = 60) -> list[Any]:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        query = {"labelSelector": _pod_selector(name, attempt)}

        def running() -> list[Any] | None:
            # Polled as JSON (reads.py: the typed client's models cost), read typed once there are enough.
            listed = get_json(self.core.api_client, path, query=query)["items"]
            if sum((p.get("status") or {}).get("phase") == "Running" for p in listed) != count:
                return None
            pods = [p for p in self.pods(name, attempt) if p.status.phase == "Running"]
            return pods if len(pods) == count else None

        return wait_for(
            running,
            timeout=timeout,
            what=f"{count} running pods of {name} attempt {attempt}",
            last_state=lambda: [(p.metadata.name, p.status.phase) for p in self.pods(name)],
        )

    def events(self, name: str) -> list[Any]:
        """The job's Events now. The operator posts them from a background queue after the pass that
        decided them (and after its status write): a test waits for one (wait_events), never reads once."""
        involved = f"involvedObject.kind={c.KIND},involvedObject.name={name}"
        return list(self.core.list_namespaced_event(self.namespace, field_selector=involved).items)

    def wait_events(self, name: str, reason: str, timeout: float = 30) -> list[Any]:
        """The job's Events of `reason`, once there is one."""
        return wait_for(
            lambda: [e for e in self.events(name) if e.reason == reason],
            timeout=timeout,
            what=f"a {reason} Event of TPUJob {name}",
            last_state=lambda: [(e.reason, e.message) for e in self.events(name)],
        )

    def events_through(self, name: str, reason: str, timeout: float = 30) -> list[Any]:
        """Every Event of the job once one of `reason` is there. One poster posts an operator's Events in the
        order its passes decided them, one at a time, so each Event decided before that one is in the list:
        what a test that asserts an Event's absence reads (a wait cannot prove absence; a later Event can)."""
        self.wait_events(name, reason, timeout)
        return self.events(name)


class Recording:
    """A list, then a watch from the list's resourceVersion (as an informer does), keeping every state the
    API server gave each object, deleted objects included. `list_call(*args, **selector)` lists them (the
    client's method itself: its watch reads the type to return from its docstring); objects are the client's
    models (pods) or dicts (custom objects)."""

    def __init__(self, list_call: Callable[..., Any], *args: str, **selector: str) -> None:
        self.list_call, self.args, self.selector = list_call, args, selector
        self._states: list[Any] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._failed: Exception | None = None  # what stopped the watch, raised to the test
        self._thread = threading.Thread(target=self._watch, args=(self._list(),), daemon=True)
        self._thread.start()

    def states(self) -> list[Any]:
        """Every state seen, in the order the API server sent them."""
        with self._lock:
            if self._failed is not None:
                raise RuntimeError("the recording's watch failed") from self._failed
            return list(self._states)

    def last(self) -> dict[str, Any]:
        """Each object's last state, by name."""
        return {_metadata(o)["name"]: o for o in self.states()}

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=10)
        self.states()  # raises what stopped the watch, if anything did

    def _list(self) -> str:
        """List (every object's state now) and return the list's resourceVersion, to watch from."""
        items, resource_version = _listed(self.list_call(*self.args, **self.selector, _request_timeout=10))
        with self._lock:
            self._states.extend(items)
        return resource_version

    def _watch(self, resource_version: str) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    for event in k8s_watch.Watch().stream(
                        self.list_call,
                        *self.args,
                        resource_version=resource_version,
                        timeout_seconds=2,  # stop() is seen within seconds
                        _request_timeout=10,  # and a connection that hangs, within 10
                        **self.selector,
                    ):
                        with self._lock:
                            self._states.append(event["object"])
                        resource_version = _metadata(event["object"])["resourceVersion"]
                except k8s.ApiException as error:
                    if error.status != 410:
                        raise
                    resource_version = self._list()  # Gone: too old a resourceVersion; list again
                except (urllib3.exceptions.HTTPError, OSError):
                    continue  # a connection lost or timed out: watch again from where it was
        except Exception as error:  # kept for the test, which raises it on its next read
            with self._lock:
                self._failed = error


class PodHistory(Recording):
    """The pods of a job, as recorded."""

    def pods(self, attempt: int | None = None) -> list[Any]:
        """Every pod seen, in its last state, optionally only those of one attempt."""
        seen = self.last().values()
        return [p for p in seen if attempt is None or p.metadata.labels.get(c.LABEL_ATTEMPT) == str(attempt)]

    def wait_finished(self, attempt: int, count: int = 1, timeout: float = 30) -> list[Any]:
        """The `count` pods of `attempt`, once the watch has seen each one's container terminated."""

        def finished() -> list[Any] | None:
            pods = self.pods(attempt)
            return pods if len(pods) == count and all(_terminated(p) for p in pods) else None

        return wait_for(
            finished,
            timeout=timeout,
            what=f"{count} finished pods of attempt {attempt}",
            last_state=lambda: [(p.metadata.name, p.status.phase) for p in self.pods()],
        )


class JobHistory(Recording):
    """One TPUJob's every status, as recorded: a status a pass wrote and the next replaced stays in it."""

    def first_status(self, matches: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        """The first status seen that `matches`."""
        return wait_for(
            lambda: next((s for s in self.statuses() if matches(s)), None),
            timeout=timeout,
            what="a status that matches",
            last_state=lambda: self.statuses()[-1:],
        )

    def statuses(self) -> list[dict[str, Any]]:
        return [o.get("status") or {} for o in self.states()]


def _listed(listed: Any) -> tuple[list[Any], str]:
    """A list's items and resourceVersion: a model list (pods) or a dict (custom objects)."""
    if isinstance(listed, dict):
        return list(listed["items"]), str(listed["metadata"]["resourceVersion"])
    return list(listed.items), str(listed.metadata.resource_version)


def _metadata(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return dict(obj["metadata"])
    return {"name": obj.metadata.name, "resourceVersion": obj.metadata.resource_version}


def _terminated(pod: Any) -> bool:
    statuses = pod.status.container_statuses or []
    return bool(statuses) and statuses[0].state.terminated is not None
