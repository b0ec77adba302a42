"""The soak bench's churn (bench/soak_bench.py): which end each job index comes to, and the threads that
create jobs, watch their pods and themselves, and set each job's end in motion."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from tpujob.api import constants as c
from tpujob_sandbox.kubelet.podstatus import EXIT_CODE_ANNOTATION

IMAGE = "registry.example/sleeper:1"  # tests/manifests.PLAIN_IMAGE: the kubelet runs no process for it

PLATFORM_POOL = "soak-platform"
QUEUE = "soak-queue"
V5E_2X2_LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "2x2",
}


def on_platform_pool(index: int) -> bool:
    return index % 10 >= 3


def through_kueue(index: int) -> bool:
    return index % 10 in (5, 6)


def job_manifest(name: str, index: int) -> dict[str, Any]:
    run_policy: dict[str, Any] = {"maxRestarts": 0} if index % 10 == 0 else {}
    labels = {"soak-index": str(index)}
    if through_kueue(index):
        labels[c.LABEL_QUEUE_NAME] = QUEUE
    spec: dict[str, Any] = {
        "tpu": {"type": "v5e", "topology": "2x2"},
        "trainer": {"image": IMAGE},
        "runPolicy": run_policy,
    }
    if on_platform_pool(index):
        spec["nodePool"] = {"policy": "existing"}
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": "TPUJob",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


class Churn:
    """Keeps `live` jobs alive, each driven to its end by watch events of its pods and of itself."""

    def __init__(self, api: k8s.ApiClient, namespaces: list[str], live: int) -> None:
        self.core, self.custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        self.namespaces, self.target = namespaces, live
        self.lock = threading.Condition()
        self.live: dict[tuple[str, str], int] = {}  # (namespace, name) -> index
        self.acted: set[tuple[str, str]] = set()  # jobs whose end was set in motion
        self.posted: set[tuple[str, str]] = set()  # live jobs whose create has returned
        self.created = self.done = 0
        self.creating = True
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="soak")

    # --- what the bench does ---------------------------------------------------------------------

    def fill(self) -> None:
        """Create jobs while fewer than the target are alive (one thread)."""
        while not self.stop.is_set():
            with self.lock:
                self.lock.wait_for(lambda: len(self.live) < self.target or not self.creating, 1.0)
                if not self.creating or len(self.live) >= self.target:
                    continue
                index = self.created
                self.created += 1
                namespace = self.namespaces[index % len(self.namespaces)]
                key = (namespace, f"soak-{index}")
                self.live[key] = index
            try:
                self.custom.create_namespaced_custom_object(
                    c.GROUP, c.VERSION, namespace, c.PLURAL, job_manifest(key[1], index)
                )
            except k8s.ApiException as error:
                self._error(f"create {key}: {error.status} {error.reason}")
                self._gone(key)
                time.sleep(1)  # the API server refuses: not a tight loop
                continue
            with self.lock:
                if key in self.live:
                    self.posted.add(key)
            if index % 10 == 2:
                self._act(key, self._delete)

    def _act(self, key: tuple[str, str], action: Any, *args: Any) -> None:
        with self.lock:
            if key in self.acted:
                return
            self.acted.add(key)
        self.pool.submit(self._safely, action, key, *args)

    def _safely(self, action: Any, key: tuple[str, str], *args: Any) -> None:
        try:
            action(key, *args)
        except k8s.ApiException as error:
            if error.status != 404:
                self._error(f"{action.__name__} {key}: {error.status} {error.reason}")
                with self.lock:
                    self.acted.discard(key)

    def _delete(self, key: tuple[str, str]) -> None:
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, key[0], c.PLURAL, key[1])

    def _exit_pod(self, key: tuple[str, str], pod: str, code: int) -> None:
        annotations = {EXIT_CODE_ANNOTATION: str(code)}
        self.core.patch_namespaced_pod(pod, key[0], {"metadata": {"annotations": annotations}})

    def _suspend(self, key: tuple[str, str]) -> None:
        """Suspend only: the job watch deletes it once it is Suspended (waiting here would hold one of the
        bench's threads for the pods' grace period)."""
        patch = {"spec": {"runPolicy": {"suspend": True}}}
        self.custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, key[0], c.PLURAL, key[1], patch)

    # --- what the watches show -------------------------------------------------------------------

    def on_pod(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        job = (metadata.get("labels") or {}).get(c.LABEL_JOB_NAME)
        phase = (pod.get("status") or {}).get("phase")
        if job is None or phase != "Running" or metadata.get("deletionTimestamp"):
            return
        key = (metadata["namespace"], job)
        with self.lock:
            index = self.live.get(key)
        if index is None:
            return
        end = index % 10
        if end == 0:
            self._act(key, self._exit_pod, metadata["name"], 1)
        elif end in (1, 6):
            self._act(key, self._delete)
        elif end == 3:
            self._act(key, self._suspend)
        elif end != 2:
            self._act(key, self._exit_pod, metadata["name"], 0)

    def on_job(self, event_type: str, job: dict[str, Any]) -> None:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        if event_type == "DELETED":
            self._gone(key)
            return
        phase = (job.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Suspended") and not job["metadata"].get("deletionTimestamp"):
            with self.lock:
                self.acted.discard(key)  # its pod's end was the first act; the delete is the last
            self._act(key, self._delete)

    def _gone(self, key: tuple[str, str]) -> None:
        with self.lock:
            if self.live.pop(key, None) is not None:
                self.done += 1
            self.posted.discard(key)
            self.acted.discard(key)
            self.lock.notify_all()

    def _error(self, text: str) -> None:
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(text)

    # --- watches, restarted when they end; a relist catches what a gap missed --------------------

    def watch_pods(self) -> None:
        while not self.stop.is_set():
            try:
                for event in k8s_watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=c.LABEL_JOB_NAME,
                    timeout_seconds=30,
                    deserialize=False,  # plain JSON: the client's models cost the bench's simulators CPU
                ):
                    self.on_pod(event["object"])
            except Exception as error:  # a watch that broke is started again
                self._error(f"pod watch: {error!r}")
                time.sleep(1)

    def watch_jobs(self) -> None:
        while not self.stop.is_set():
            try:
                for event in k8s_watch.Watch().stream(
                    self.custom.list_cluster_custom_object, c.GROUP, c.VERSION, c.PLURAL, timeout_seconds=30
                ):
                    self.on_job(event["type"], event["object"])
            except Exception as error:
                self._error(f"job watch: {error!r}")
                time.sleep(1)
            self.relist()

    def relist(self) -> None:
        """Jobs the bench holds alive that the API server no longer has (a DELETED between two watches). Only
        jobs whose create had returned before the list began are judged: one created meanwhile is not in it
        (judged so, it was counted done and never deleted: 15 of the first hour-long run's jobs)."""
        with self.lock:
            created_before = set(self.posted)
        listed = self.custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL)["items"]
        existing = {(j["metadata"]["namespace"], j["metadata"]["name"]) for j in listed}
        for key in created_before - existing:
            self._gone(key)
