"""The pass, for one job: observe every fact (observe.py) -> decide once (tpujob.status, pure) -> act
(act.py), which returns what happened -> settle it into the status (pure) -> one status write, its events."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpujob import kube, metrics
from tpujob import status as s
from tpujob.api import OPERATOR_ZONE_SETTING, DefaultZones, InvalidTPUJob, TPUJob
from tpujob.api.status import Reason, TPUJobStatus
from tpujob.api.validation import judge_spec
from tpujob.gke import NodePools, WorkloadPolicies
from tpujob.gke_cluster import ClusterCheck
from tpujob.reconciler.act import REASON_UNREADABLE, Actions, JobGone
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.observe import Observer, Settings
from tpujob.reconciler.pod_views import Unreadable, pod_view
from tpujob.reconciler.release import Releaser
from tpujob.reconciler.snapshot import Snapshot, Watched
from tpujob.reconciler.status_writer import StatusWriter
from tpujob.reconciler.tenancy import NamespaceChips
from tpujob.records import JobRecord, JobRecords
from tpujob.render import Cluster
from tpujob.status.provisioned import as_provisioned

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


@dataclass
class Outcome:
    """What a pass did, for the kopf layer: when to look again; or that the job is gone from the API server
    (the pass acted on a body the watch still held), so nothing is to be done for it again."""

    requeue_after: float | None = None
    vanished: bool = False
    failed: bool = False  # the pass raised: run it again after a growing delay (the work queue's)


class Reconciler:
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

    def reconcile(self, snapshot: Snapshot) -> Outcome:
        """One pass over what `snapshot` shows (taken at its start: Watched.take); it reads no other fact
        of the watches."""
        with metrics.RECONCILE_DURATION.time(), metrics.RECONCILE_ERRORS.count_exceptions():
            return self._reconcile(snapshot)

    def _reconcile(self, snapshot: Snapshot) -> Outcome:
        body = snapshot.body()
        meta, now = body["metadata"], dt.datetime.now(dt.UTC)  # the pass' one clock
        status_before = self.memory.current_status(body)
        status = TPUJobStatus.model_validate(status_before)
        job: TPUJob | None = None
        observed: s.Observed | s.InvalidObserved
        try:
            # A job that names no zone is checked against the operator's own (TPUJOB_GKE_ZONE), and every
            # job against its namespace's tenancy policy.
            default_zones = DefaultZones(self.observer.cluster.zones, OPERATOR_ZONE_SETTING)
            policy = self.settings.tenancy.for_namespace(meta["namespace"])
            job = judge_spec(
                {**body, "status": None}, default_zones, policy, self.settings.max_hosts_per_job
            ).model_copy(update={"status": status})
            # Admitted on capacity a ProvisioningRequest made: the job makes no pool of its own beside it
            # (status/provisioned.py); before as_admitted, so the shape recorded is the one it runs.
            job = as_provisioned(job, snapshot.workloads)
            job, shape_refused = s.as_admitted(job)  # a running job's shape is the admitted one
        except InvalidTPUJob as invalid:
            observed = self.observer.observe_invalid(body, status, invalid, snapshot.pods, now)
            decision = s.decide_invalid(observed)
        else:
            observed = self.observer.observe(job, snapshot, now)
            if shape_refused:
                observed = dataclasses.replace(observed, shape_refused=tuple(map(str, shape_refused)))
            decision = s.decide(observed)
        if (
            decision.creates
            and self.settings.confirm_before_create
            and not self.actions.job_exists(meta["namespace"], meta["name"], meta["uid"])
        ):
            # The body came from the watch's cache, which a replica that stood by may still hold for a job
            # deleted meanwhile: nothing is created for a job the API server no longer has.
            return self._vanished(meta)
        try:
            cluster = self.observer.render_cluster(snapshot.cluster_check)
            applied = self.actions.apply(meta, job, decision, cluster, now)
        except JobGone:  # deleted before its finalizer was added: a normal race, not a failed pass
            return self._vanished(meta)
        if refusals := {**decision.refused, **applied.refused}:
            applied.retry_refused_after = self.memory.refused(
                meta["uid"],
                refusals,
                self.settings.poll_provisioning_seconds,
                self.settings.refused_backoff_seconds,
            )
        elif applied.operations and status.reason != Reason.QUOTA:
            # A create accepted while the job waits for quota proves nothing (GKE accepts it and ends it on
            # the shortfall within seconds): the backoff keeps growing, so the job asks again in its zone
            # ever less often (30 s, 60 s, ... 10 min) instead of every 30 s.
            self.memory.accepted(meta["uid"])
        decision = s.settle(observed, decision, applied)
        self.chips.settled(meta["uid"], decision.status)
        status_after = decision.status.to_wire()
        if status_after != status_before:
            self.status_writer.submit(
                meta["uid"],
                meta["namespace"],
                meta["name"],
                status_after,
                [status_before, body.get("status") or {}],
            )
        self.actions.post_events(meta, decision.events, now)
        if job is not None:
            self.recorder.record(job, status, decision.status, now)
        if decision.delete_job:
            log.info("%s/%s: ttlSecondsAfterFinished passed, deleting", meta["namespace"], meta["name"])
            self.actions.delete_job(meta["namespace"], meta["name"])
            self.forget(meta["uid"])
        return Outcome(requeue_after=decision.requeue_after)

    def _write_status(
        self, namespace: str, name: str, status: dict[str, Any], stored: list[dict[str, Any]]
    ) -> str | None:
        """A merge patch that also removes what the new status no longer has (startingSince once the
        workers run, ...): `stored` are the statuses the object may hold now. None: the job is gone."""
        return self.actions.patch_status(namespace, name, with_removals(status, stored))

    def _vanished(self, meta: dict[str, Any]) -> Outcome:
        log.info("%s/%s: gone from the API server; forgotten", meta["namespace"], meta["name"])
        self.forget(meta["uid"])
        return Outcome(vanished=True)
