"""The reconciler's parts, wired once (observe, act, release, the status writer, the records, the cluster's
facts, the chip ledger), and what the kopf layer asks of them between passes: forget a job, stand by, take a
watched pod's last words, refresh the cluster's facts, release a deleted job's pools. The pass itself is
passes.Reconciler's."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from tpujob import kube, metrics
from tpujob import status as s
from tpujob.gke import NodePools, WorkloadPolicies
from tpujob.gke_cluster import ClusterCheck
from tpujob.reconciler.act import REASON_UNREADABLE, Actions
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.observe import Observer, Settings
from tpujob.reconciler.pod_views import Unreadable, pod_view
from tpujob.reconciler.release import Releaser
from tpujob.reconciler.snapshot import Watched
from tpujob.reconciler.status_writer import StatusWriter
from tpujob.reconciler.tenancy import NamespaceChips
from tpujob.records import JobRecord, JobRecords
from tpujob.render import Cluster

log = logging.getLogger(__name__)


def with_removals(status: dict[str, Any], stored: list[dict[str, Any]]) -> dict[str, Any]:
    """`status` as a JSON merge patch over any of `stored`: a key they have and it lacks is null (removed),
    in nested objects too (lists are replaced whole by a merge patch)."""
    patch = dict(status)
    for key in {key for old in stored for key in old}:
        if key not in status:
            patch[key] = None
        elif isinstance(status[key], dict):
            nested = [old[key] for old in stored if isinstance(old.get(key), dict)]
            patch[key] = with_removals(status[key], nested)
    return patch


class Parts:
    def __init__(
        self,
        cluster: Cluster,
        api: kube.Kube,
        pools: NodePools | None,
        settings: Settings | None = None,
        policies: WorkloadPolicies | None = None,
        records: JobRecords | None = None,
    ) -> None:
        # Everything kept about a job between passes, one record per job: what the watch has not shown
        # (memory), the metrics' per-job values (recorder), when its progress was last read (observer).
        self.records = records if records is not None else JobRecords()
        self.memory = JobMemory(self.records)
        self.settings = settings or Settings()
        # The cluster's facts the loops and watches keep; a pass sees them in its snapshot (`watched.take`).
        self.watched = Watched()
        # The namespaces' chips (tenancy maxChips): counted from the TPUJob watch, read when observing,
        # reserved when acting, released when settling.
        self.chips = NamespaceChips(self.records, self._has_chip_limit)
        self.observer = Observer(
            cluster, api, pools, self.memory, self.settings, policies, self.watched, self.chips
        )
        self.actions = Actions(api, pools, self.memory, self.chips, self.settings.refused_backoff_seconds)
        self.releaser = Releaser(pools, self.observer, self.actions, self.forget)
        self.recorder = metrics.PassRecorder(self.records)
        self.status_writer = StatusWriter(self._write_status, self.memory, self.forget)

    def _has_chip_limit(self, namespace: str) -> bool:
        return self.settings.tenancy.for_namespace(namespace).max_chips is not None

    def _write_status(
        self, namespace: str, name: str, status: dict[str, Any], stored: list[dict[str, Any]]
    ) -> str | None:
        """A merge patch that also removes what the new status no longer has (startingSince once the
        workers run, ...): `stored` are the statuses the object may hold now. None: the job is gone."""
        return self.actions.patch_status(namespace, name, with_removals(status, stored))

    def forget(self, uid: str) -> None:
        """The job is gone: its record, and its status write if one waits."""
        self.records.forget(uid)
        self.status_writer.forget(uid)

    def retain(self, live: set[str]) -> None:
        """Forget every job whose UID is not in `live`."""
        for uid in self.records.retain(live):
            self.status_writer.forget(uid)

    def forget_all(self) -> None:
        """A replica standing by: what it remembers (its own status writes, pods in flight) goes stale
        while another one works, and the job gauges it exports are the active replica's to export."""
        self.records.forget_all()
        self.status_writer.discard()
        self.actions.events.discard()

    def passing(self, uid: str, now: float) -> None:
        """A pass for the job begins at `now` (the event loop's clock): the resync skips it until later."""

        def keep(record: JobRecord) -> None:
            record.last_pass = now

        self.records.update(uid, keep)

    def last_pass(self, uid: str) -> float:
        """When the job's last pass began (the event loop's clock); -inf if none did."""
        when = self.records.read(uid, lambda record: record.last_pass, None)
        return -math.inf if when is None else when

    def close(self, timeout: float) -> None:
        """At shutdown: the waiting status writes and queued Events sent, for up to `timeout` seconds each."""
        self.status_writer.stop(timeout)
        self.actions.close(timeout)
        self.observer.progress.close()

    def is_own_write(self, body: Mapping[str, Any]) -> bool:
        """The job as this operator's last status write left it: the pass that wrote it saw everything
        else, so the watch's echo of the write needs no pass of its own."""
        return self.memory.is_own_write(body)

    def is_own_create(self, pod: Mapping[str, Any]) -> bool:
        return self.memory.is_own_create(pod)

    def unreadable(self, kind: tuple[str, str], body: Mapping[str, Any], problem: str) -> None:
        """A watched object whose fields a tenant wrote unreadably (handlers/owned.py): said once per
        problem, in the log and by an Event in the object's namespace."""
        meta = body["metadata"]
        log.warning("%s %s/%s: %s", kind[1], meta.get("namespace"), meta.get("name"), problem)
        involved = {key: meta.get(key) or "" for key in ("name", "namespace", "uid")}
        if isinstance(body.get("apiVersion"), str):  # the version served (Kueue's: v1beta2 or v1beta1)
            kind = (body["apiVersion"], kind[1])
        self.actions.post_object_event(kind, involved, s.Event("Warning", REASON_UNREADABLE, problem))

    def saw_pod(self, pod: Mapping[str, Any], job_uid: str) -> None:
        """Every watch event of a worker pod: a deleted one's last words are kept for the next pass. Only
        for the job its labels name in its own namespace (`job_uid`): a tenant can point a pod's owner
        reference at any UID, another namespace's job's too."""
        owners = [o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")]
        if owners and owners[0].get("uid") == job_uid and pod["metadata"].get("deletionTimestamp"):
            try:
                view = pod_view(pod)
            except Unreadable:  # left out of the pods' map, and said there
                return
            if view.message:
                self.memory.pod_departing(job_uid, view)

    # What the kopf layer asks between passes, each done where it lives.
    def check_cluster(self) -> ClusterCheck | None:
        return self.observer.check_cluster()

    def refresh_maintenance(self) -> None:
        self.observer.refresh_maintenance()

    def release_pools(self, body: dict[str, Any]) -> list[str]:
        """A deleted job: its pools' deletes started (the names GKE still has), and its Workload let go."""
        remaining = self.releaser.release_pools(body)
        self.releaser.release_workload(body)
        return remaining

    def sweep_orphans(self, namespace: str | None = None) -> list[str]:
        return self.releaser.sweep_orphans(namespace)
