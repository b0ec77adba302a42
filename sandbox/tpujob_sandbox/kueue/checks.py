"""Kueue v0.19.2's handling of a Workload's admission checks, apart from the checks' own controllers (the
ProvisioningRequest one is provisioning.py). Pure: one Workload's working copy, edited in place.

- A ClusterQueue's checks (spec.admissionChecks, or admissionChecksStrategy.admissionChecks: which apply to
  every flavor here; `onFlavors` is not modelled) are the Workload's (workload.AdmissionChecksForWorkload).
- With checks, the scheduler reserves quota and stops there (scheduler.go admit: Admitted waits); the
  workload controller keeps one state per check, added Pending (workload_controller.go
  reconcileSyncAdmissionChecks, syncAdmissionCheckConditions), and sets Admitted once every check is Ready
  (workload.SyncAdmittedCondition).
- A check in Retry evicts the Workload with reason AdmissionCheck; one Rejected deactivates it
  (reconcileCheckBasedEviction: SetDeactivationTarget, then spec.active=false and an eviction with reason
  DeactivatedDueToAdmissionCheck).
- Quota given back: every state back to Pending, its pod set updates dropped (workload.ResetChecksOnEviction).
"""

from __future__ import annotations

from datetime import datetime

from tpujob_sandbox.kueue.objects import (
    ADMITTED,
    Obj,
    format_time,
    generation,
    has_quota_reservation,
    is_admitted,
    is_evicted,
    set_condition,
)
from tpujob_sandbox.kueue.workloads import evict, status_of

PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"  # kueue.WorkloadEvictedByAdmissionCheck
DEACTIVATION_TARGET = "DeactivationTarget"


def _message(states: list[Obj], state: str) -> str:
    """buildAdmissionChecksMessage."""
    parts = [
        f'"{s["name"]}" ({s["message"]})' if s.get("message") else f'"{s["name"]}"'
        for s in sorted(states, key=lambda s: str(s.get("name")))
    ]
    noun = "AdmissionChecks" if len(states) > 1 else "AdmissionCheck"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def sync(wl: Obj, names: list[str], now: datetime) -> bool:
    """One workload controller pass over the Workload's checks. Returns True when it is to be deactivated
    (spec.active=false, written by the caller)."""
    status = status_of(wl)
    states: list[Obj] = [dict(s) for s in status.get("admissionChecks") or () if isinstance(s, dict)]
    if not has_quota_reservation(wl):
        for state in states:  # ResetChecksOnEviction
            if state.get("state") != PENDING or state.get("podSetUpdates"):
                state.update(state=PENDING, message="", lastTransitionTime=format_time(now))
                state.pop("podSetUpdates", None)
        if states:
            status["admissionChecks"] = states
        return False
    if not names and not states:
        return False
    by_name = {str(s.get("name")): s for s in states}
    synced = [
        by_name.get(n) or {"name": n, "state": PENDING, "message": "", "lastTransitionTime": format_time(now)}
        for n in names
    ]
    status["admissionChecks"] = synced
    if is_evicted(wl):
        return False
    rejected = [s for s in synced if s.get("state") == REJECTED]
    if rejected:
        message = _message(rejected, REJECTED)
        set_condition(
            status, DEACTIVATION_TARGET, True, EVICTED_BY_ADMISSION_CHECK, message, now, generation(wl)
        )
        evict(wl, "DeactivatedDueTo" + EVICTED_BY_ADMISSION_CHECK, message, now)
        return True
    retry = [s for s in synced if s.get("state") == RETRY]
    if retry:
        evict(wl, EVICTED_BY_ADMISSION_CHECK, "Evicted due to " + _message(retry, RETRY), now)
        return False
    if not is_admitted(wl) and all(s.get("state") == READY for s in synced):
        set_condition(status, ADMITTED, True, "Admitted", "The workload is admitted", now, generation(wl))
    return False
