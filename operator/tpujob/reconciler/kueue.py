"""What a pass reads of Kueue for a job labelled kueue.x-k8s.io/queue-name: its Workload (from the watch,
handlers/owned.py), and the few objects a Kueue job integration reads besides (jobframework): the
admission's ResourceFlavors (podset.FromAssignment), the LocalQueue (its ClusterQueue and pending count, for
the job's status) and the priority class a new Workload takes (ExtractPriority). Reads only."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tpujob import kube
from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.render import workload as render_workload

log = logging.getLogger(__name__)

# A flavor read is kept this long: flavors change rarely, and a running job's passes would read them again.
FLAVOR_TTL_SECONDS = 60.0


def workload_view(body: Mapping[str, Any], _warn: Callable[[str], None] | None = None) -> s.WorkloadView:
    """A Workload watch event's object -> what a pass reads of it. Kueue's CRD types every field read here;
    one that is not what it types raises, and the watch leaves the Workload out (handlers/owned.py)."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    owners = [o.get("uid") or "" for o in meta.get("ownerReferences") or [] if o.get("controller")]
    pod_sets = tuple((str(p.get("name") or ""), int(p.get("count") or 0)) for p in spec.get("podSets") or [])
    conditions = tuple(status.get("conditions") or ())
    if not all(isinstance(condition, dict) for condition in conditions):
        raise ValueError("status.conditions: not a list of conditions")
    checks = tuple(status.get("admissionChecks") or ())
    if not all(isinstance(check, dict) for check in checks):
        raise ValueError("status.admissionChecks: not a list of admission check states")
    admission = status.get("admission")
    if admission is not None and not isinstance(admission, dict):
        raise ValueError("status.admission: not an object")
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
        pod_sets=pod_sets,
        pod_set_tpus=tuple(
            render_workload.pod_set_tpu((p.get("template") or {}).get("spec"))
            for p in spec.get("podSets") or ()
        ),
    )


def flavor_view(body: Mapping[str, Any]) -> s.FlavorView:
    spec = body.get("spec") or {}
    return s.FlavorView(
        name=body["metadata"]["name"],
        node_labels=dict(spec.get("nodeLabels") or {}),
        node_taints=tuple(spec.get("nodeTaints") or ()),
        tolerations=tuple(spec.get("tolerations") or ()),
    )


class KueueReader:
    def __init__(self, api: kube.Kube, enabled: bool) -> None:
        self.api = api
        self.enabled = enabled  # TPUJOB_KUEUE
        self._flavors: dict[str, tuple[float, s.FlavorView | None]] = {}
        self._lock = threading.Lock()

    def view(
        self, job: TPUJob, workloads: list[s.WorkloadView] | None, problem: str = ""
    ) -> s.QueueView | None:
        """None for a job without the queue label. `workloads`: the watch's for the job's name (None: the
        Workload watch has not listed, or does not run); `problem`: why it does not, if known."""
        name = render_workload.queue_name(job)
        if name is None:
            return None
        if not self.enabled:
            return s.QueueView(name, enabled=False)
        if workloads is None:
            return s.QueueView(name, known=False, problem=problem)
        uid = job.metadata.uid or ""
        # A Workload of an earlier job of the same name (deleted, GC not done yet) is not this job's.
        workload = next((w for w in workloads if w.owner_uid == uid), None)
        try:
            return self._read(job, name, workload)
        except kube.ApiError as error:
            return s.QueueView(name, known=False, problem=f"Kueue's API refused a read: {error}")

    def _read(self, job: TPUJob, name: str, workload: s.WorkloadView | None) -> s.QueueView:
        admitted = workload is not None and workload.is_true("Admitted") and workload.admission
        if admitted:
            assert workload is not None and workload.admission is not None
            names = {
                flavor
                for assignment in workload.admission.get("podSetAssignments") or []
                for flavor in (assignment.get("flavors") or {}).values()
            }
            flavors = {n: f for n in sorted(names) if (f := self.flavor(n)) is not None}
            return s.QueueView(name, workload=workload, flavors=flavors)
        local_queue = self.api.get_kueue_object("localqueues", name, job.metadata.namespace) or {}
        cluster_queue = (local_queue.get("spec") or {}).get("clusterQueue") or ""
        pending = (local_queue.get("status") or {}).get("pendingWorkloads")
        priority = self.priority(job) if workload is None else None
        return s.QueueView(
            name,
            workload=workload,
            cluster_queue=cluster_queue,
            pending_workloads=int(pending) if pending is not None else None,
            priority=priority,
        )

    def flavor(self, name: str) -> s.FlavorView | None:
        now = time.monotonic()
        with self._lock:
            cached = self._flavors.get(name)
        if cached is not None and now - cached[0] < FLAVOR_TTL_SECONDS:
            return cached[1]
        body = self.api.get_kueue_object("resourceflavors", name)
        view = flavor_view(body) if body is not None else None
        with self._lock:
            self._flavors[name] = (now, view)
        return view

    def priority(self, job: TPUJob) -> s.PriorityFact:
        """jobframework ExtractPriority: the WorkloadPriorityClass the label names, else the pods'
        PriorityClass, else the cluster's default PriorityClass (utilpriority.GetPriorityFromPriorityClass),
        else 0."""
        workload_class, pod_class = render_workload.priority_class_names(job)
        if workload_class is not None:
            found = self.api.get_kueue_object("workloadpriorityclasses", workload_class)
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
