"""The pass, for one job: observe every fact (observe.py, from the pass' one snapshot) -> decide once
(tpujob.status, pure) -> act (act.py), which returns what happened -> settle it into the status (pure) -> one
status write, its events."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from tpujob import metrics
from tpujob import status as s
from tpujob.api import OPERATOR_ZONE_SETTING, DefaultZones, InvalidTPUJob, TPUJob
from tpujob.api.status import Reason, TPUJobStatus
from tpujob.api.validation import judge_spec
from tpujob.reconciler.act import JobGone
from tpujob.reconciler.parts import Parts
from tpujob.reconciler.snapshot import Snapshot
from tpujob.status.provisioned import as_provisioned

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a pass did, for the kopf layer: when to look again; or that the job is gone from the API server
    (the pass acted on a body the watch still held), so nothing is to be done for it again."""

    requeue_after: float | None = None
    vanished: bool = False
    failed: bool = False  # the pass raised: run it again after a growing delay (the work queue's)


class Reconciler(Parts):
    """Runs passes (`reconcile`) over the parts it is wired from (parts.py)."""

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
        job, observed = self._observe(snapshot, body, status, now)
        decision = s.decide(observed) if isinstance(observed, s.Observed) else s.decide_invalid(observed)
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
        self._remember_answers(meta["uid"], status, decision, applied)
        decision = s.settle(observed, decision, applied)
        self.chips.settled(meta["uid"], decision.status)  # a job not admitted, or ended, counts no more
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

    def _observe(
        self, snapshot: Snapshot, body: dict[str, Any], status: TPUJobStatus, now: dt.datetime
    ) -> tuple[TPUJob | None, s.Observed | s.InvalidObserved]:
        """The job as the operator's rules judge it (None: refused), and what the pass observed of it."""
        meta = body["metadata"]
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
            return None, self.observer.observe_invalid(body, status, invalid, snapshot.pods, now)
        observed = self.observer.observe(job, snapshot, now)
        if shape_refused:
            observed = dataclasses.replace(observed, shape_refused=tuple(map(str, shape_refused)))
        return job, observed

    def _remember_answers(
        self, uid: str, status: TPUJobStatus, decision: s.Decision, applied: s.Applied
    ) -> None:
        """GKE's refusals backed off across passes (when to ask again, in `applied`); an accepted create
        starts the backoff over."""
        if refusals := {**decision.refused, **applied.refused}:
            applied.retry_refused_after = self.memory.refused(
                uid,
                refusals,
                self.settings.poll_provisioning_seconds,
                self.settings.refused_backoff_seconds,
            )
        elif applied.operations and status.reason != Reason.QUOTA:
            # A create accepted while the job waits for quota proves nothing (GKE accepts it and ends it on
            # the shortfall within seconds): the backoff keeps growing, so the job asks again in its zone
            # ever less often (30 s, 60 s, ... 10 min) instead of every 30 s.
            self.memory.accepted(uid)

    def _vanished(self, meta: dict[str, Any]) -> Outcome:
        log.info("%s/%s: gone from the API server; forgotten", meta["namespace"], meta["name"])
        self.forget(meta["uid"])
        return Outcome(vanished=True)
