"""How narrow a restart can be, and the hardware signals that call for one.

- restartStrategy RecreateSlice: a failure confined to one slice of a Multislice job (its workers failed, or
  went with their node) recreates only that slice's pods; the other slices keep their pods, and their
  trainers are told the new attempt (restart_in_place) and restart their training process in place.
- GKE's TPU device plugin sets the node conditions MegascaleHangDetected and SliceErrorDetected from
  libtpu's signals (ai-on-gke/tpu-device-plugin, pkg/metrics/metrics.go: updateNodeCondition, renewing
  lastHeartbeatTime every collection while libtpu reports the error; removeExpiredNodeCondition, 30 minutes
  after the last heartbeat). A hang or a slice error on a node of a running attempt restarts the whole job
  (a hung collective involves every slice), without counting against maxRestarts.
"""

from __future__ import annotations

from tpujob.api.run_policy import RestartStrategy
from tpujob.api.status import ConditionStatus, Phase, Reason
from tpujob.status import bad_nodes
from tpujob.status.builder import Builder, begin_restart
from tpujob.status.model import NodeFault, PodView, is_current, parse_timestamp

# The device plugin's condition types (metrics.go hangConditionType, sliceErrorConditionType): the job's
# restart reason is the condition's type.
HARDWARE_CONDITIONS = {
    Reason.MEGASCALE_HANG.value: Reason.MEGASCALE_HANG,
    Reason.SLICE_ERROR.value: Reason.SLICE_ERROR,
}


def narrow_slice(b: Builder, failed: list[PodView], lost: list[tuple[int, int]]) -> int | None:
    """The one slice a restart may be confined to (RecreateSlice, a Multislice job, every failed or lost
    worker in that slice); None: the whole job restarts."""
    job = b.job
    if job.spec.run_policy.restart_strategy != RestartStrategy.recreate_slice or job.spec.tpu.slices < 2:
        return None
    hit = {p.slice for p in failed} | {slice_index for slice_index, _ in lost}
    if len(hit) != 1:
        return None
    only = hit.pop()
    # A kept slice's trainers restart in place; a worker that already ended (its run finished as a peer
    # failed at the end) has no training process left to restart, and the recreated slice's processes would
    # wait for it: the whole job restarts.
    if any(p.slice != only and p.phase == "Succeeded" for p in b.observed.pods if is_current(b.status, p)):
        return None
    return only


def restart_in_place(b: Builder, current: list[PodView]) -> None:
    """Tell the trainers of kept pods the current attempt, until their pods show it (an idempotent write)."""
    attempt = b.status.attempt
    b.decision.restart_in_place = [
        p.name
        for p in current
        if p.attempt < attempt and p.phase in ("Pending", "Running") and p.restart_attempt != attempt
    ]


def hardware_restart(b: Builder, current: list[PodView]) -> bool:
    """Restart the whole job, uncounted, on a hardware signal (hardware_fault); whether it did."""
    found = hardware_fault(b, current)
    if found is None:
        return False
    fault, pod = found
    if pod.node:  # the device plugin's condition is the node's fault
        bad_nodes.note_failures(b, [pod], {pod.node: fault.type})
    detail = (
        f"GKE's TPU device plugin set {fault.type} on node {pod.node} (slice {pod.slice} worker {pod.worker})"
    )
    begin_restart(
        b, fault.type, detail + (f": {fault.message}" if fault.message else ""), infrastructure=True
    )
    return True


def hardware_fault(b: Builder, current: list[PodView]) -> tuple[NodeFault, PodView] | None:
    """A hang or slice error GKE's device plugin signalled on the node of a running worker of this attempt,
    renewed after the attempt's workers all ran (an older heartbeat is a previous attempt's: the condition
    stays 30 minutes)."""
    status = b.status
    running = next(
        (c for c in status.conditions if c.type == "Running" and c.status == ConditionStatus.true), None
    )
    if status.phase != Phase.RUNNING or running is None or not running.last_transition_time:
        return None
    since = parse_timestamp(running.last_transition_time)
    for pod in sorted(current, key=lambda p: (p.slice, p.worker)):
        if pod.phase != "Running" or not pod.node:
            continue
        for fault in b.observed.node_faults.get(pod.node, ()):
            if (
                fault.type in HARDWARE_CONDITIONS
                and fault.heartbeat
                and parse_timestamp(fault.heartbeat) > since
            ):
                return fault, pod
    return None
