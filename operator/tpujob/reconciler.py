"""One reconcile pass for one TPUJob: observe, decide (status.py, pure), act.

Synchronous I/O (Kubernetes and GKE clients), run by the kopf handlers in worker threads, one
pass per job at a time. Idempotent: creating what exists and deleting what is gone are no-ops, so
a pass interrupted anywhere (even by SIGKILL) is completed by the next one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import logging
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tpujob import gke, kube, metrics
from tpujob import status as s
from tpujob.api import InvalidTPUJob, TPUJob, parse_tpujob
from tpujob.api import constants as c
from tpujob.api.models import CapacityMode, NodePoolPolicy, TPUJobStatus
from tpujob.gke import ClusterCheck, NodePools, WorkloadPolicies
from tpujob.render import Cluster, naming
from tpujob.render import plan as render

log = logging.getLogger(__name__)

# Pod and Service creates of one pass run at once, this many at a time.
CREATE_CONCURRENCY = 8
# Events name the operator as their source (kubectl get events: FROM tpujob-operator).
EVENT_COMPONENT = "tpujob-operator"
MAX_EVENT_MESSAGE = 1024

# First look at a pool just requested: fast provisioning (or a create refused asynchronously) shows
# up at once; later polls are every POLL_PROVISIONING_SECONDS.
FIRST_POLL_SECONDS = 0.25


@dataclass
class Outcome:
    """What a pass did, for the kopf layer: when to look again."""

    requeue_after: float | None = None


def event_manifest(meta: dict[str, Any], event: s.Event, now: dt.datetime, instance: str) -> dict[str, Any]:
    """A core/v1 Event about a TPUJob (`meta`: its name, namespace, uid)."""
    moment = s.timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": f"{c.GROUP}/{c.VERSION}",
            "kind": c.KIND,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:MAX_EVENT_MESSAGE],
        "firstTimestamp": moment,
        "lastTimestamp": moment,
        "count": 1,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": instance,
    }


def pod_view(pod: Any) -> s.PodView:
    """A pod (kopf body or dict) -> PodView. Reads the container's exit code for failure causes."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    unschedulable, since = "", ""
    for condition in status.get("conditions") or []:
        scheduled = condition.get("type") == "PodScheduled" and condition.get("status") == "False"
        if scheduled and condition.get("reason") == "Unschedulable":
            unschedulable = condition.get("message") or "Unschedulable"
            since = condition.get("lastTransitionTime") or ""
    exit_code = None
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            exit_code = terminated.get("exitCode")
            reason = reason or terminated.get("reason") or ""
    return s.PodView(
        name=meta["name"],
        slice=int(labels.get(c.LABEL_SLICE, 0)),
        worker=int(labels.get(c.LABEL_WORKER, 0)),
        attempt=int(labels.get(c.LABEL_ATTEMPT, 0)),
        phase=status.get("phase") or "Pending",
        node=(pod.get("spec") or {}).get("nodeName") or "",
        reason=reason,
        exit_code=exit_code,
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable=unschedulable,
        unschedulable_since=since,
    )


def _needs_gke_look(job: TPUJob, status: TPUJobStatus) -> bool:
    """Ask GKE only while pools change; a running job's pools are watched through its pods."""
    if job.spec.node_pool.policy != NodePoolPolicy.create:
        return False
    states = {p.state for p in status.node_pools}
    settled_running = status.phase in (s.STARTING, s.RUNNING) and states <= s.POOL_READY_STATES and states
    settled_gone = status.phase in (*s.TERMINAL_PHASES, s.SUSPENDED) and states <= {s.POOL_DELETED}
    return not (settled_running or settled_gone)


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
    ) -> None:
        self.cluster = cluster
        self.restart_backoff_seconds = restart_backoff_seconds
        self.unschedulable_grace_seconds = unschedulable_grace_seconds
        self.policies = policies
        # What the last GetCluster said (handlers.check_cluster, at start and every sweep); None: not yet.
        self.cluster_check: ClusterCheck | None = None
        # GKE's host maintenance notices, node -> Unix seconds (refresh_maintenance, every resync).
        self.maintenance: dict[str, int] = {}
        self.maintenance_forbidden = False
        self.api = api
        self.pools = pools
        # The status this operator last wrote, per job UID: the watch may not have delivered it yet,
        # and deciding on an older one would, for example, count one restart twice.
        self._written: dict[str, dict[str, Any]] = {}
        # Pods created but maybe not yet seen by the watch, per job UID.
        self._in_flight: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.recorder = metrics.PassRecorder()
        self.instance = socket.gethostname()  # the pod's name, in Events
        self._creators = concurrent.futures.ThreadPoolExecutor(CREATE_CONCURRENCY, "tpujob-create")
        # The resourceVersion of each job's last status write (its watch echo is skipped).
        self._written_version: dict[str, str] = {}
        # Pool creates GKE refused, per job UID: not asked again before the monotonic time, whatever
        # event comes first (our own status write, a pod): refused calls back off. The count of permanent
        # refusals in a row makes their backoff grow.
        self._gke_refused: dict[str, tuple[float, dict[int, s.GKEError]]] = {}
        self._rejections: dict[str, int] = {}
        # Jobs whose Service was created but maybe not yet seen by the watch: not created twice.
        self._service_in_flight: set[str] = set()

    def forget(self, uid: str) -> None:
        with self._lock:
            self._written.pop(uid, None)
            self._in_flight.pop(uid, None)
            self._service_in_flight.discard(uid)
            self._written_version.pop(uid, None)
            self._gke_refused.pop(uid, None)
            self._rejections.pop(uid, None)
        self.recorder.forget(uid)

    # --- observe ---------------------------------------------------------------------------------

    def _current_status(self, body: dict[str, Any]) -> dict[str, Any]:
        uid = body["metadata"]["uid"]
        with self._lock:
            written = self._written.get(uid)
        return written if written is not None else dict(body.get("status") or {})

    def _pool_views(self, job: TPUJob) -> tuple[s.PoolView, ...]:
        assert self.pools is not None
        recorded = {p.slice: p.operation or "" for p in (job.status.node_pools if job.status else [])}
        return tuple(
            self.pools.state(i, naming.node_pool_name(job, i), recorded.get(i, ""))
            for i in range(job.spec.tpu.slices)
        )

    @property
    def render_cluster(self) -> Cluster:
        """The configured cluster as GetCluster described it (Workload Identity on or off)."""
        check = self.cluster_check
        if check is None or check.workload_identity == self.cluster.workload_identity:
            return self.cluster
        return dataclasses.replace(self.cluster, workload_identity=check.workload_identity)

    def _configuration_errors(self, job: TPUJob) -> dict[int, s.GKEError]:
        """Every slice's error when the operator cannot make pools at all (no cluster, wrong settings)."""
        if self.pools is None:
            problem = "the operator has no GKE cluster configured (TPUJOB_GKE_PROJECT, _LOCATION, _CLUSTER)"
        elif self.cluster_check is not None and not self.cluster_check.ready:
            problem = self.cluster_check.problem
        else:
            return {}
        error = s.GKEError(s.REASON_GKE_CONFIG, problem, permanent=True)
        return dict.fromkeys(range(job.spec.tpu.slices), error)

    def _service_seen(self, uid: str, seen: bool) -> bool:
        with self._lock:
            if seen:
                self._service_in_flight.discard(uid)
                return True
            return uid in self._service_in_flight

    def _refusals(self, uid: str) -> dict[int, s.GKEError]:
        with self._lock:
            until, errors = self._gke_refused.get(uid, (0.0, {}))
            if time.monotonic() >= until:
                self._gke_refused.pop(uid, None)
                return {}
            return errors

    def _in_flight_pods(self, uid: str, pods: Iterable[s.PodView]) -> frozenset[str]:
        seen = {p.name for p in pods}
        with self._lock:
            pending = self._in_flight.get(uid, set()) - seen
            self._in_flight[uid] = pending
            return frozenset(pending)

    # --- the pass --------------------------------------------------------------------------------

    def reconcile(self, body: dict[str, Any], pods: list[s.PodView], service_exists: bool) -> Outcome:
        with metrics.RECONCILE_DURATION.time(), metrics.RECONCILE_ERRORS.count_exceptions():
            return self._reconcile(body, pods, service_exists)

    def _reconcile(self, body: dict[str, Any], pods: list[s.PodView], service_exists: bool) -> Outcome:
        meta = body["metadata"]
        uid = meta["uid"]
        status_before = self._current_status(body)
        try:
            job = parse_tpujob({**body, "status": None})
        except InvalidTPUJob as invalid:
            return self._invalid(body, status_before, invalid, pods)
        job = job.model_copy(update={"status": TPUJobStatus.model_validate(status_before)})
        now = dt.datetime.now(dt.UTC)
        observed = s.Observed(
            job=job,
            now=now,
            pods=tuple(pods),
            pools=self._pool_views(job)
            if self.pools and _needs_gke_look(job, job.status or TPUJobStatus())
            else None,
            service_exists=self._service_seen(uid, service_exists),
            pods_in_flight=self._in_flight_pods(uid, pods),
            restart_backoff_seconds=self.restart_backoff_seconds,
            unschedulable_grace_seconds=self.unschedulable_grace_seconds,
            zones=tuple(render.job_zones(job, self.cluster))
            if job.spec.node_pool.policy == NodePoolPolicy.create
            else (),
            maintenance={p.node: self.maintenance[p.node] for p in pods if p.node in self.maintenance},
        )
        if job.spec.node_pool.policy == NodePoolPolicy.create and (config := self._configuration_errors(job)):
            observed = dataclasses.replace(observed, gke_errors=config, pools=observed.pools or ())
        refused = self._refusals(uid)
        if refused:
            observed = dataclasses.replace(observed, gke_errors={**refused, **observed.gke_errors})
        decision = s.decide(observed)
        if decision.create_pools:
            # The finalizer before any paid resource: a job deleted from now on waits for its pools.
            self._ensure_finalizer(meta)
            decision = self._create_pools(job, observed, decision)
        self._act(job, decision)
        status_after = decision.status.to_wire()
        if status_after != status_before:
            self._write_status(job, status_after)
        self._post_events(meta, decision.events, now)
        self.recorder.record(job, job.status or TPUJobStatus(), decision.status, now)
        if decision.delete_job:
            self._delete_job(job)
            self.forget(uid)
        return Outcome(requeue_after=decision.requeue_after)

    def _create_pools(self, job: TPUJob, observed: s.Observed, decision: s.Decision) -> s.Decision:
        """Create the pools, then decide again knowing which creates GKE refused (and why)."""
        assert self.pools is not None
        errors: dict[int, s.GKEError] = {}
        operations: dict[int, str] = {}
        placement = self._placement_problem(job)
        for slice_index in decision.create_pools:
            if placement is not None:
                errors[slice_index] = placement
                continue
            request = render.node_pool(job, self.render_cluster, slice_index, zone=decision.status.zone)
            operation, error = self.pools.create(request)
            metrics.record_pool_call("create", error)
            if error is not None:
                errors[slice_index] = error
            operations[slice_index] = operation
        views = {p.slice: p for p in observed.pools or ()}
        for slice_index in decision.create_pools:
            if slice_index not in errors:
                name = naming.node_pool_name(job, slice_index)
                # As GKE will report it (no status message while provisioning): the first poll that finds
                # it so writes no status.
                views[slice_index] = s.PoolView(
                    slice_index,
                    name,
                    "PROVISIONING",
                    operation=operations.get(slice_index, ""),
                    zone=decision.status.zone or "",
                )
        again = s.decide(
            dataclasses.replace(observed, pools=tuple(views[k] for k in sorted(views)), gke_errors=errors)
        )
        again.events = decision.events + [e for e in again.events if e not in decision.events]
        if not errors:
            with self._lock:
                self._rejections.pop(job.metadata.uid or "", None)
        again.requeue(self._back_off(job.metadata.uid or "", errors) if errors else FIRST_POLL_SECONDS)
        return again

    def _placement_problem(self, job: TPUJob) -> s.GKEError | None:
        """What must hold before asking GKE: a cluster recent enough for flex-start; for tpu7x multi-host
        pools, a workload policy that exists and places this topology."""
        if job.spec.capacity.mode == CapacityMode.flex_start and (
            problem := gke.flex_start_problem(self.cluster_check)
        ):
            return problem
        policy = job.spec.node_pool.workload_policy
        if policy is None or self.policies is None:
            return None
        return self.policies.problem(policy, render.slice_shape(job).topology)

    def _back_off(self, uid: str, errors: dict[int, s.GKEError]) -> float:
        """Refused creates are not asked again before the delay, whatever event comes: the polling interval
        for transient refusals, a growing one for permanent ones."""
        with self._lock:
            if any(error.permanent for error in errors.values()):
                self._rejections[uid] = self._rejections.get(uid, 0) + 1
                delay = s.rejected_backoff_seconds(self._rejections[uid])
            else:
                self._rejections.pop(uid, None)
                delay = s.POLL_PROVISIONING_SECONDS
            self._gke_refused[uid] = (time.monotonic() + delay, errors)
        return delay

    def _act(self, job: TPUJob, decision: s.Decision) -> None:
        namespace = job.metadata.namespace
        for name in decision.delete_pods:
            self.api.delete(kube.pods(namespace, name))
        if self.pools is not None:
            for name in decision.delete_pools:
                error = self.pools.delete(name)
                metrics.record_pool_call("delete", error)
                if error is not None:
                    decision.requeue(s.POLL_PROVISIONING_SECONDS)
                    continue
                # Recorded, so the next passes wait for GKE instead of asking again.
                for pool in decision.status.node_pools:
                    if pool.name == name:
                        pool.state = s.POOL_STOPPING
        # Pods first, all at once (a slice's hosts start together); the Service only names them for DNS.
        if decision.create_pods:
            attempt = decision.status.attempt
            uid = job.metadata.uid or ""
            avoid = int(time.time()) + job.spec.run_policy.maintenance_lead_seconds
            manifests = [
                render.pod(job, self.render_cluster, i, w, attempt, avoid_maintenance_before=avoid)
                for i, w in decision.create_pods
            ]
            with self._lock:
                self._in_flight.setdefault(uid, set()).update(m["metadata"]["name"] for m in manifests)
            creates = [(kube.pods(namespace), m) for m in manifests]
            if decision.create_service:
                creates.append((kube.services(namespace), render.service(job)))
            self._create_all(creates)
        elif decision.create_service:
            self.api.create(kube.services(namespace), render.service(job))
        if decision.create_service:
            with self._lock:
                self._service_in_flight.add(job.metadata.uid or "")

    def _invalid(
        self,
        body: dict[str, Any],
        status_before: dict[str, Any],
        invalid: InvalidTPUJob,
        pods: list[s.PodView],
    ) -> Outcome:
        """Nothing is created for a spec the schema let through but the operator cannot run; what an
        earlier, valid spec created (a job edited into an invalid one) is released."""
        message = "; ".join(str(p) for p in invalid.problems)
        now = dt.datetime.now(dt.UTC)
        status = TPUJobStatus.model_validate(status_before)
        namespace = body["metadata"]["namespace"]
        for pod in pods:
            if not pod.deleting:
                self.api.delete(kube.pods(namespace, pod.name))
        for pool in status.node_pools:
            if self.pools is not None and pool.state not in (s.POOL_MISSING, s.POOL_DELETED, s.POOL_STOPPING):
                error = self.pools.delete(pool.name)
                metrics.record_pool_call("delete", error)
                if error is None:
                    pool.state = s.POOL_STOPPING
        changed = status.reason != s.REASON_INVALID_SPEC or status.message != message
        status.phase, status.reason, status.message = s.FAILED, s.REASON_INVALID_SPEC, message
        status.conditions = s.set_condition(
            status.conditions, "Failed", True, s.REASON_INVALID_SPEC, message, now
        )
        status.observed_generation = body["metadata"].get("generation")
        wire = status.to_wire()
        if wire != status_before:
            self._patch_status(body["metadata"], wire)
        if changed:
            self._post_events(body["metadata"], [s.Event("Warning", s.REASON_INVALID_SPEC, message)], now)
        return Outcome()

    # --- writes ----------------------------------------------------------------------------------

    def _ensure_finalizer(self, meta: dict[str, Any]) -> None:
        """Before the first pool is requested: a deletion from then on waits for the pools (kopf adds no
        finalizer of its own, see tpujob.handlers)."""
        finalizers = list(meta.get("finalizers") or [])
        if c.FINALIZER in finalizers:
            return
        patch = {
            "metadata": {"finalizers": [*finalizers, c.FINALIZER], "resourceVersion": meta["resourceVersion"]}
        }
        self.api.merge_patch(kube.tpujobs(meta["namespace"], meta["name"]), patch)

    def _post_events(self, meta: dict[str, Any], events: list[s.Event], now: dt.datetime) -> None:
        """Through the operator's own bounded connection pool (kopf's poster opens a connection per
        object at once: hundreds in a burst). Best effort: a lost event must not fail the pass."""
        namespace, name = meta["namespace"], meta["name"]
        for event in events:
            try:
                self.api.create(kube.events(namespace), event_manifest(meta, event, now, self.instance))
            except Exception as error:
                log.warning("%s/%s: event %s not posted: %s", namespace, name, event.reason, error)

    def _write_status(self, job: TPUJob, status: dict[str, Any]) -> None:
        meta = job.metadata
        self._patch_status({"name": meta.name, "namespace": meta.namespace, "uid": meta.uid}, status)

    def _patch_status(self, meta: dict[str, Any], status: dict[str, Any]) -> None:
        try:
            written = self.api.merge_patch(
                kube.tpujobs(meta["namespace"], meta["name"], "status"), {"status": status}
            )
        except kube.ApiError as error:
            if error.status == 404:  # deleted meanwhile: nothing to record
                return
            raise
        with self._lock:
            self._written[meta["uid"]] = status
            self._written_version[meta["uid"]] = written["metadata"]["resourceVersion"]

    def is_own_write(self, body: dict[str, Any]) -> bool:
        """The job as this operator's last status write left it: the pass that wrote it saw everything
        else, so the watch's echo of the write needs no pass of its own."""
        meta = body["metadata"]
        with self._lock:
            return self._written_version.get(meta["uid"]) == meta.get("resourceVersion")

    def _delete_job(self, job: TPUJob) -> None:
        log.info("%s/%s: ttlSecondsAfterFinished passed, deleting", job.metadata.namespace, job.metadata.name)
        self.api.delete(kube.tpujobs(job.metadata.namespace, job.metadata.name), propagation="Background")

    def _create_all(self, creates: list[tuple[str, dict[str, Any]]]) -> None:
        """Create concurrently (what exists already is fine); the first other error is raised after all
        calls ended."""
        futures = [self._creators.submit(self.api.create, path, body) for path, body in creates]
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error

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
        for view in self._pool_views(job):
            if view.state == s.POOL_MISSING:
                continue
            remaining.append(view.name)
            if view.state != "STOPPING":
                metrics.record_pool_call("delete", self.pools.delete(view.name))
        if not remaining:
            self.forget(body["metadata"]["uid"])
        return remaining

    def check_cluster(self) -> ClusterCheck | None:
        """Read the configured cluster (GetCluster): a wrong project, location, cluster or zone shows in
        the status of every waiting job, and in the tpujob_gke_cluster_ready gauge."""
        if self.pools is None:
            return None
        check = gke.check_cluster(self.cluster, self.pools.client)
        if not check.ready:
            log.error("GKE cluster not usable: %s", check.problem)
        elif self.cluster_check is None or not self.cluster_check.ready:
            log.info(
                "GKE cluster %s: version %s, release channel %s, Workload Identity %s",
                self.cluster.parent,
                check.version,
                check.release_channel,
                "on" if check.workload_identity else "off",
            )
        self.cluster_check = check
        metrics.GKE_CLUSTER_READY.set(1 if check.ready else 0)
        return check

    def refresh_maintenance(self) -> None:
        """Read GKE's maintenance notices off the nodes (cluster-wide operators: nodes are cluster-scoped). A
        list every resync suffices: GKE announces TPU host maintenance about 7 days ahead. Without the
        permission (RBAC from an older chart) it says so once and stops asking."""
        if self.maintenance_forbidden:
            return
        try:
            found = self.api.get(kube.nodes(render.MAINTENANCE_LABEL)) or {}
        except kube.ApiError as error:
            if error.status != 403:
                raise
            log.warning("no permission to list nodes: GKE maintenance notices are not acted on (%s)", error)
            self.maintenance_forbidden = True
            return
        notices = {}
        for node in found.get("items", []):
            value = (node["metadata"].get("labels") or {}).get(render.MAINTENANCE_LABEL, "")
            if value.isdigit():
                notices[node["metadata"]["name"]] = int(value)
        self.maintenance = notices

    def sweep_orphans(self, live_uids: set[str], namespace: str | None = None) -> list[str]:
        """Delete pools labelled as ours whose TPUJob no longer exists (a crash never leaks TPUs).

        A namespace-scoped operator judges only its namespace's pools: it cannot see other jobs.
        """
        if self.pools is None:
            return []
        deleted = []
        for pool in self.pools.owned():
            if namespace is not None and pool.namespace != namespace:
                continue
            # No UID label: not made by an operator for a job (e.g. from `tpujob render`); not ours to judge.
            if not pool.job_uid or pool.job_uid in live_uids or pool.state == "STOPPING":
                continue
            if self._job_exists(pool.namespace, pool.job, pool.job_uid):
                continue
            log.warning(
                "node pool %s belongs to no TPUJob (%s/%s): deleting", pool.name, pool.namespace, pool.job
            )
            error = self.pools.delete(pool.name)
            metrics.record_pool_call("delete", error)
            if error is None:
                deleted.append(pool.name)
        return deleted

    def _job_exists(self, namespace: str, name: str, uid: str) -> bool:
        job = self.api.get(kube.tpujobs(namespace, name))
        return job is not None and bool(job["metadata"]["uid"] == uid)
