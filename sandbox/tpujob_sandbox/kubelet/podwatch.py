"""The simulated kubelet's view of the API: every pod listed, then watched, and each event queued as a sync
of that pod; one work thread runs the queue in order, so syncs (and other queued work) never overlap."""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from tpujob_sandbox.listwatch import shut_down

log = logging.getLogger(__name__)


class PodWatch:
    """Start with `start()`; `sync(namespace, name)` runs on the work thread for every pod event."""

    def __init__(self, core: k8s.CoreV1Api, sync: Callable[[str, str], None]) -> None:
        self.core = core
        self._sync = sync
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch_response: Any = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        for target, name in ((self._watch_pods, "kubelet-watch"), (self._work_loop, "kubelet-work")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop watching and working; queued work is dropped."""
        self._stopping.set()
        self._work.put(None)
        # Shutting the watch's socket ends it now rather than at its timeout, and spares the API server
        # waiting on it when it shuts down.
        if self._watch_response is not None:
            shut_down(self._watch_response)
        for thread in self._threads:
            thread.join(timeout=5)

    def enqueue(self, namespace: str, name: str) -> None:
        """Sync this pod on the work thread."""
        self._work.put(lambda: self._sync(namespace, name))

    def put(self, work: Callable[[], None]) -> None:
        """Run `work` on the work thread, after what is queued already."""
        self._work.put(work)

    def _watch_pods(self) -> None:
        """List, then watch from the list's version; any error (410 Gone, API server away) lists again."""
        while not self._stopping.is_set():
            try:
                listed = self.core.list_pod_for_all_namespaces()
                for pod in listed.items:
                    self.enqueue(pod.metadata.namespace, pod.metadata.name)
                self._watch_response = self.core.list_pod_for_all_namespaces(
                    watch=True,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=300,
                    _preload_content=False,
                )
                try:
                    if self._stopping.is_set():  # stop() came while the watch opened: it could not shut it
                        return
                    for line in watch.watch.iter_resp_lines(self._watch_response):
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            break
                        metadata = event["object"]["metadata"]
                        self.enqueue(metadata["namespace"], metadata["name"])
                finally:
                    # Closed, not only shut for reading: the API server sees the watch end (a watch still
                    # open held kube-apiserver's graceful shutdown for the bed's whole 10 s grace).
                    self._watch_response.close()
            except Exception as error:
                if self._stopping.wait(0.5):
                    return
                log.debug("kubelet-sim: watch restarts after %s", error)

    def _work_loop(self) -> None:
        while True:
            work = self._work.get()
            if work is None or self._stopping.is_set():
                return
            try:
                work()
            except Exception:
                log.exception("kubelet-sim: work failed")
