"""A TPUJob's Kueue Workload, as Kueue's job integrations construct theirs (pkg/controller/jobframework/
reconciler.go ConstructWorkload, utils.go NewWorkload): named from the job's kind, name and UID, owned by the
job, with Kueue's finalizer and job-UID label, the job's queue and priority, and one pod set per slice whose
template is the slice's worker pod; in the Workload API version the cluster's Kueue serves (KueueApi). And
what of a pod set makes a Workload still the job's (PodSetFacts, as jobframework EquivalentToWorkload
compares them). Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
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
# The Workload API versions the operator speaks, preferred first: v1beta2 from Kueue v0.15 (its storage
# version from v0.16), v1beta1 alone before (apis/kueue/v1beta1, v1beta2 of each release).
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
# The fewest pod sets any of them allows (spec.podSets maxItems: 8 up to v0.17, 10 in v0.18, 18 in v0.19):
# the cap when the installed CRD cannot be read.
MIN_POD_SETS = 8
# v1beta1's spec.priorityClassSource for each class kind (v1beta1 workload_types.go; v1beta2 names the
# class by priorityClassRef's group and kind instead: workload_conversion.go).
PRIORITY_CLASS_SOURCES = {
    "WorkloadPriorityClass": "kueue.x-k8s.io/workloadpriorityclass",
    "PriorityClass": "scheduling.k8s.io/priorityclass",
}


@dataclass(frozen=True)
class KueueApi:
    """The Workload API the cluster's Kueue serves, as discovery and its CRD say: the version spoken (one
    of KUEUE_VERSIONS) and how many pod sets a Workload may hold (its CRD's spec.podSets maxItems)."""

    version: str = KUEUE_VERSIONS[0]
    max_pod_sets: int = MIN_POD_SETS

    @property
    def api_version(self) -> str:
        return f"{c.KUEUE_GROUP}/{self.version}"


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


@dataclass(frozen=True)
class PodSetFacts:
    """What of one pod set decides whether a Workload still describes its job, after Kueue's
    jobframework EquivalentToWorkload (pkg/controller/jobframework/reconciler.go) and
    pkg/util/equality/podset.go ComparePodSets: the count and minCount, the tolerations, and the containers
    and init containers. Of the containers only their names and resources are kept (Kueue compares them
    whole; a TPUJob's env and image are not what Kueue admits, and the job's edits of them reach the next
    attempt's pods anyway), and the node selector besides (Kueue leaves it out, a TODO in podset.go; for a
    TPU it says which accelerator and topology: v5e 2x4 and v6e 2x4 ask the same chips of other nodes).
    Each field as canonical JSON, by its path in the pod set."""

    name: str
    fields: tuple[tuple[str, str], ...]

    def differences(self, other: PodSetFacts) -> list[str]:
        """The paths whose values differ (a field one side lacks included)."""
        mine, theirs = dict(self.fields), dict(other.fields)
        return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _containers_facts(kind: str, containers: Any) -> list[tuple[str, str]]:
    """Each container's name and resources (requests, limits; quantities as text: 4 and "4" are one)."""
    facts: list[tuple[str, str]] = []
    for index, container in enumerate(containers if isinstance(containers, list) else []):
        item: Mapping[str, Any] = container if isinstance(container, Mapping) else {}
        resources = item.get("resources") if isinstance(item.get("resources"), Mapping) else {}
        assert isinstance(resources, Mapping)
        facts.append((f"{kind}[{index}].name", _canonical(item.get("name"))))
        for part in ("requests", "limits"):
            amounts = resources.get(part)
            amounts = {str(k): str(v) for k, v in amounts.items()} if isinstance(amounts, Mapping) else {}
            facts.append((f"{kind}[{index}].resources.{part}", _canonical(amounts)))
    return facts


def pod_set_facts(pod_set: Any) -> PodSetFacts:
    """A Workload's pod set as PodSetFacts. A Workload is not only the operator's to write: whatever is
    not what Kueue's schema types reads as it is (and then differs), never raises."""
    item: Mapping[str, Any] = pod_set if isinstance(pod_set, Mapping) else {}
    template = item.get("template") if isinstance(item.get("template"), Mapping) else {}
    assert isinstance(template, Mapping)
    spec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    fields = [
        ("count", _canonical(item.get("count", 1))),  # the CRD's default: 1
        ("minCount", _canonical(item.get("minCount"))),
        ("template.spec.nodeSelector", _canonical(spec.get("nodeSelector") or {})),
        ("template.spec.tolerations", _canonical(spec.get("tolerations") or [])),
        *_containers_facts("template.spec.containers", spec.get("containers")),
        *_containers_facts("template.spec.initContainers", spec.get("initContainers")),
    ]
    return PodSetFacts(str(item.get("name") or ""), tuple(fields))


def job_pod_set_facts(job: TPUJob) -> tuple[PodSetFacts, ...]:
    """The pod sets the job's Workload must have: one per slice, of the slice's hosts. The facts depend on
    the job alone (the cluster settings shape no field of them)."""
    return tuple(pod_set_facts(pod_set(job, Cluster(), i)) for i in range(job.spec.tpu.slices))


def pod_sets_differences(wanted: tuple[PodSetFacts, ...], found: tuple[PodSetFacts, ...]) -> list[str]:
    """What makes a Workload's pod sets not the job's (ComparePodSetSlices, in order; names too): empty
    when equivalent, else each difference as "<pod set>: <field>"."""
    if [p.name for p in wanted] != [p.name for p in found]:
        return [f"pod sets {[p.name for p in found]} (the job's: {[p.name for p in wanted]})"]
    return [f"{w.name}: {field}" for w, f in zip(wanted, found, strict=True) for field in w.differences(f)]


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


def workload(
    job: TPUJob, cluster: Cluster, priority: PriorityFact, api: KueueApi | None = None
) -> dict[str, Any]:
    """The Workload in `api`'s version (v1beta2 without): the two differ, for what the operator writes, in
    how the priority's class is named (v1beta1: priorityClassName and priorityClassSource; v1beta2:
    priorityClassRef; v1beta1/workload_conversion.go Convert_v1beta2_WorkloadSpec_To_v1beta1_WorkloadSpec)."""
    api = api or KueueApi()
    spec: dict[str, Any] = {
        "queueName": queue_name(job) or "",
        "podSets": [pod_set(job, cluster, i) for i in range(job.spec.tpu.slices)],
        "priority": priority.value,
    }
    if priority.ref is not None and api.version == "v1beta1":
        spec["priorityClassName"] = priority.ref["name"]
        spec["priorityClassSource"] = PRIORITY_CLASS_SOURCES[priority.ref["kind"]]
    elif priority.ref is not None:
        spec["priorityClassRef"] = dict(priority.ref)
    return {
        "apiVersion": api.api_version,
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
