"""A bad host, named and avoided. Pure: which failures are a node's fault, their count per node in
status.nodeFailures, and the nodes the job's next attempts keep off.

A failure is the node's, not the trainer's, only on evidence the node left (never an exit code the trainer
can give itself: exit 1 is the application's, whatever node it ran on):

- the pod's node went away unannounced: pod reason NodeLost (the node lifecycle controller, for a node that
  stopped reporting: kubernetes pkg/controller/util/node, NodeUnreachablePodReason), or a DisruptionTarget
  condition with reason DeletionByPodGC (pod GC fails the pods bound to a node that no longer exists before
  it deletes them: kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions). A
  graceful node shutdown (reason Terminated: GKE's Spot reclaim and host maintenance), an eviction, a drain
  or a preemption is the infrastructure's plan, not a fault of the host, and is not counted. Nor is a worker
  pod that vanished without a word: a `kubectl delete pod` looks the same;
- the kubelet could not admit the pod on the node: reason UnexpectedAdmissionError, "Allocate failed due to
  ..., which is unexpected", when the device manager's Allocate call to the TPU device plugin fails
  (kubernetes pkg/kubelet/cm/topologymanager and pkg/kubelet/lifecycle: the admit handlers);
- the container runtime could not start the container with the node's TPU devices: reason StartError (or
  ContainerCannotRun), exit code 128, its message naming a device path (/dev/accel*, /dev/vfio/*): the
  application never ran. A StartError that names no device (a command not found, a bad mount) is the job's;
- GKE's TPU device plugin set MegascaleHangDetected or SliceErrorDetected on the node (recovery.py).

A node counts once per failed attempt, however many of the attempt's workers failed on it. A node that
failed the job BAD_NODE_FAILURES times is avoided: on pools made elsewhere (policy existing) the new pods
carry a required node affinity NotIn on its kubernetes.io/hostname (render/plan.py); a pool the operator
made holds exactly the slice's hosts, so there the slice's pool is recreated instead (new VMs, new names).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from tpujob.api.spec import NodePoolPolicy
from tpujob.api.status import MAX_NODE_FAILURES, NODE_NAME_MAX_LENGTH, NodeFailure, Reason, TPUJobStatus
from tpujob.render import naming
from tpujob.status.builder import Builder
from tpujob.status.model import PodView, timestamp

BAD_NODE_FAILURES = 2

NODE_GONE_REASONS = frozenset({"NodeLost"})
NODE_GONE_DISRUPTIONS = frozenset({"DeletionByPodGC"})
ADMISSION_REASONS = frozenset({"UnexpectedAdmissionError"})
START_FAILURE_REASONS = frozenset({"StartError", "ContainerCannotRun"})
# The exit code a container runtime reports for a container it could not start (containerd, CRI-O).
START_FAILURE_EXIT_CODE = 128
# Device paths of a TPU VM's chips as a container gets them (/dev/accel0.., or /dev/vfio/* on generations
# whose chips are handed over through VFIO; which generation uses which is not encoded here).
_TPU_DEVICE = re.compile(r"/dev/(accel\d*|vfio)\b")
# A node's name as Kubernetes allows it (a DNS subdomain): anything else is not named in a status or an
# affinity (the name came through a pod's spec.nodeName or a node watch: the cluster's, but parsed anyway).
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def is_node_name(name: str) -> bool:
    return 0 < len(name) <= NODE_NAME_MAX_LENGTH and _NODE_NAME.match(name) is not None


def node_fault(pod: PodView) -> str | None:
    """The cause, when a failed pod's failure is its node's fault (see the module's text); else None."""
    if pod.phase != "Failed" or not is_node_name(pod.node):
        return None
    if pod.reason in NODE_GONE_REASONS or pod.reason in ADMISSION_REASONS:
        return pod.reason
    if pod.disruption in NODE_GONE_DISRUPTIONS:
        return pod.disruption
    if (
        pod.reason in START_FAILURE_REASONS
        and pod.exit_code == START_FAILURE_EXIT_CODE
        and _TPU_DEVICE.search(pod.message)
    ):
        return pod.reason
    return None


def faulty_nodes(failed: Iterable[PodView]) -> dict[str, str]:
    """The nodes an attempt's failed pods fault, each once (node -> the cause of its first worker's)."""
    found: dict[str, str] = {}
    for pod in sorted(failed, key=lambda p: (p.slice, p.worker)):
        cause = node_fault(pod)
        if cause is not None:
            found.setdefault(pod.node, cause)
    return found


def count_failures(status: TPUJobStatus, faults: dict[str, str], now: dt.datetime) -> list[NodeFailure]:
    """Each node's failure counted in status.nodeFailures (at most MAX_NODE_FAILURES nodes: the avoided and
    the most recent kept). Returns the records of nodes avoided from now on (they reached
    BAD_NODE_FAILURES in this call)."""
    by_node = {record.node: record for record in status.node_failures}
    newly: list[NodeFailure] = []
    for node, cause in faults.items():
        if not is_node_name(node):
            continue
        record = by_node.setdefault(node, NodeFailure(node=node))
        record.failures += 1
        record.reason, record.last_time = cause[:64], timestamp(now)
        if not record.avoided and record.failures >= BAD_NODE_FAILURES:
            record.avoided = True
            newly.append(record)
    kept = sorted(by_node.values(), key=lambda r: (r.avoided, r.last_time or ""), reverse=True)
    status.node_failures = sorted(kept[:MAX_NODE_FAILURES], key=lambda r: r.node)
    return newly


def avoided_nodes(status: TPUJobStatus) -> tuple[str, ...]:
    """The nodes the job keeps off, by name."""
    return tuple(sorted(r.node for r in status.node_failures if r.avoided and is_node_name(r.node)))


def affinity_avoids(policy: NodePoolPolicy, status: TPUJobStatus) -> tuple[str, ...]:
    """The nodes the new pods' affinity keeps off: on pools made elsewhere only (a pool the operator made
    is recreated instead, see pools_to_recreate)."""
    return avoided_nodes(status) if policy == NodePoolPolicy.existing else ()


def pools_to_recreate(
    policy: NodePoolPolicy, newly: Iterable[NodeFailure], failed: Iterable[PodView]
) -> list[int]:
    """Policy create: the slices whose pool holds a node avoided from now on, to be recreated."""
    if policy != NodePoolPolicy.create:
        return []
    bad = {record.node for record in newly}
    return sorted({pod.slice for pod in failed if pod.node in bad})


def note_failures(b: Builder, failed: list[PodView], faults: dict[str, str] | None = None) -> None:
    """An attempt failed: the nodes at fault counted (`faults`, else those of faulty_nodes(failed)); a node
    avoided from now on is said by a Warning Event, and on the operator's own pools its slice's pool is
    recreated (deleted now, created again before the next attempt's pods)."""
    newly = count_failures(b.status, faulty_nodes(failed) if faults is None else faults, b.now)
    policy = b.job.spec.node_pool.policy
    for record in newly:
        how = (
            "its slice's node pool is recreated, with new VMs"
            if policy == NodePoolPolicy.create
            else "the job's next attempts keep off it (a required node affinity on kubernetes.io/hostname)"
        )
        b.event(
            "Warning",
            Reason.BAD_NODE_AVOIDED,
            f"node {record.node} failed this job {record.failures} times (last: {record.reason}); {how}; "
            + report_hint(record.node),
        )
    for slice_index in pools_to_recreate(policy, newly, failed):
        name = naming.node_pool_name(b.job, slice_index)
        if name not in b.decision.delete_pools:
            b.decision.delete_pools.append(name)


def forget_replaced(b: Builder) -> None:
    """A node deleted after its last failure here (GKE's auto-repair recreates the VM; a pool recreated, a
    node deleted by hand) comes back, if at all, as a new VM: its count starts again and it is no longer
    avoided. The record stays, with replacedTime, so the node that failed is still named."""
    deleted = b.observed.nodes_deleted
    for record in b.status.node_failures:
        when = deleted.get(record.node)
        if when is None or record.replaced_time == when or not _deleted_after(record, when):
            continue
        if record.avoided:
            b.event(
                "Normal",
                Reason.BAD_NODE_REPLACED,
                f"node {record.node} was deleted since it failed this job (its VM replaced): not avoided now",
            )
        record.failures, record.avoided, record.replaced_time = 0, False, when


def _deleted_after(record: NodeFailure, when: str) -> bool:
    """Whether a deletion at `when` (RFC 3339, whole seconds) came after the record's last failure: a failure
    on a node that was there (any cause but DeletionByPodGC) precedes a deletion in the same second; a pod
    GC'd off a deleted node comes after its deletion, so only a later one replaced it."""
    if not record.last_time:
        return False
    if record.reason in NODE_GONE_DISRUPTIONS:
        return when > record.last_time
    return when >= record.last_time


def newly_avoided(before: TPUJobStatus, after: TPUJobStatus) -> list[str]:
    """Nodes avoided after a pass and not before it (for the tpujob_bad_node_avoided_total counter)."""
    was = set(avoided_nodes(before))
    return [node for node in avoided_nodes(after) if node not in was]


def report_hint(node: str) -> str:
    """What the Event tells a user to do about a bad host."""
    return (
        f"if node {node} keeps failing, report it to Google: GKE's node auto-repair replaces a node that "
        "stays NotReady; on reserved TPU capacity in All Capacity mode, report its VM with "
        f"`gcloud compute instances report-host-as-faulty {node}` (docs/concepts/failure-and-recovery.md)"
    )
