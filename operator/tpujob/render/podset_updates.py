"""Kueue's admission checks' pod set updates on a slice's pods. Pure.

An admission check that becomes Ready may give each pod set an update (Workload
status.admissionChecks[].podSetUpdates: labels, annotations, nodeSelector, tolerations), which the job
integration merges into its pods before it starts them (Kueue pkg/controller/jobframework/reconciler.go
startJob -> podset.FromUpdate, PodSetInfo.Merge; pkg/podset/podset.go Merge): a key the pod already has
with another value is a conflict (utilmaps.HaveConflict), and the job does not start (podset.IsPermanent:
the Workload is finished with reason FailedToStart); tolerations are added unless an equal one is there.

The ProvisioningRequest check (pkg/controller/admissionchecks/provisioning/controller.go podSetUpdates) puts
two annotations on each pod set: the request the pods consume and its class. Pods carrying them run on the
nodes the cluster autoscaler made for that request (GKE: queued provisioning, Dynamic Workload Scheduler):
the capacity is there already, so the operator makes no node pool of its own for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tpujob.render import plan
from tpujob.render.cluster import Cluster
from tpujob.render.placement import Placement
from tpujob.render.workload import pod_set_name

if TYPE_CHECKING:
    from tpujob.api.job import TPUJob

# cluster-autoscaler apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go
# (ProvisioningRequestPodAnnotationKey, ProvisioningClassPodAnnotationKey).
CONSUME_PROVISIONING_REQUEST = "autoscaling.x-k8s.io/consume-provisioning-request"
PROVISIONING_CLASS = "cluster-autoscaler.kubernetes.io/provisioning-class-name"
# Kueue's CheckState values (apis/kueue/v1beta2/workload_types.go).
CHECK_READY = "Ready"


@dataclass(frozen=True)
class PodSetUpdate:
    """What the Ready admission checks give one pod set, merged in their order."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()

    @property
    def provisioning_request(self) -> str:
        """The ProvisioningRequest whose nodes the pods consume ("" none)."""
        return self.annotations.get(CONSUME_PROVISIONING_REQUEST, "")


class PodSetUpdateConflict(ValueError):
    """An update sets a key the pod already has, to another value (podset.BadPodSetsUpdateError)."""

    def __init__(self, what: str, key: str, ours: str, theirs: str) -> None:
        self.what, self.key, self.ours, self.theirs = what, key, ours, theirs
        super().__init__(f"conflict for {what}: key={key}, value1={ours}, value2={theirs}")


def _strings(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{where}: not a map of strings")
    return dict(value)


def _conflict(what: str, ours: Mapping[str, str], theirs: Mapping[str, str]) -> None:
    for key, value in ours.items():
        if key in theirs and theirs[key] != value:
            raise PodSetUpdateConflict(what, key, value, theirs[key])


def _add_tolerations(
    ours: Iterable[dict[str, Any]], theirs: Iterable[dict[str, Any]]
) -> tuple[dict[str, Any], ...]:
    merged = list(ours)
    merged += [t for t in theirs if t not in merged]  # utiltolerations.Equal: the same fields
    return tuple(merged)


def merge(
    base: PodSetUpdate,
    other: PodSetUpdate,
) -> PodSetUpdate:
    """PodSetInfo.Merge: `other` on top of `base`; a key both have with different values raises
    PodSetUpdateConflict (annotations first, then labels, then nodeSelector, as Kueue checks them)."""
    _conflict("annotations", base.annotations, other.annotations)
    _conflict("labels", base.labels, other.labels)
    _conflict("nodeSelector", base.node_selector, other.node_selector)
    return PodSetUpdate(
        labels={**base.labels, **other.labels},
        annotations={**base.annotations, **other.annotations},
        node_selector={**base.node_selector, **other.node_selector},
        tolerations=_add_tolerations(base.tolerations, other.tolerations),
    )


def updates_for(admission_checks: Iterable[Mapping[str, Any]], pod_set: str) -> PodSetUpdate:
    """Every Ready check's update for `pod_set`, merged in the checks' order (startJob merges each in turn).
    Tenant-writable input: a malformed update raises ValueError naming the field."""
    merged = PodSetUpdate()
    for index, check in enumerate(admission_checks):
        if check.get("state") != CHECK_READY:
            continue
        for update in check.get("podSetUpdates") or ():
            if not isinstance(update, Mapping) or update.get("name") != pod_set:
                continue
            where = f"status.admissionChecks[{index}].podSetUpdates[{pod_set}]"
            tolerations = update.get("tolerations") or ()
            if not isinstance(tolerations, list | tuple) or not all(
                isinstance(t, Mapping) for t in tolerations
            ):
                raise ValueError(f"{where}.tolerations: not a list of tolerations")
            merged = merge(
                merged,
                PodSetUpdate(
                    labels=_strings(update.get("labels"), f"{where}.labels"),
                    annotations=_strings(update.get("annotations"), f"{where}.annotations"),
                    node_selector=_strings(update.get("nodeSelector"), f"{where}.nodeSelector"),
                    tolerations=tuple(dict(t) for t in tolerations),
                ),
            )
    return merged


def provisioned(admission_checks: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a Ready check put a ProvisioningRequest's consume annotation on a pod set: the capacity was
    provisioned for the Workload (pods consume it; no pool of the job's own)."""
    return any(
        check.get("state") == CHECK_READY
        and any(
            isinstance(u, Mapping)
            and isinstance(u.get("annotations"), Mapping)
            and bool(u["annotations"].get(CONSUME_PROVISIONING_REQUEST))
            for u in check.get("podSetUpdates") or ()
        )
        for check in admission_checks
        if isinstance(check, Mapping)
    )


def with_updates(
    job: TPUJob, slice_index: int, flavors: Placement, admission_checks: Iterable[Mapping[str, Any]]
) -> Placement:
    """What the admission puts on a slice's pods: its flavors' part (podset.FromAssignment) with the Ready
    checks' updates merged on it, the updates checked against the pod the operator renders for the slice,
    as podset.Merge checks the job's template. Raises PodSetUpdateConflict (which field, which key) or
    ValueError (a malformed update)."""
    checks = updates_for(admission_checks, pod_set_name(slice_index))
    update = merge(
        PodSetUpdate(node_selector=dict(flavors.node_selector), tolerations=flavors.tolerations), checks
    )
    own = plan.pod(job, Cluster(), slice_index, 0)  # the selectors, labels, annotations of the slice's pods
    metadata, spec = own["metadata"], own["spec"]
    merge(
        PodSetUpdate(
            labels=dict(metadata.get("labels") or {}),
            annotations=dict(metadata.get("annotations") or {}),
            node_selector=dict(spec.get("nodeSelector") or {}),
        ),
        checks,  # the flavors' part: Kueue's flavor assignment picked flavors that fit the pods already
    )
    return replace(
        flavors,
        node_selector=update.node_selector,
        tolerations=update.tolerations,
        labels=update.labels,
        annotations=update.annotations,
    )
