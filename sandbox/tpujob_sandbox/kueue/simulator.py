"""Kueue's controllers on the test bed: threads in the test process (like the simulated GKE and kubelet)
that watch ResourceFlavors, ClusterQueues, LocalQueues and Workloads (in the version the installed CRDs
serve, as that Kueue release would: v1beta2, or v1beta1 for v0.14; discovery.py), run the pure model
(model.reconcile) on every change and at its timers (waitForPodsReady, requeueAt), and write what Kueue
would: Workload status through the status subresource (merge patches carrying the resourceVersion, so a
stale view gets a 409 and the pass runs again), Kueue's finalizer off orphans, queue statuses. With the
Kueue CRDs absent or removed it waits quietly and picks up again when they come back."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from tpujob_sandbox.kueue.config import KueueConfig
from tpujob_sandbox.kueue.discovery import served_version
from tpujob_sandbox.kueue.model import Plan, World, reconcile
from tpujob_sandbox.kueue.objects import GROUP, RESOURCE_IN_USE_FINALIZER, Obj, key
from tpujob_sandbox.listwatch import shut_down

log = logging.getLogger(__name__)

PLURALS = ("resourceflavors", "clusterqueues", "localqueues", "workloads")
MERGE_PATCH = "application/merge-patch+json"
# A pass at least this often, whatever the watches say (a watch may miss the CRDs' return).
RESYNC_SECONDS = 2.0
RETRY_SECONDS = 0.5


class KueueSimulator:
    def __init__(self, api_client: k8s.ApiClient, config: KueueConfig | None = None) -> None:
        self.api_client = api_client
        self.custom = k8s.CustomObjectsApi(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self._config = config or KueueConfig()
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.passes = 0  # passes run (a test can wait for one after a change)
        self.latest: World | None = None  # the objects as the last pass left them

    # --- control ---------------------------------------------------------------------------------------

    @property
    def config(self) -> KueueConfig:
        return self._config

    def configure(self, config: KueueConfig | None = None, **changes: Any) -> None:
        """Replace Kueue's configuration (or change some fields); the next pass uses it."""
        with self._lock:
            self._config = replace(config or self._config, **changes)
        self._dirty.set()

    def poke(self) -> None:
        self._dirty.set()

    def start(self) -> KueueSimulator:
        threads = [threading.Thread(target=self._watch, args=(p,), name=f"kueue-watch-{p}") for p in PLURALS]
        threads.append(threading.Thread(target=self._work, name="kueue-work"))
        for thread in threads:
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._dirty.set()
        for response in list(self._responses.values()):
            shut_down(response)
        for thread in self._threads:
            thread.join(timeout=5)

    # --- watching -----------------------------------------------------------------------------------------

    def _watch(self, plural: str) -> None:
        """List then watch; every event asks for a pass. Absent CRDs (404) or any error: wait and retry."""
        while not self._stopping.is_set():
            try:
                version = served_version(self.api_client)
                if version is None:
                    raise LookupError(f"{GROUP} is not served")
                listed = self.custom.list_cluster_custom_object(GROUP, version, plural)
                self._dirty.set()
                response = self.custom.list_cluster_custom_object(
                    GROUP,
                    version,
                    plural,
                    watch=True,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=60,
                    _preload_content=False,
                )
                self._responses[plural] = response
                try:
                    if self._stopping.is_set():
                        return
                    for line in watch.watch.iter_resp_lines(response):
                        if json.loads(line).get("type") == "ERROR":
                            break
                        self._dirty.set()
                finally:
                    response.close()  # not only shut for reading: the API server sees the watch end
            except Exception as error:
                log.debug("kueue-sim: %s watch restarts after %s", plural, error)
                if self._stopping.wait(RETRY_SECONDS):
                    return

    # --- the passes ---------------------------------------------------------------------------------------

    def _work(self) -> None:
        wake_at: datetime | None = None
        while not self._stopping.is_set():
            timeout = RESYNC_SECONDS
            if wake_at is not None:
                timeout = min(timeout, max((wake_at - datetime.now(UTC)).total_seconds(), 0.0) + 0.05)
            self._dirty.wait(timeout)
            self._dirty.clear()
            if self._stopping.is_set():
                return
            try:
                wake_at = self.run_pass()
            except Exception as error:
                wake_at = None
                log.debug("kueue-sim: pass failed: %s", error)
                self._stopping.wait(RETRY_SECONDS)
                self._dirty.set()

    def _list(self, version: str, plural: str) -> list[Obj]:
        """Every object of the kind; none while its CRD is absent (CRDs go one by one on uninstall, and the
        Workloads' finalizers must still be handled while the others are gone)."""
        try:
            items: list[Obj] = self.custom.list_cluster_custom_object(GROUP, version, plural)["items"]
        except k8s.ApiException as error:
            if error.status == 404:
                return []
            raise
        return items

    def run_pass(self) -> datetime | None:
        """List everything, run the model, write its plan. Returns when the model wants another look."""
        version = served_version(self.api_client)
        if version is None:
            return None  # no Kueue CRDs: nothing to do until they come
        flavors, cluster_queues, local_queues, workloads = (self._list(version, p) for p in PLURALS)
        world = World(flavors, cluster_queues, local_queues, workloads, version=version)
        if any((f.get("spec") or {}).get("topologyName") for f in flavors):
            # Topology-aware scheduling reads the Topologies and the Nodes (Kueue's TAS cache watches both:
            # pkg/controller/tas/topology_controller.go, node_controller.go); read each pass, the resync
            # bounding how stale they get.
            world.topologies = self._list(version, "topologies")
            response = self.core.list_node(_preload_content=False)
            world.nodes = json.loads(response.data)["items"]
        with self._lock:
            config = self._config
        plan = reconcile(world, config, datetime.now(UTC))
        conflicts = self._apply(world, plan)
        # What the pass left, for the visibility API (visibility_server.py): Kueue answers from its queue
        # manager's memory, not from a fresh list.
        self.latest = replace(
            world,
            workloads=[
                {**w, "status": plan.workload_status.get(key(w), w.get("status"))} for w in world.workloads
            ],
        )
        self.passes += 1
        if conflicts:
            self._dirty.set()
        return plan.wake_at

    def _apply(self, world: World, plan: Plan) -> int:
        versions = {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"], plural): o
            for plural, objects in zip(
                PLURALS,
                (world.flavors, world.cluster_queues, world.local_queues, world.workloads),
                strict=True,
            )
            for o in objects
        }
        conflicts = 0
        for (namespace, name), status in plan.workload_status.items():
            old = versions[(namespace, name, "workloads")]
            body = {"status": {**dict.fromkeys(old.get("status") or {}), **status}}
            conflicts += self._patch(old, "workloads", body, status_subresource=True)
        for namespace, name in plan.remove_finalizer:
            old = versions[(namespace, name, "workloads")]
            kept = [f for f in old["metadata"].get("finalizers") or [] if f != RESOURCE_IN_USE_FINALIZER]
            conflicts += self._patch(
                old, "workloads", {"metadata": {"finalizers": kept}}, status_subresource=False
            )
        for namespace, name in plan.deactivate:
            old = versions[(namespace, name, "workloads")]
            conflicts += self._patch(old, "workloads", {"spec": {"active": False}}, status_subresource=False)
        for name, status in plan.cluster_queue_status.items():
            conflicts += self._patch(
                versions[("", name, "clusterqueues")], "clusterqueues", {"status": status}, True
            )
        for (namespace, name), status in plan.local_queue_status.items():
            conflicts += self._patch(
                versions[(namespace, name, "localqueues")], "localqueues", {"status": status}, True
            )
        return conflicts

    def _patch(self, old: Obj, plural: str, body: Obj, status_subresource: bool) -> int:
        """A merge patch carrying the resourceVersion the model saw: 409 when the object moved on (counted,
        the next pass reads it again), 404 when it is gone (nothing to do)."""
        metadata = old["metadata"]
        namespace = metadata.get("namespace")
        # The object's own version, as listed (every item of a custom resource list carries it).
        path = f"/apis/{old['apiVersion']}/" + (f"namespaces/{namespace}/" if namespace else "")
        path += f"{plural}/{metadata['name']}" + ("/status" if status_subresource else "")
        body = {
            **body,
            "metadata": {**body.get("metadata", {}), "resourceVersion": metadata["resourceVersion"]},
        }
        try:
            self.api_client.call_api(
                path,
                "PATCH",
                header_params={"Content-Type": MERGE_PATCH, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
            )
        except k8s.ApiException as error:
            if error.status in (404, 409):
                return 1 if error.status == 409 else 0
            raise
        return 0
