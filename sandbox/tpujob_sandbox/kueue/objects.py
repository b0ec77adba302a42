"""Reading and writing Kueue objects as the API serves them (plain dicts): conditions the way
apimachinery's meta.SetStatusCondition sets them, timestamps as metav1.Time serialises them (whole seconds,
RFC 3339), and the facts about a Workload that Kueue's pkg/workload helpers derive (v0.19.2)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

GROUP = "kueue.x-k8s.io"
# The Workload API versions, preferred first: v1beta2 from Kueue v0.15, v1beta1 alone before (v0.14.8). The
# objects the simulator reads and writes differ between them only where queues.py says (LocalQueue usage).
VERSIONS = ("v1beta2", "v1beta1")
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

# Workload condition types (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
FINISHED = "Finished"
DEACTIVATION_TARGET = "DeactivationTarget"  # Kueue's own mark: set spec.active false (workload.go)


def now_utc() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """metav1.Time on the wire: RFC 3339 in whole seconds, UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def key(obj: Obj) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def conditions(obj: Obj) -> list[Obj]:
    return list((obj.get("status") or {}).get("conditions") or [])


def find_condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in conditions(obj) if c.get("type") == kind), None)


def is_true(obj: Obj, kind: str) -> bool:
    found = find_condition(obj, kind)
    return found is not None and found.get("status") == "True"


def set_condition(
    status: Obj,
    kind: str,
    value: bool,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> None:
    """meta.SetStatusCondition: lastTransitionTime moves only when the status changes."""
    text = "True" if value else "False"
    found = [c for c in status.get("conditions") or [] if c.get("type") == kind]
    new: Obj = {"type": kind, "status": text, "reason": reason, "message": truncate(message)}
    if generation is not None:
        new["observedGeneration"] = generation
    if found and found[0].get("status") == text:
        new["lastTransitionTime"] = found[0].get("lastTransitionTime") or format_time(now)
    else:
        new["lastTransitionTime"] = format_time(now)
    others = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    if found:  # keep the condition's place in the list, as SetStatusCondition does
        index = (status.get("conditions") or []).index(found[0])
        others.insert(index, new)
        status["conditions"] = others
    else:
        status["conditions"] = [*others, new]


def truncate(message: str) -> str:
    """api.TruncateConditionMessage: a condition message is at most 32 KiB."""
    return message[: 32 * 1024]


def generation(obj: Obj) -> int | None:
    value = obj["metadata"].get("generation")
    return int(value) if value is not None else None


# --- facts about a Workload (pkg/workload/workload.go, pkg/util/priority) ----------------------------------


def priority(wl: Obj) -> int:
    """priority.Priority: spec.priority, 0 when unset (the job integration copies it from the class)."""
    return int((wl.get("spec") or {}).get("priority") or 0)


def is_active(wl: Obj) -> bool:
    """workload.IsActive: spec.active defaults to true."""
    return (wl.get("spec") or {}).get("active", True) is not False


def has_quota_reservation(wl: Obj) -> bool:
    return is_true(wl, QUOTA_RESERVED)


def is_admitted(wl: Obj) -> bool:
    return is_true(wl, ADMITTED)


def is_evicted(wl: Obj) -> bool:
    return is_true(wl, EVICTED)


def is_finished(wl: Obj) -> bool:
    return is_true(wl, FINISHED)


def is_deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def admission(wl: Obj) -> Obj | None:
    found = (wl.get("status") or {}).get("admission")
    return found if isinstance(found, dict) else None


def holds_quota(wl: Obj) -> bool:
    """Counted in the ClusterQueue's usage: Kueue's cache keeps a workload with a reservation until the job
    controller clears it (an evicted one included), and drops it once finished or being deleted (the
    workload controller's Update/Delete handlers)."""
    return (
        has_quota_reservation(wl)
        and admission(wl) is not None
        and not is_finished(wl)
        and not is_deleting(wl)
    )


def creation_time(obj: Obj) -> datetime:
    return parse_time(obj["metadata"].get("creationTimestamp")) or datetime.fromtimestamp(0, UTC)


def queue_order_time(wl: Obj) -> datetime:
    """workload.Ordering.GetQueueOrderTimestamp with Kueue's default requeuingStrategy.timestamp Eviction:
    the eviction time of a workload evicted by the PodsReady timeout, else its creation time."""
    evicted = find_condition(wl, EVICTED)
    if evicted and evicted.get("status") == "True" and evicted.get("reason") == "PodsReadyTimeout":
        return parse_time(evicted.get("lastTransitionTime")) or creation_time(wl)
    return creation_time(wl)


def requeue_at(wl: Obj) -> datetime | None:
    state = (wl.get("status") or {}).get("requeueState") or {}
    return parse_time(state.get("requeueAt"))


def uid(obj: Obj) -> str:
    return str(obj["metadata"].get("uid") or "")


def cluster_queue_checks(cq: Obj | None) -> list[str]:
    """A ClusterQueue's admission checks (workload.AdmissionChecksForWorkload; `onFlavors` not modelled)."""
    spec = (cq or {}).get("spec") or {}
    names = [str(n) for n in spec.get("admissionChecks") or ()]
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ()
    return list(dict.fromkeys([*names, *(str(c.get("name")) for c in strategy if c.get("name"))]))
