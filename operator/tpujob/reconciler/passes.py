"""The pass: observe (observe.py) -> decide (tpujob.status, pure) -> act (act.py), for one job; plus the
finalizer's release of a job's pools and the sweep of pools whose job is gone."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpujob import gke, kube, metrics
from tpujob import status as s
from tpujob.api import InvalidTPUJob, TPUJob, parse_tpujob
from tpujob.api.spec import CapacityMode, NodePoolPolicy
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.gke import ClusterCheck, NodePools, WorkloadPolicies
from tpujob.reconciler.act import Actions
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.observe import Observer, Settings
from tpujob.render import Cluster, naming
from tpujob.render import plan as render

log = logging.getLogger(__name__)

# First look at a pool just requested: fast provisioning (or a create refused asynchronously) shows
# up at once; later polls are every TPUJOB_POLL_PROVISIONING_SECONDS.
FIRST_POLL_SECONDS = 0.25


# A pod create the API server refused (a PriorityClass that does not exist, an admission webhook or quota
# saying no) is asked again this often: someone may fix it meanwhile, and the startup timeout ends the wait.
POD_REFUSED_RETRY_SECONDS = 10.0


def is_refusal(error: Exception) -> bool:
    """A 4xx answer that the same request cannot pass (400 Bad Request, 403 Forbidden, 422 Invalid), as
    opposed to a conflict, a throttle or a server error, which a retry of the pass handles."""
    return isinstance(error, kube.ApiError) and error.status in (400, 403, 422)


def refusal_message(error: Exception) -> str:
    """The API server's own words: the Status object's message, else the reason line."""
    body = getattr(error, "body", None) or ""
    try:
        message = json.loads(body).get("message", "") if body else ""
    except (ValueError, AttributeError):
        message = ""
    return str(message or getattr(error, "reason", "") or error)


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


class Reconciler:
    def __init__(
        self,
        cluster: Cluster,
        api: kube.Kube,
        pools: NodePools | None,
        restart_backoff_seconds: float = 10.0,
        *,
        policies: WorkloadPolicies | None = None,
        unschedulable_grace_seconds: float = 30.0,
        startup_grace_seconds: float = 30.0,
        poll_provisioning_seconds: float = s.DEFAULT_POLL_PROVISIONING_SECONDS,
        refused_backoff_seconds: float = s.REJECTED_BACKOFF_BASE_SECONDS,
    ) -> None:
        self.cluster = cluster
        self.pools = pools
        self.policies = policies
        self.memory = JobMemory()
        settings = Settings(
            restart_backoff_seconds=restart_backoff_seconds,
            unschedulable_grace_seconds=unschedulable_grace_seconds,
            startup_grace_seconds=startup_grace_seconds,
            poll_provisioning_seconds=poll_provisioning_seconds,
            refused_backoff_seconds=refused_backoff_seconds,
        )
        self.observer = Observer(cluster, api, pools, self.memory, settings)
        self.actions = Actions(api, pools)
        self.recorder = metrics.PassRecorder()

    def forget(self, uid: str) -> None:
        self.memory.forget(uid)
        self.recorder.forget(uid)

    def forget_all(self) -> None:
        """A replica standing by: what it remembers (its own status writes, pods in flight) goes stale
        while another one works, and the job gauges it exports are the active replica's to export."""
        for uid in self.memory.uids() | self.recorder.uids():
            self.forget(uid)

    def is_own_write(self, body: Mapping[str, Any]) -> bool:
        """The job as this operator's last status write left it: the pass that wrote it saw everything
        else, so the watch's echo of the write needs no pass of its own."""
        return self.memory.is_own_write(body)

    def is_own_create(self, pod: Mapping[str, Any]) -> bool:
        """The watch's first sight of a pod a pass created, as it was created (not yet scheduled): that pass
        counted it in flight already, so it needs no pass of its own. Its next change does."""
        meta, status = pod["metadata"], pod.get("status") or {}
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
        if (
            not owners
            or status.get("phase", "Pending") != "Pending"
            or (pod.get("spec") or {}).get("nodeName")
        ):
            return False
        return self.memory.is_created_in_flight(owners[0]["uid"], meta["name"])

    def check_cluster(self) -> ClusterCheck | None:
        return self.observer.check_cluster()

    def refresh_maintenance(self) -> None:
        self.observer.refresh_maintenance()

    # --- the pass --------------------------------------------------------------------------------

    def reconcile(self, body: dict[str, Any], pods: list[s.PodView], service_exists: bool) -> Outcome:
        with metrics.RECONCILE_DURATION.time(), metrics.RECONCILE_ERRORS.count_exceptions():
            return self._reconcile(body, pods, service_exists)

    def _reconcile(self, body: dict[str, Any], pods: list[s.PodView], service_exists: bool) -> Outcome:
        meta = body["metadata"]
        status_before = self.memory.current_status(body)
        try:
            job = parse_tpujob({**body, "status": None})
        except InvalidTPUJob as invalid:
            return self._invalid(body, status_before, invalid, pods)
        job = job.model_copy(update={"status": TPUJobStatus.model_validate(status_before)})
        now = dt.datetime.now(dt.UTC)
        observed = self.observer.observe(job, pods, service_exists, now)
        decision = s.decide(observed)
        creates = decision.create_pools or decision.create_pods or decision.create_service
        if creates and not self.actions.job_exists(meta["namespace"], meta["name"], meta["uid"]):
            # The body came from the watch's cache, which a replica that stood by may still hold for a job
            # deleted meanwhile: nothing is created for a job the API server no longer has.
            return self._vanished(meta)
        if decision.create_pools:
            # The finalizer before any paid resource: a job deleted from now on waits for its pools.
            self.actions.ensure_finalizer(meta)
            decision = self._create_pools(job, observed, decision)
        if refused := self._act(job, decision):
            decision = self._pods_refused(observed, decision, refused)
        status_after = decision.status.to_wire()
        stored = [status_before, body.get("status") or {}]
        if status_after != status_before and not self._write_status(meta, status_after, stored):
            return self._vanished(meta)
        self.actions.post_events(meta, decision.events, now)
        self.recorder.record(job, job.status or TPUJobStatus(), decision.status, now)
        if decision.delete_job:
            log.info("%s/%s: ttlSecondsAfterFinished passed, deleting", meta["namespace"], meta["name"])
            self.actions.delete_job(meta["namespace"], meta["name"])
            self.forget(meta["uid"])
        return Outcome(requeue_after=decision.requeue_after)

    def _create_pools(self, job: TPUJob, observed: s.Observed, decision: s.Decision) -> s.Decision:
        """Create the pools, then decide again knowing which creates GKE refused (and why)."""
        errors: dict[int, s.GKEError] = {}
        operations: dict[int, str] = {}
        placement = self._placement_problem(job)
        for slice_index in decision.create_pools:
            if placement is not None:
                errors[slice_index] = placement
                continue
            request = render.node_pool(
                job, self.observer.render_cluster, slice_index, zone=decision.status.zone
            )
            operation, error = self.actions.create_pool(request)
            if error is not None:
                errors[slice_index] = error
            operations[slice_index] = operation
        views = {p.slice: p for p in observed.pools or ()}
        for slice_index in decision.create_pools:
            if slice_index not in errors:
                # As GKE will report it (no status message while provisioning): the first poll that finds
                # it so writes no status.
                views[slice_index] = s.PoolView(
                    slice_index,
                    naming.node_pool_name(job, slice_index),
                    "PROVISIONING",
                    operation=operations.get(slice_index, ""),
                    zone=decision.status.zone or "",
                )
        again = s.decide(
            dataclasses.replace(observed, pools=tuple(views[k] for k in sorted(views)), gke_errors=errors)
        )
        again.events = decision.events + [e for e in again.events if e not in decision.events]
        uid = job.metadata.uid or ""
        if errors:
            settings = self.observer.settings
            again.requeue(
                self.memory.refused(
                    uid, errors, settings.poll_provisioning_seconds, settings.refused_backoff_seconds
                )
            )
        else:
            self.memory.accepted(uid)
            again.requeue(FIRST_POLL_SECONDS)
        return again

    def _placement_problem(self, job: TPUJob) -> s.GKEError | None:
        """What must hold before asking GKE: a cluster recent enough for flex-start; for tpu7x multi-host
        pools, a workload policy that exists and places this topology."""
        if job.spec.capacity.mode == CapacityMode.flex_start and (
            problem := gke.flex_start_problem(self.observer.cluster_check)
        ):
            return problem
        policy = job.spec.node_pool.workload_policy
        if policy is None or self.policies is None:
            return None
        return self.policies.problem(policy, render.slice_shape(job).topology)

    def _pods_refused(self, observed: s.Observed, decision: s.Decision, refused: str) -> s.Decision:
        """Decide again knowing the API server refused the pods (as _create_pools does for GKE's refusals):
        the status says why at once, and the pods are asked for again later."""
        again = s.decide(dataclasses.replace(observed, pods_refused=refused))
        again.requeue(POD_REFUSED_RETRY_SECONDS)
        return again

    def _act(self, job: TPUJob, decision: s.Decision) -> str:
        """Carry the decision out; the API server's words if it refused the pods, else ""."""
        namespace, uid = job.metadata.namespace, job.metadata.uid or ""
        for name in decision.delete_pods:
            self.actions.delete_pod(namespace, name)
        if self.pools is not None:
            for name in decision.delete_pools:
                if not self.actions.delete_pool(name):
                    decision.requeue(self.observer.settings.poll_provisioning_seconds)
                    continue
                # Recorded, so the next passes wait for GKE instead of asking again.
                for pool in decision.status.node_pools:
                    if pool.name == name:
                        pool.state = s.POOL_STOPPING
        pods: list[dict[str, Any]] = []
        if decision.create_pods:
            avoid = int(time.time()) + job.spec.run_policy.maintenance_lead_seconds
            cluster = self.observer.render_cluster
            pods = [
                render.pod(job, cluster, i, w, decision.status.attempt, avoid_maintenance_before=avoid)
                for i, w in decision.create_pods
            ]
            self.memory.pods_created(uid, (pod["metadata"]["name"] for pod in pods))
        service = render.service(job) if decision.create_service else None
        if pods or service:
            try:
                self.actions.create_pods_and_service(namespace, pods, service)
            except Exception as error:
                self.memory.pods_not_created(uid, (pod["metadata"]["name"] for pod in pods))
                if not is_refusal(error):
                    raise
                # The same pods would be refused again at once: shown as the job's reason, asked again later.
                refused = refusal_message(error)
                self.memory.pods_refused(uid, refused)
                return refused
            self.memory.pods_refused(uid, None)
        if service:
            self.memory.service_created(uid)
        return ""

    def _invalid(
        self,
        body: dict[str, Any],
        status_before: dict[str, Any],
        invalid: InvalidTPUJob,
        pods: list[s.PodView],
    ) -> Outcome:
        """Nothing is created for a spec the schema let through but the operator cannot run; what an
        earlier, valid spec created (a job edited into an invalid one) is released."""
        meta = body["metadata"]
        message = "; ".join(str(p) for p in invalid.problems)
        now = dt.datetime.now(dt.UTC)
        status = TPUJobStatus.model_validate(status_before)
        for pod in pods:
            if not pod.deleting:
                self.actions.delete_pod(meta["namespace"], pod.name)
        releasable = [p for p in status.node_pools if p.state not in s.POOL_RELEASED_STATES]
        for pool in releasable if self.pools is not None else []:
            if self.actions.delete_pool(pool.name):
                pool.state = s.POOL_STOPPING
        changed = status.reason != Reason.INVALID_SPEC or status.message != message
        status.phase, status.reason, status.message = Phase.FAILED, Reason.INVALID_SPEC, message
        status.conditions = s.set_condition(
            status.conditions, "Failed", True, Reason.INVALID_SPEC, message, now
        )
        status.observed_generation = meta.get("generation")
        wire = status.to_wire()
        stored = [status_before, body.get("status") or {}]
        if wire != status_before and not self._write_status(meta, wire, stored):
            return self._vanished(meta)
        if changed:
            self.actions.post_events(meta, [s.Event("Warning", Reason.INVALID_SPEC, message)], now)
        return Outcome()

    def _write_status(
        self, meta: dict[str, Any], status: dict[str, Any], stored: list[dict[str, Any]]
    ) -> bool:
        """A merge patch that also removes what the new status no longer has (startingSince once the
        workers run, ...): `stored` are the statuses the object may hold now. False: the job is gone."""
        version = self.actions.patch_status(meta, with_removals(status, stored))
        if version is None:
            return False
        self.memory.wrote(meta["uid"], status, version)
        return True

    def _vanished(self, meta: dict[str, Any]) -> Outcome:
        log.info("%s/%s: gone from the API server; forgotten", meta["namespace"], meta["name"])
        self.forget(meta["uid"])
        return Outcome(vanished=True)

    # --- deletion and the orphan sweep -----------------------------------------------------------

    def release_pools(self, body: dict[str, Any]) -> list[str]:
        """Start deleting every pool of a job being deleted; the names GKE still has."""
        if self.pools is None:
            return []
        try:
            job = parse_tpujob({**body, "status": None})
        except InvalidTPUJob:
            return []  # nothing was ever created for it
        if job.spec.node_pool.policy != NodePoolPolicy.create:
            return []
        remaining = []
        for view in self.observer.pool_views(job):
            if view.state == s.POOL_MISSING:
                continue
            remaining.append(view.name)
            if view.state != s.POOL_STOPPING:
                self.actions.delete_pool(view.name)
        if not remaining:
            self.forget(body["metadata"]["uid"])
        return remaining

    def sweep_orphans(self, namespace: str | None = None) -> list[str]:
        """Delete pools labelled as ours whose TPUJob no longer exists (a crash never leaks TPUs).

        Judged against the API server, not the watch's cache (a replica that stood by may hold jobs deleted
        meanwhile): the pools are listed first, then the jobs, so a job whose pool is listed was created
        before the job list and is in it unless it is gone. A namespace-scoped operator judges only its
        namespace's pools: it cannot see other jobs.
        """
        if self.pools is None:
            return []
        owned = [p for p in self.pools.owned() if namespace is None or p.namespace == namespace]
        # No UID label: not made by an operator for a job (e.g. from `tpujob render`); not ours to judge.
        judged = [p for p in owned if p.job_uid and p.state != s.POOL_STOPPING]
        if not judged:
            return []
        live_uids = self.actions.live_job_uids(namespace)
        deleted = []
        for pool in judged:
            if pool.job_uid in live_uids:
                continue
            log.warning(
                "node pool %s belongs to no TPUJob (%s/%s): deleting", pool.name, pool.namespace, pool.job
            )
            if self.actions.delete_pool(pool.name):
                deleted.append(pool.name)
        return deleted
