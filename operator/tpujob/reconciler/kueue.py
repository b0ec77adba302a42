"""What a pass reads of Kueue for a job labelled kueue.x-k8s.io/queue-name: its Workload (from the watch,
handlers/owned.py), and the few objects a Kueue job integration reads besides (jobframework): the
admission's ResourceFlavors (podset.FromAssignment), the LocalQueue (its ClusterQueue and pending count, for
the job's status) and the priority class a new Workload takes (ExtractPriority). Reads only.

And the one place that knows which Kueue the cluster runs (KueueServed): the Workload API version served
(v1beta2 from Kueue v0.15, else v1beta1) and its pod-set cap, found by discovery and the Workload CRD each
time the Workload watch starts; every read, write and watch of Kueue's objects asks it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpujob import kube
from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api import constants as c
from tpujob.reconciler.start_estimates import StartEstimates
from tpujob.render import workload as render_workload
from tpujob.status.queue_position import VISIBILITY_GROUP, positions, visibility_version

log = logging.getLogger(__name__)

MIN_CAP = render_workload.MIN_POD_SETS
# A flavor read is kept this long: flavors change rarely, and a running job's passes would read them again.
FLAVOR_TTL_SECONDS = 60.0
# A ClusterQueue's pending workloads (Kueue's visibility API) are read at most this often.
VISIBILITY_READ_SECONDS = 10.0
# Whether Kueue's visibility API is served is looked up again this often.
VISIBILITY_DISCOVERY_SECONDS = 30.0


def served_version(group: Mapping[str, Any] | None) -> str | None:
    """The Workload API version to speak, from the group's discovery document (APIGroup): the first of
    KUEUE_VERSIONS it serves; None when it serves none of them (or the group is not served)."""
    served = {str(v.get("version")) for v in (group or {}).get("versions") or () if isinstance(v, Mapping)}
    return next((v for v in render_workload.KUEUE_VERSIONS if v in served), None)


def max_pod_sets(crd: Mapping[str, Any] | None, version: str) -> int | None:
    """The Workload CRD's spec.podSets maxItems for `version` (8 up to Kueue v0.17, 10 in v0.18, 18 in
    v0.19); None when the CRD or that bound cannot be read."""
    for entry in ((crd or {}).get("spec") or {}).get("versions") or ():
        if entry.get("name") != version:
            continue
        try:
            spec = entry["schema"]["openAPIV3Schema"]["properties"]["spec"]
            return int(spec["properties"]["podSets"]["maxItems"])
        except (KeyError, TypeError, ValueError):
            return None
    return None


class PendingPositions:
    """Where the Workloads pending in each ClusterQueue stand, from Kueue's visibility API: one read per
    ClusterQueue at most every `interval` seconds, shared by every job queued there: the answer lists the
    whole queue, and Kueue has its server throttled by an API Priority and Fairness configuration of its own
    (visibility-apf.yaml; site/.../monitor_pending_workloads/pending_workloads_on_demand.md).
    A read that fails (403: RBAC, 503: the APIService down) is not tried again before the interval either;
    meanwhile the jobs fall back to their LocalQueue's pending count."""

    def __init__(self, api: kube.Kube, interval: float = VISIBILITY_READ_SECONDS) -> None:
        self.api = api
        self.interval = interval
        self.reads = 0  # the reads made (tests bound them)
        self._read: dict[tuple[str, str], tuple[float, dict[tuple[str, str], s.QueuePosition]]] = {}
        self._lock = threading.Lock()

    def position(
        self, version: str, cluster_queue: str, namespace: str, workload: str
    ) -> s.QueuePosition | None:
        key = (version, cluster_queue)
        with self._lock:  # one reader per interval: the others take what it read (or read nothing)
            cached = self._read.get(key)
            if cached is None or time.monotonic() - cached[0] >= self.interval:
                cached = (time.monotonic(), self._fetch(version, cluster_queue))
                self._read[key] = cached
                self.reads += 1
        return cached[1].get((namespace, workload))

    def _fetch(self, version: str, cluster_queue: str) -> dict[tuple[str, str], s.QueuePosition]:
        try:
            summary = self.api.get_pending_workloads(VISIBILITY_GROUP, version, cluster_queue)
        except kube.ApiError as error:
            log.info(
                "Kueue's visibility API refused ClusterQueue %s's pending workloads: %s", cluster_queue, error
            )
            return {}
        return positions(summary)


class KueueServed:
    """Which Workload API the cluster serves (render.workload.KueueApi), refreshed by `discover` (the Workload
    watch calls it each time it starts: Kueue installed, upgraded or removed since). `current` is None until
    a discovery found it served."""

    def __init__(
        self,
        api: kube.Kube,
        publish: Callable[[render_workload.KueueApi | None, str], None] = lambda _served, _problem: None,
    ) -> None:
        self.api = api
        self.current: render_workload.KueueApi | None = None
        self.problem = ""  # why the last discovery found none ("" none)
        self._publish = publish  # to the passes' snapshots (reconciler/snapshot.Watched.set_kueue)
        # Kueue's visibility API version served (an aggregated API: Kueue's own server), None: not served;
        # found with the Workload version, and again every VISIBILITY_DISCOVERY_SECONDS (`visibility_now`):
        # its server comes and goes apart from the CRDs.
        self.visibility: str | None = None
        self._visibility_at = float("-inf")

    def discover(self) -> render_workload.KueueApi | None:
        """What `_discover` finds, published to the passes' snapshots."""
        found = self._discover()
        self._publish(self.current, self.problem)
        return found

    def _discover(self) -> render_workload.KueueApi | None:
        """Ask discovery for kueue.x-k8s.io's versions, then the Workload CRD for its cap. A CRD the operator
        may not read (its RBAC grants that one get) leaves the cap at the fewest any version allows."""
        version = served_version(self.api.get_api_group(c.KUEUE_GROUP))
        self.visibility = self._visibility() if version is not None else None
        self._visibility_at = time.monotonic()
        if version is None:
            self.current = None
            self.problem = (
                f"{c.KUEUE_GROUP} serves neither {' nor '.join(render_workload.KUEUE_VERSIONS)} Workloads "
                "(is Kueue v0.14 or later installed?)"
            )
            return None
        cap = None
        try:
            crd = self.api.get_crd(c.KUEUE_WORKLOAD_CRD)
        except kube.ApiError as error:
            log.warning("the Workload CRD cannot be read (%s): at most %d pod sets assumed", error, MIN_CAP)
        else:
            if crd is None:  # the group served, its Workload CRD not (yet): Kueue being installed or removed
                self.current = None
                self.problem = f"{c.KUEUE_WORKLOAD_CRD} is not installed (is Kueue being installed?)"
                return None
            cap = max_pod_sets(crd, version)
        found = render_workload.KueueApi(version, cap or MIN_CAP)
        if found != self.current:
            log.info(
                "Kueue serves Workloads %s, at most %d pod sets each", found.api_version, found.max_pod_sets
            )
        self.current, self.problem = found, ""
        return found

    def visibility_now(self) -> str | None:
        """The visibility API version, discovered again when the last look is older than the interval."""
        if time.monotonic() - self._visibility_at >= VISIBILITY_DISCOVERY_SECONDS:
            self._visibility_at = time.monotonic()
            self.visibility = self._visibility()
        return self.visibility

    def _visibility(self) -> str | None:
        """The visibility API's version: discovery of visibility.kueue.x-k8s.io (an APIService that is
        registered but not available answers 503: not served for now)."""
        try:
            found = visibility_version(self.api.get_api_group(VISIBILITY_GROUP))
        except kube.ApiError as error:
            log.info(
                "Kueue's visibility API is not available (%s): queued jobs show their LocalQueue's count",
                error,
            )
            return None
        if found != self.visibility:
            log.info("Kueue's visibility API: %s", f"{VISIBILITY_GROUP}/{found}" if found else "not served")
        return found


def workload_view(body: Mapping[str, Any], _warn: Callable[[str], None] | None = None) -> s.WorkloadView:
    """A Workload watch event's object -> what a pass reads of it. Kueue's CRD types every field read here;
    one that is not what it types raises, and the watch leaves the Workload out (handlers/owned.py)."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    owners = [o.get("uid") or "" for o in meta.get("ownerReferences") or [] if o.get("controller")]
    pod_sets = spec.get("podSets") or []
    if not isinstance(pod_sets, list):
        raise ValueError("spec.podSets: not a list")
    conditions = tuple(status.get("conditions") or ())
    if not all(isinstance(condition, dict) for condition in conditions):
        raise ValueError("status.conditions: not a list of conditions")
    checks = tuple(status.get("admissionChecks") or ())
    if not all(isinstance(check, dict) for check in checks):
        raise ValueError("status.admissionChecks: not a list of admission check states")
    admission = status.get("admission")
    if admission is not None and not isinstance(admission, dict):
        raise ValueError("status.admission: not an object")
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ValueError("spec.priority: not an integer")
    return s.WorkloadView(
        name=meta["name"],
        resource_version=meta.get("resourceVersion") or "",
        owner_uid=str(owners[0]) if owners else "",
        conditions=conditions,
        admission=admission,
        admission_checks=checks,
        active=spec.get("active", True) is not False,
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(str(finalizer) for finalizer in meta.get("finalizers") or ()),
        generation=int(meta.get("generation") or 0),
        pod_sets=tuple(render_workload.pod_set_facts(p) for p in pod_sets),
        priority=priority,
        queue_order_time=queue_order_time(meta, conditions),
        uid=str(meta.get("uid") or ""),
    )


def queue_order_time(meta: Mapping[str, Any], conditions: tuple[dict[str, Any], ...]) -> str:
    """Kueue's queue-order timestamp of a Workload (pkg/workload Ordering.GetQueueOrderTimestamp, with the
    default requeuingStrategy.timestamp Eviction): when a PodsReady timeout evicted it, else its creation."""
    evicted = next((x for x in conditions if x.get("type") == "Evicted"), None)
    if evicted and evicted.get("status") == "True" and evicted.get("reason") == "PodsReadyTimeout":
        return str(evicted.get("lastTransitionTime") or meta.get("creationTimestamp") or "")
    return str(meta.get("creationTimestamp") or "")


def flavor_view(body: Mapping[str, Any]) -> s.FlavorView:
    spec = body.get("spec") or {}
    return s.FlavorView(
        name=body["metadata"]["name"],
        node_labels=dict(spec.get("nodeLabels") or {}),
        node_taints=tuple(spec.get("nodeTaints") or ()),
        tolerations=tuple(spec.get("tolerations") or ()),
    )


class KueueReader:
    def __init__(
        self,
        api: kube.Kube,
        enabled: bool,
        publish: Callable[[render_workload.KueueApi | None, str], None] = lambda _served, _problem: None,
    ) -> None:
        self.api = api
        self.enabled = enabled  # TPUJOB_KUEUE
        self.served = KueueServed(api, publish)
        self.positions = PendingPositions(api)
        self._flavors: dict[str, tuple[float, s.FlavorView | None]] = {}
        self._lock = threading.Lock()
        # A waiting job's ClusterQueue and the operator's jobs in it (its start estimate); the glue sets
        # its source.
        self.estimates = StartEstimates(api, self.flavor)

    def view(
        self,
        job: TPUJob,
        workloads: Sequence[s.WorkloadView] | None,
        served: render_workload.KueueApi | None,
        problem: str = "",
        now: dt.datetime | None = None,
    ) -> s.QueueView | None:
        """None for a job without the queue label. `workloads`: the watch's for the job's name (None: the
        Workload watch has not listed, or does not run); `served`: the Workload API Kueue serves (None: not
        found); `problem`: why Kueue cannot be read, if known (the pass' snapshot has all three)."""
        name = render_workload.queue_name(job)
        if name is None:
            return None
        if not self.enabled:
            return s.QueueView(name, enabled=False)
        if workloads is None or served is None:
            return s.QueueView(name, known=False, problem=problem)
        uid = job.metadata.uid or ""
        # A Workload of an earlier job of the same name (deleted, GC not done yet) is not this job's.
        workload = next((w for w in workloads if w.owner_uid == uid), None)
        try:
            read = self._read(job, name, workload, served.version, now or dt.datetime.now(dt.UTC))
            return dataclasses.replace(read, api=served)
        except kube.ApiError as error:
            return s.QueueView(name, known=False, problem=f"Kueue's API refused a read: {error}")

    def _read(
        self, job: TPUJob, name: str, workload: s.WorkloadView | None, version: str, now: dt.datetime
    ) -> s.QueueView:
        admitted = workload is not None and workload.is_true("Admitted") and workload.admission
        if admitted:
            assert workload is not None and workload.admission is not None
            names = {
                flavor
                for assignment in workload.admission.get("podSetAssignments") or []
                for flavor in (assignment.get("flavors") or {}).values()
            }
            flavors = {n: f for n in sorted(names) if (f := self.flavor(n, version)) is not None}
            return s.QueueView(name, workload=workload, flavors=flavors)
        local_queue = self.api.get_kueue_object(version, "localqueues", name, job.metadata.namespace) or {}
        cluster_queue = (local_queue.get("spec") or {}).get("clusterQueue") or ""
        pending = (local_queue.get("status") or {}).get("pendingWorkloads")
        priority = self.priority(job, version) if workload is None else None
        waits_for_quota = workload is not None and not workload.is_true("QuotaReserved")
        position = None
        visibility = self.served.visibility_now() if workload is not None else None
        if workload is not None and cluster_queue and visibility is not None:
            position = self.positions.position(
                visibility, cluster_queue, job.metadata.namespace, workload.name
            )
        return s.QueueView(
            name,
            workload=workload,
            cluster_queue=cluster_queue,
            pending_workloads=int(pending) if pending is not None else None,
            priority=priority,
            facts=self.estimates.facts(cluster_queue, version, now, (job.to_wire(), workload))
            if waits_for_quota and workload is not None
            else None,
            position=position,
        )

    def flavor(self, name: str, version: str) -> s.FlavorView | None:
        now = time.monotonic()
        with self._lock:
            cached = self._flavors.get(name)
        if cached is not None and now - cached[0] < FLAVOR_TTL_SECONDS:
            return cached[1]
        body = self.api.get_kueue_object(version, "resourceflavors", name)
        view = flavor_view(body) if body is not None else None
        with self._lock:
            self._flavors[name] = (now, view)
        return view

    def priority(self, job: TPUJob, version: str) -> s.PriorityFact:
        """jobframework ExtractPriority: the WorkloadPriorityClass the label names, else the pods'
        PriorityClass, else the cluster's default PriorityClass (utilpriority.GetPriorityFromPriorityClass),
        else 0."""
        workload_class, pod_class = render_workload.priority_class_names(job)
        if workload_class is not None:
            found = self.api.get_kueue_object(version, "workloadpriorityclasses", workload_class)
            if found is None:
                return s.PriorityFact(
                    error=f"WorkloadPriorityClass {workload_class} (label "
                    f"kueue.x-k8s.io/priority-class) does not exist"
                )
            ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": workload_class}
            return s.PriorityFact(int(found.get("value") or 0), ref)
        if pod_class is not None:
            found = self.api.get_priority_class(pod_class)
            if found is None:
                return s.PriorityFact(
                    error=f"PriorityClass {pod_class} (spec.pod.priorityClassName) does not exist"
                )
            ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pod_class}
            return s.PriorityFact(int(found.get("value") or 0), ref)
        # getDefaultPriorityClass: of several global defaults (a race), the lowest.
        defaults = [p for p in self.api.list_priority_classes() if p.get("globalDefault")]
        if defaults:
            default = min(defaults, key=lambda p: int(p.get("value") or 0))
            ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": default["metadata"]["name"]}
            return s.PriorityFact(int(default.get("value") or 0), ref)
        return s.PriorityFact()
