"""The cluster autoscaler's part for flex-start pools: a slice comes up whole when its pods wait, and goes
when its run duration ends.

GKE (https://cloud.google.com/kubernetes-engine/docs/concepts/dws): a flex-start pool is created empty with
autoscaling on; when pods that need it are pending, GKE requests the capacity and, once Dynamic Workload
Scheduler has it, provisions every VM of the slice at once (a multi-host slice is all or nothing); the VMs
run at most `maxRunDuration` (7 days by default and at most). How long the queue takes is the market's:
here `queue_seconds` of GKE time once capacity is free. What happens to the nodes at the run-duration limit
is not documented (README): here they shut down as a reclaimed VM does (15 s for the pods), then go. The
run duration itself is wall-clock time (the user's limit, which the operator counts as well), not scaled.

The autoscaler scans every SCAN_SECONDS, as Kubernetes' cluster autoscaler does (--scan-interval 10s), and
as it does, from a cache of the pending pods a watch keeps (listwatch.py), not a list each scan: listing
them typed every quarter second was 18% of a pytest worker's samples in the capacity tests (py-spy,
2026-11-29).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kubernetes import client as k8s

from tpujob.api import constants
from tpujob_sandbox.gke.nodepools import MIN_SCAN_REAL_SECONDS, NodePools, _Pool
from tpujob_sandbox.listwatch import ListWatch, json_list

log = logging.getLogger(__name__)

SCAN_SECONDS = 10.0
QUEUE_SECONDS = 300.0  # GKE time from the first pending pod to the slice, when capacity is there


class FlexStartAutoscaler:
    def __init__(
        self,
        core: k8s.CoreV1Api,
        pools: Callable[[], list[NodePools]],
        *,
        later: Callable[..., None],
        time_scale: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # A pod leaving Pending leaves the watch's selection: the API server sends it as DELETED
        # (k8s.io/apiserver storage/cacher/cache_watcher.go, convertToWatchEvent: an object that passed the
        # filter and no longer does), which tests/sandbox/test_listwatch.py sees on the test bed.
        self._pending = ListWatch(
            json_list(core.api_client, "/api/v1/pods", {"fieldSelector": "status.phase=Pending"}),
            name="pending-pods",
            retry_seconds=MIN_SCAN_REAL_SECONDS,
        )
        self.pools = pools
        self.queue_seconds = QUEUE_SECONDS
        self.time_scale = time_scale
        # Shuts the given nodes down gracefully (the simulated kubelet's node shutdown); set by the test bed.
        self.shut_down_nodes: Callable[[list[str]], None] = lambda nodes: None
        self._later = later
        self._clock = clock
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> None:
        self._pending.start()
        self._later(SCAN_SECONDS, self._scan, min_real_seconds=MIN_SCAN_REAL_SECONDS)

    def stop(self) -> None:
        self._stopped = True
        self._pending.stop()

    def _scan(self) -> None:
        if self._stopped:
            return
        try:
            with self._lock:
                self._scan_once()
        finally:
            self._later(SCAN_SECONDS, self._scan, min_real_seconds=MIN_SCAN_REAL_SECONDS)

    def _scan_once(self) -> None:
        records = [(pools, record) for pools in self.pools() for record in pools.flex_pools()]
        if not records:
            return
        waiting = self._pools_with_pending_pods()
        now = self._clock()
        for pools, record in records:
            if record.node_names:
                if record.run_ends is not None and now >= record.run_ends:
                    self._end_run(pools, record)
                continue
            if record.pool.name not in waiting:
                record.queued_since = None
                continue
            if record.queued_since is None:
                record.queued_since = now
            if now - record.queued_since < self.queue_seconds * self.time_scale:
                continue
            if pools.take_capacity(record):
                pools.register_slice(record)
                # The run duration is the user's own wall-clock limit, which the operator counts too: not
                # scaled, or the simulated GKE and the operator would disagree about when it ends.
                record.run_ends = self._clock() + record.max_run_seconds
                log.info("flex-start: %s got its %d VMs", record.pool.name, record.shape.nodes)

    def _pools_with_pending_pods(self) -> set[str]:
        return {
            selector[constants.NODE_LABEL_NODEPOOL]
            for pod in self._pending.items()
            if not pod["spec"].get("nodeName")
            and (selector := pod["spec"].get("nodeSelector") or {}).get(constants.NODE_LABEL_NODEPOOL)
        }

    def _end_run(self, pools: NodePools, record: _Pool) -> None:
        names = list(record.node_names)
        log.info("flex-start: %s reached its run duration; its VMs go", record.pool.name)
        self.shut_down_nodes(names)
        for name in pools.release_slice(record):
            pools.nodes.remove(name)
