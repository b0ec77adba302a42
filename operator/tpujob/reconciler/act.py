"""The writes a pass makes, to Kubernetes and GKE: `apply` carries a decision out and returns what happened
(status.Applied); each write a small method, each GKE call counted in the metrics the same way. No decisions:
what to write comes from tpujob.status, the requests from tpujob.render."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
import logging
import socket
from typing import Any

from tpujob import kube, metrics
from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api import constants as c
from tpujob.gke import NodePools, refuses_upgrade_shield
from tpujob.reconciler.behind import Behind
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.poster import EventPoster
from tpujob.reconciler.tenancy import NamespaceChips
from tpujob.render import Cluster
from tpujob.render import network as render_network
from tpujob.render import plan as render
from tpujob.render import pools as render_pools
from tpujob.render import workload as render_workload

log = logging.getLogger(__name__)

# Pod and Service creates of one pass run at once, this many at a time.
CREATE_CONCURRENCY = 8
# Pods rendered and created at a time: a pass holds this many bodies, however large the job (a tpu7x
# 16x24x24 slice is 2,304 pods); a refusal stops the pass' creates at the batch it met.
CREATE_BATCH = 64
# Events name the operator as their source (kubectl get events: FROM tpujob-operator).
EVENT_COMPONENT = "tpujob-operator"
MAX_EVENT_MESSAGE = 1024


class NameTaken(Exception):
    """An object the job needs has a name another object holds: the operator leaves that one alone."""


def is_refusal(error: Exception) -> bool:
    """A 4xx answer that the same request cannot pass (400 Bad Request, 403 Forbidden, 422 Invalid), as
    opposed to a conflict, a throttle or a server error, which a retry of the pass handles; or a name the
    job needs that is not its own."""
    return isinstance(error, NameTaken) or (
        isinstance(error, kube.ApiError) and error.status in (400, 403, 422)
    )


def refusal_message(error: Exception) -> str:
    """The API server's own words: the Status object's message, else the reason line."""
    body = getattr(error, "body", None) or ""
    try:
        message = json.loads(body).get("message", "") if body else ""
    except (ValueError, AttributeError):
        message = ""
    return str(message or getattr(error, "reason", "") or error)


# The Event on an object a watch could not read (a tenant's label, annotation or field).
REASON_UNREADABLE = "Unreadable"


def event_manifest(
    meta: dict[str, Any],
    event: s.Event,
    now: dt.datetime,
    instance: str,
    kind: tuple[str, str] = (f"{c.GROUP}/{c.VERSION}", c.KIND),
) -> dict[str, Any]:
    """A core/v1 Event about an object (`meta`: its name, namespace, uid; `kind`: its apiVersion and kind, a
    TPUJob's by default)."""
    moment = s.timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": kind[0],
            "kind": kind[1],
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


class JobGone(Exception):
    """The job is no longer on the API server: the pass ends, and the job is forgotten."""


class Actions:
    def __init__(
        self,
        api: kube.Kube,
        pools: NodePools | None,
        memory: JobMemory,
        chips: NamespaceChips | None = None,
        refused_backoff_seconds: float = s.REJECTED_BACKOFF_BASE_SECONDS,
    ) -> None:
        self.api = api
        self.pools = pools
        self.chips = chips if chips is not None else NamespaceChips(memory.records)
        # Refused pod creates are asked again after this, doubling with each refusal in a row (capped).
        self.refused_backoff_seconds = refused_backoff_seconds
        # Creates are recorded there until the watch shows them (not created twice, not taken for lost).
        self.memory = memory
        self.instance = socket.gethostname()  # the pod's name, in Events
        self._creators = concurrent.futures.ThreadPoolExecutor(CREATE_CONCURRENCY, "tpujob-create")
        self.behind = Behind(
            lambda ns, body: self.api.create_service(ns, body), memory.service_failed, CREATE_CONCURRENCY
        )
        self.events = EventPoster(api.create_event)
        # GKE's words the first time it refused a pool's upgrade exclusion (and took the pool without it):
        # the cluster does not take the field, so this process asks without it from then on.
        self.upgrade_shield_refused: str | None = None

    def close(self, timeout: float) -> None:
        self.events.stop(timeout)
        self._creators.shutdown(wait=False)
        self.behind.close()

    def apply(
        self,
        meta: dict[str, Any],
        job: TPUJob | None,
        decision: s.Decision,
        cluster: Cluster,
        now: dt.datetime,
    ) -> s.Applied:
        """Carry the decision out: pools (after the finalizer), deletes, then pods and the Service. `job`:
        None for a spec that does not parse (its decisions only delete)."""
        applied = s.Applied()
        if decision.chips is not None:  # first: nothing is done for a job the limit has no room for now
            budget = self.chips.reserve(meta["uid"], decision.chips)
            if not budget.fits(decision.chips.chips):
                applied.chips_taken = budget
                return applied
        if decision.create_pools and job is not None:
            # The finalizer before any paid resource: a job deleted from now on waits for its pools.
            self.ensure_finalizer(meta)
            for slice_index in decision.create_pools:
                request = render_pools.node_pool(
                    job,
                    cluster,
                    slice_index,
                    zone=decision.status.zone,
                    placement=decision.placement.get(slice_index),
                )
                operation, error = self.create_pool_shielded(request, slice_index, applied)
                if error is not None:
                    applied.refused[slice_index] = error
                else:
                    applied.operations[slice_index] = operation
        for name in decision.delete_pods:
            self.delete_pod(meta["namespace"], name)
        told = {c.ANNOTATION_RESTART_ATTEMPT: str(decision.status.attempt)}
        for name in decision.restart_in_place:  # kept pods' trainers restart in place, as the new attempt
            self.api.annotate_pod(meta["namespace"], name, told)
        for name in decision.delete_pools if self.pools is not None else ():
            if self.delete_pool(name, meta["uid"]):
                applied.stopping.add(name)
            else:
                applied.delete_refused = True
        if job is not None and (
            decision.create_pods or decision.create_service or decision.create_network_policy
        ):
            applied.pods_refused, applied.retry_pods_after = self._create_workers(job, decision, cluster, now)
        if decision.workload and job is not None:
            applied.workload_conflict = not self.write_workload(meta, job, decision.workload, cluster)
        return applied

    def _create_workers(
        self, job: TPUJob, decision: s.Decision, cluster: Cluster, now: dt.datetime
    ) -> tuple[str, float]:
        """The decided pods, in batches of CREATE_BATCH, after the slices' host lists, then the Service:
        ("", 0) when all were created, else the API server's words and when to ask again (a backoff that
        grows with the refusals in a row)."""
        uid = job.metadata.uid or ""
        # New pods avoid nodes whose announced maintenance comes before this.
        avoid = int(now.timestamp()) + job.spec.stop_lead_seconds
        service = render.service(job) if decision.create_service else None
        try:
            # The namespace's NetworkPolicy before the Service and the pods, in its own step: a worker never
            # runs open to the pod network. The pass knows it exists from its watch (a deleted one is made
            # again); only a namespace's first job pays for it.
            if decision.create_network_policy and cluster.network_policy:
                self.ensure_network_policy(job.metadata.namespace, cluster)
            if render.uses_hosts_config_map(job):
                for slice_index in sorted({i for i, _ in decision.create_pods}):
                    self.apply_hosts_config_map(job, slice_index)
            for start in range(0, max(len(decision.create_pods), 1), CREATE_BATCH):
                batch = decision.create_pods[start : start + CREATE_BATCH]
                self._create_batch(job, batch, cluster, decision, avoid)
            if service is not None:  # after the pods, not waited for (reconciler/behind.py)
                self.memory.created(uid, JobMemory.SERVICE)
                self.behind.submit(uid, job.metadata.namespace, service)
        except Exception as error:
            if not is_refusal(error):
                raise
            # The same pods would be refused again at once: shown as the job's reason, asked again later.
            refused = refusal_message(error)
            return refused, self.memory.pods_refused(uid, refused, self.refused_backoff_seconds)
        if decision.create_pods:  # the pods passed: a later refusal's backoff starts over
            self.memory.pods_refused(uid, None)
        return "", 0.0

    def _create_batch(
        self,
        job: TPUJob,
        workers: list[tuple[int, int]],
        cluster: Cluster,
        decision: s.Decision,
        avoid: int,
    ) -> None:
        uid = job.metadata.uid or ""
        pods = [
            render.pod(
                job,
                cluster,
                i,
                w,
                decision.status.attempt,
                avoid_maintenance_before=avoid,
                placement=decision.placement.get(i),
            )
            for i, w in workers
        ]
        names = [pod["metadata"]["name"] for pod in pods]
        self.memory.pods_created(uid, names)
        try:
            self.create_pods(job.metadata.namespace, pods)
        except Exception:
            self.memory.pods_not_created(uid, names)
            raise

    def create_pool_shielded(
        self, request: dict[str, Any], slice_index: int, applied: s.Applied
    ) -> tuple[str, s.GKEError | None]:
        """A pool with its upgrade exclusion, as long as GKE takes the field. A refusal that names it is asked
        once more without it; if GKE then takes the pool, the exclusion is what it refused, and from then on
        this process asks without it (one create per pool, not two). Any other refusal stands as it is."""
        bare = render_pools.without_upgrade_shield(request)
        if bare is not None and self.upgrade_shield_refused is not None:
            operation, error = self.create_pool(bare)
            if error is None:
                applied.unshielded[slice_index] = self.upgrade_shield_refused
            return operation, error
        operation, error = self.create_pool(request)
        if error is None or bare is None or not refuses_upgrade_shield(error):
            return operation, error
        operation, second = self.create_pool(bare)
        if second is None:
            self.upgrade_shield_refused = error.message
            applied.unshielded[slice_index] = error.message
            metrics.UPGRADE_SHIELD_REFUSED.inc()
            log.warning(
                "node pool %s: GKE refused its upgrade exclusion (%s); created without it, so GKE may "
                "auto-upgrade it while the job runs; this operator asks without it from now on "
                "(TPUJOB_GKE_UPGRADE_SHIELD=false stops asking at all)",
                request["name"],
                error.message,
            )
        return operation, second

    def ensure_network_policy(self, namespace: str, cluster: Cluster) -> None:
        """The namespace's workers' NetworkPolicy, made once for all its jobs. One of its name that exists
        already (409) is the namespace's: the operator's, made for an earlier job, or one the team made in its
        place (its namespace's policies are the team's to shape; NetworkPolicies only ever add, so no policy
        of a team's can open another team's pods)."""
        body = render_network.network_policy(namespace, cluster.metrics_from)
        self.memory.ensure_policy(namespace, lambda: self.api.create_network_policy(namespace, body))

    def apply_hosts_config_map(self, job: TPUJob, slice_index: int) -> None:
        """A large slice's host list, before its pods: created, or brought up to date when the job's own
        (its owner is the job's UID) holds another; a ConfigMap of that name that is not the job's is
        left alone, and the pods are refused with a message that says so."""
        body = render.hosts_config_map(job, slice_index)
        namespace, name = job.metadata.namespace, body["metadata"]["name"]
        if self.api.create_config_map(namespace, body):
            return
        found = self.api.get_config_map(namespace, name)
        if found is None:  # deleted meanwhile
            self.api.create_config_map(namespace, body)
            return
        owners = {ref.get("uid") for ref in found["metadata"].get("ownerReferences") or []}
        if job.metadata.uid not in owners:
            raise NameTaken(
                f"ConfigMap {namespace}/{name} exists and is not this job's (its ownerReferences do not name "
                f"TPUJob uid {job.metadata.uid}); the operator keeps a large slice's host list there: delete "
                "or rename that ConfigMap, or rename the job"
            )
        if found.get("data") != body["data"]:
            self.api.patch_config_map(
                namespace,
                name,
                {"metadata": {"resourceVersion": found["metadata"]["resourceVersion"]}, "data": body["data"]},
            )

    def write_workload(
        self, meta: dict[str, Any], job: TPUJob, writes: s.WorkloadWrites, cluster: Cluster
    ) -> bool:
        """The Workload's writes, in the order a Kueue integration makes them: created (after the job's own
        finalizer: a deletion must let it go), its conditions (and admission cleared), spec.active, then its
        finalizer released. False when Kueue wrote it in between (409): the next pass reads it again."""
        namespace = meta["namespace"]
        if writes.create:
            self.ensure_finalizer(meta)
            priority = writes.priority or render_workload.PriorityFact()
            body = render_workload.workload(job, cluster, priority, writes.api)
            self.api.create_workload(namespace, writes.api.version, body)
            return True
        version = writes.resource_version
        try:
            if writes.conditions is not None:
                status: dict[str, Any] = {"conditions": writes.conditions}
                if writes.clear_admission:
                    status["admission"] = None
                version = self.api.patch_workload(
                    namespace,
                    writes.api.version,
                    writes.name,
                    {"metadata": {"resourceVersion": version}, "status": status},
                    status=True,
                )
            if writes.active is not None:
                version = self.api.patch_workload(
                    namespace,
                    writes.api.version,
                    writes.name,
                    {"metadata": {"resourceVersion": version}, "spec": {"active": writes.active}},
                )
            if writes.release_finalizer or writes.delete:
                self.let_go_workload(
                    namespace,
                    writes.api.version,
                    writes.name,
                    version,
                    writes.finalizers,
                    delete=writes.delete,
                )
        except kube.ApiError as error:
            if error.status == 409:
                return False
            if error.status == 404:  # gone meanwhile: the next pass creates the job's next one
                return True
            raise
        return True

    def let_go_workload(
        self,
        namespace: str,
        api_version: str,
        name: str,
        version: str,
        finalizers: tuple[str, ...] | list[str],
        delete: bool,
    ) -> None:
        """Kueue's finalizer off the Workload (conditional on `version`), and the Workload deleted if asked:
        what a Kueue integration does once its job no longer needs it (jobframework RemoveFinalizer)."""
        kept = [f for f in finalizers if f != c.KUEUE_FINALIZER]
        if kept != list(finalizers):
            self.api.patch_workload(
                namespace, api_version, name, {"metadata": {"resourceVersion": version, "finalizers": kept}}
            )
        if delete:
            self.api.delete_workload(namespace, api_version, name)

    # --- GKE -------------------------------------------------------------------------------------

    def create_pool(self, request: dict[str, Any]) -> tuple[str, s.GKEError | None]:
        """Ask GKE for a pool: (its operation's name, GKE's refusal or None)."""
        assert self.pools is not None
        operation, error = self.pools.create(request)
        metrics.record_pool_call("create", error)
        return operation, error

    def delete_pool(self, name: str, job_uid: str) -> bool:
        """Ask GKE to delete a pool of the job `job_uid` (only if its job-uid label says so); whether GKE
        took the request (or there was nothing of the job's to delete)."""
        assert self.pools is not None
        error = self.pools.delete(name, job_uid)
        metrics.record_pool_call("delete", error)
        return error is None

    # --- Kubernetes ------------------------------------------------------------------------------

    def delete_pod(self, namespace: str, name: str) -> None:
        self.api.delete_pod(namespace, name)

    def create_pods(self, namespace: str, pods: list[dict[str, Any]]) -> None:
        """Pods all at once (a slice's hosts start together). What exists already is fine; the first other
        error is raised after every call ended."""
        futures = [self._creators.submit(self.api.create_pod, namespace, pod) for pod in pods]
        for error in [f.exception() for f in futures]:
            if error is not None:
                raise error

    def ensure_finalizer(self, meta: dict[str, Any]) -> None:
        """Before the first pool is requested: a deletion from then on waits for the pools (kopf adds no
        finalizer of its own, see tpujob.handlers)."""
        finalizers = list(meta.get("finalizers") or [])
        if c.FINALIZER in finalizers:
            return
        patch = {
            "metadata": {"finalizers": [*finalizers, c.FINALIZER], "resourceVersion": meta["resourceVersion"]}
        }
        try:
            self.api.patch_tpujob(meta["namespace"], meta["name"], patch)
        except kube.ApiError as error:
            if error.status == 404:  # deleted after the watch showed it: no pool is asked for
                raise JobGone(f"{meta['namespace']}/{meta['name']}") from error
            raise

    def post_events(self, meta: dict[str, Any], events: list[s.Event], now: dt.datetime) -> None:
        """Queued for the background poster (poster.py), through the operator's own bounded connection pool
        (kopf's poster opens a connection per object at once: hundreds in a burst). Best effort: a lost
        event must not fail the pass, nor wait for a token before the next job's pods."""
        for event in events:
            self.events.enqueue(meta["namespace"], event_manifest(meta, event, now, self.instance))

    def post_object_event(self, kind: tuple[str, str], meta: dict[str, Any], event: s.Event) -> None:
        """An Event about another object than a job (one of its pods, its Workload), queued as the rest."""
        now = dt.datetime.now(dt.UTC)
        self.events.enqueue(meta["namespace"], event_manifest(meta, event, now, self.instance, kind))

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> str | None:
        """Write the status subresource; the written resourceVersion, None if the job is gone. Its token
        comes after the waiting pod and Service creates of every pass (Priority.STATUS)."""
        try:
            written = self.api.patch_tpujob_status(namespace, name, {"status": status})
        except kube.ApiError as error:
            if error.status == 404:  # deleted meanwhile: nothing to record
                return None
            raise
        return str(written["metadata"]["resourceVersion"])

    def delete_job(self, namespace: str, name: str) -> None:
        self.api.delete_tpujob(namespace, name, propagation="Background")

    def live_job_uids(self, namespace: str | None) -> set[str]:
        return self.api.list_tpujob_uids(namespace)

    def job_exists(self, namespace: str, name: str, uid: str) -> bool:
        job = self.api.get_tpujob(namespace, name)
        return job is not None and bool(job["metadata"]["uid"] == uid)
