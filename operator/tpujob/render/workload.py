"""A TPUJob's Kueue Workload (kueue.x-k8s.io/v1beta2), as Kueue's job integrations construct theirs
(pkg/controller/jobframework/reconciler.go ConstructWorkload, utils.go NewWorkload): named from the job's
kind, name and UID, owned by the job, with Kueue's finalizer and job-UID label, the job's queue and
priority, and one pod set per slice whose template is the slice's worker pod. Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from tpujob.api import constants as c
from tpujob.api.job import TPUJob
from tpujob.render.cluster import Cluster, slice_shape
from tpujob.render.meta import job_labels, owner_references
from tpujob.render.plan import pod

# jobframework/workload_names.go: <kind>-<name> cut to leave room for "-" and a 5-character hash, within
# the 253 characters of an object name (ShortWorkloadNames is off by default in v0.19).
MAX_NAME = 253
HASH_LENGTH = 5
# The Workload API's limit on pod sets (its CRD: spec.podSets maxItems).
MAX_POD_SETS = 18


@dataclass(frozen=True)
class PriorityFact:
    """A Workload's priority as Kueue's jobframework derives it (ExtractPriority): its value, and the class it
    came from as spec.priorityClassRef (None: no class); or why it could not be read."""

    value: int = 0
    ref: dict[str, str] | None = None
    error: str = ""


def pod_set_name(slice_index: int) -> str:
    """The Workload's pod set for one slice."""
    return f"slice-{slice_index}"


def workload_name(job: TPUJob) -> str:
    """GetWorkloadNameForOwnerWithGVK: "tpujob-<name>-<sha1(kind, group, name, uid)[:5]>"."""
    return workload_name_of(job.metadata.name, job.metadata.uid or "")


def workload_name_of(name: str, uid: str) -> str:
    prefix = f"{c.KIND.lower()}-{name}"[: MAX_NAME - 1 - HASH_LENGTH]
    digest = hashlib.sha1("\n".join((c.KIND, c.GROUP, name, uid)).encode()).hexdigest()
    return f"{prefix}-{digest[:HASH_LENGTH]}"


def queue_name(job: TPUJob) -> str | None:
    """The LocalQueue the job asks for (the label kueue.x-k8s.io/queue-name); None: no queue."""
    return (job.metadata.labels or {}).get(c.LABEL_QUEUE_NAME) or None


def job_pod_set_tpu(job: TPUJob) -> str:
    """What TPU each pod of the job's pod sets asks for, in pod_set_tpu's words."""
    shape = slice_shape(job)
    return f"{shape.generation.accelerator} {shape.topology} {shape.chips_per_host}"


def pod_set_tpu(template_spec: Any) -> str:
    """What TPU a Workload's pod set asks for, as its template says: the TPU node selector and the chips of
    its containers' limits. A Workload is not only the operator's to write: whatever is not a map reads as
    nothing, never raises."""
    spec: dict[str, Any] = template_spec if isinstance(template_spec, dict) else {}
    selector: dict[str, Any] = spec["nodeSelector"] if isinstance(spec.get("nodeSelector"), dict) else {}
    containers: list[Any] = spec["containers"] if isinstance(spec.get("containers"), list) else []
    chips = ""
    for container in containers:
        resources = container.get("resources") if isinstance(container, dict) else None
        limits = resources.get("limits") if isinstance(resources, dict) else None
        if isinstance(limits, dict) and c.TPU_RESOURCE in limits:
            chips = str(limits[c.TPU_RESOURCE])
    return f"{selector.get(c.NODE_LABEL_ACCELERATOR, '')} {selector.get(c.NODE_LABEL_TOPOLOGY, '')} {chips}"


def pod_set(job: TPUJob, cluster: Cluster, slice_index: int) -> dict[str, Any]:
    """One slice: its hosts, each a pod like its worker 0's (requests, node selectors, tolerations)."""
    worker = pod(job, cluster, slice_index, 0)
    per_pod = (c.LABEL_WORKER, c.LABEL_ATTEMPT)  # a pod set stands for every attempt's hosts
    labels = {k: v for k, v in worker["metadata"]["labels"].items() if k not in per_pod}
    return {
        "name": pod_set_name(slice_index),
        "count": slice_shape(job).hosts,
        "template": {"metadata": {"labels": labels}, "spec": worker["spec"]},
    }


def workload(job: TPUJob, cluster: Cluster, priority: PriorityFact) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "queueName": queue_name(job) or "",
        "podSets": [pod_set(job, cluster, i) for i in range(job.spec.tpu.slices)],
        "priority": priority.value,
    }
    if priority.ref is not None:
        spec["priorityClassRef"] = dict(priority.ref)
    return {
        "apiVersion": c.KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": job.metadata.namespace,
            "labels": {**job_labels(job), c.LABEL_KUEUE_JOB_UID: job.metadata.uid or ""},
            "finalizers": [c.KUEUE_FINALIZER],
            "ownerReferences": owner_references(job),
        },
        "spec": spec,
    }


def priority_class_names(job: TPUJob) -> tuple[str | None, str | None]:
    """Where the Workload's priority comes from (jobframework ExtractPriority): the WorkloadPriorityClass
    the label kueue.x-k8s.io/priority-class names, else the pods' PriorityClass (spec.pod.priorityClassName).
    """
    workload_class = (job.metadata.labels or {}).get(c.LABEL_PRIORITY_CLASS) or None
    return workload_class, job.spec.pod.priority_class_name or None
