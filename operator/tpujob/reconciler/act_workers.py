"""The worker side of a pass's acts: the namespace's NetworkPolicy, a large slice's host lists, the pods in
batches, the Service after them (off the pass's thread: behind.py), deletes and in-place restarts. A refusal
the same request cannot pass stops the creates and is backed off (the job's memory counts them in a row)."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
from typing import Any

from tpujob import kube
from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api import constants as c
from tpujob.reconciler.behind import Behind
from tpujob.reconciler.memory import JobMemory
from tpujob.render import Cluster
from tpujob.render import network as render_network
from tpujob.render import plan as render

# Pod and Service creates of one pass run at once, this many at a time.
CREATE_CONCURRENCY = 8
# Pods rendered and created at a time: a pass holds this many bodies, however large the job (a tpu7x
# 16x24x24 slice is 2,304 pods); a refusal stops the pass' creates at the batch it met.
CREATE_BATCH = 64


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


class WorkerActions:
    def __init__(self, api: kube.Kube, memory: JobMemory, refused_backoff_seconds: float) -> None:
        self.api = api
        # Creates are recorded there until the watch shows them (not created twice, not taken for lost).
        self.memory = memory
        # Refused pod creates are asked again after this, doubling with each refusal in a row (capped).
        self.refused_backoff_seconds = refused_backoff_seconds
        self._creators = concurrent.futures.ThreadPoolExecutor(CREATE_CONCURRENCY, "tpujob-create")
        self.behind = Behind(
            lambda ns, body: self.api.create_service(ns, body), memory.service_failed, CREATE_CONCURRENCY
        )

    def close(self) -> None:
        self._creators.shutdown(wait=False)
        self.behind.close()

    def delete_and_restart(self, namespace: str, decision: s.Decision) -> None:
        """Stale pods deleted; kept pods' trainers told to restart in place, as the new attempt."""
        for name in decision.delete_pods:
            self.delete_pod(namespace, name)
        told = {c.ANNOTATION_RESTART_ATTEMPT: str(decision.status.attempt)}
        for name in decision.restart_in_place:
            self.api.annotate_pod(namespace, name, told)

    def create(
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
        bad_nodes = s.affinity_avoids(job.spec.node_pool.policy, decision.status)  # status.nodeFailures
        pods = [
            render.pod(
                job,
                cluster,
                i,
                w,
                decision.status.attempt,
                avoid_maintenance_before=avoid,
                avoid_nodes=bad_nodes,
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

    def delete_pod(self, namespace: str, name: str) -> None:
        self.api.delete_pod(namespace, name)

    def create_pods(self, namespace: str, pods: list[dict[str, Any]]) -> None:
        """Pods all at once (a slice's hosts start together). What exists already is fine; the first other
        error is raised after every call ended."""
        futures = [self._creators.submit(self.api.create_pod, namespace, pod) for pod in pods]
        for error in [f.exception() for f in futures]:
            if error is not None:
                raise error
