"""A bad host, named and avoided, decided purely: which failures are a node's fault, their count per node in
status.nodeFailures, the Event, the pods' node affinity on pools made elsewhere, and the recreated pool of a
job's own."""

import dataclasses
import datetime as dt

import pytest

from tests.unit.test_recovery import MULTISLICE, _heartbeat, fail, running
from tests.unit.test_status import NOW, advance, make_job, pods, ready_pools, step
from tpujob import status as s
from tpujob.api.spec import NodePoolPolicy
from tpujob.api.status import MAX_NODE_FAILURES, NodeFailure, Phase, Reason, TPUJobStatus
from tpujob.render import Cluster, naming
from tpujob.render import plan as render
from tpujob.status import bad_nodes

CLUSTER = Cluster("p", "us-central2", "c", "us-central2-b")
DEVICE_ERROR = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: error during "
    'container init: error gathering device information while adding custom device "/dev/accel0": no such '
    "file or directory"
)


def failed_pod(**how):
    return s.PodView("p", 0, 0, 0, how.pop("phase", "Failed"), node=how.pop("node", "gke-c-tpu-1"), **how)


@pytest.mark.parametrize(
    ("pod", "cause"),
    [
        (failed_pod(reason="NodeLost"), "NodeLost"),
        (
            failed_pod(disruption="DeletionByPodGC", conditions=(("DisruptionTarget", "True"),)),
            "DeletionByPodGC",
        ),
        (failed_pod(reason="UnexpectedAdmissionError"), "UnexpectedAdmissionError"),
        (failed_pod(reason="StartError", exit_code=128, message=DEVICE_ERROR), "StartError"),
        (
            failed_pod(reason="ContainerCannotRun", exit_code=128, message="open /dev/vfio/0: busy"),
            "ContainerCannotRun",
        ),
        # The trainer's own exits are the application's, whatever node they ran on.
        (failed_pod(exit_code=1, reason="Error"), None),
        (failed_pod(exit_code=137, reason="OOMKilled"), None),
        (failed_pod(exit_code=135), None),
        # A StartError that names no device is the job's (a command not found).
        (
            failed_pod(
                reason="StartError", exit_code=128, message='exec: "pythn": executable file not found'
            ),
            None,
        ),
        (failed_pod(reason="StartError", exit_code=1, message=DEVICE_ERROR), None),
        # The infrastructure's plans are no fault of the host: a Spot reclaim or maintenance, an eviction.
        (failed_pod(reason="Terminated", exit_code=143), None),
        (failed_pod(reason="Evicted"), None),
        (failed_pod(reason="Preempting", conditions=(("DisruptionTarget", "True"),)), None),
        (failed_pod(disruption="EvictionByEvictionAPI", conditions=(("DisruptionTarget", "True"),)), None),
        (failed_pod(disruption="TerminationByKubelet", reason="Terminated", exit_code=143), None),
        # Not failed, or no node to name (or one no Kubernetes node could be called).
        (failed_pod(phase="Running", reason="NodeLost"), None),
        (failed_pod(reason="NodeLost", node=""), None),
        (failed_pod(reason="NodeLost", node="Bad Node"), None),
        (failed_pod(reason="NodeLost", node="n" * 254), None),
    ],
)
def test_a_failure_is_the_nodes_only_on_evidence_the_node_left(pod, cause):
    assert bad_nodes.node_fault(pod) == cause


def test_a_node_counts_once_per_attempt_and_is_avoided_at_its_second():
    status = TPUJobStatus()
    two_on_one_node = [
        dataclasses.replace(failed_pod(reason="UnexpectedAdmissionError"), worker=w) for w in (0, 1)
    ]
    faults = bad_nodes.faulty_nodes(two_on_one_node)
    assert faults == {"gke-c-tpu-1": "UnexpectedAdmissionError"}
    assert bad_nodes.count_failures(status, faults, NOW) == []
    assert status.node_failures == [
        NodeFailure(
            node="gke-c-tpu-1",
            failures=1,
            reason="UnexpectedAdmissionError",
            last_time="2026-11-21T12:00:00Z",
        )
    ]
    later = NOW + dt.timedelta(minutes=1)
    (newly,) = bad_nodes.count_failures(status, {"gke-c-tpu-1": "NodeLost"}, later)
    assert (newly.node, newly.failures, newly.reason, newly.avoided) == ("gke-c-tpu-1", 2, "NodeLost", True)
    assert bad_nodes.avoided_nodes(status) == ("gke-c-tpu-1",)
    assert bad_nodes.count_failures(status, {"gke-c-tpu-1": "NodeLost"}, later) == []  # avoided already


def test_the_list_is_bounded_keeping_the_avoided_and_the_most_recent():
    status = TPUJobStatus()
    bad_nodes.count_failures(status, {"bad": "NodeLost"}, NOW)
    bad_nodes.count_failures(status, {"bad": "NodeLost"}, NOW)
    for i in range(40):
        bad_nodes.count_failures(status, {f"n{i:02d}": "NodeLost"}, NOW + dt.timedelta(seconds=i))
    nodes = [r.node for r in status.node_failures]
    assert len(nodes) == MAX_NODE_FAILURES
    assert "bad" in nodes and "n39" in nodes and "n00" not in nodes
    TPUJobStatus.model_validate(status.model_dump())  # within the schema's bound


@pytest.mark.parametrize(
    ("before", "avoid", "terms"),
    [
        (None, (), None),
        (None, ("b", "a"), [[("kubernetes.io/hostname", "NotIn", ["a", "b"])]]),
        (
            100,
            ("a",),
            [
                [
                    ("cloud.google.com/scheduled-maintenance-time", "DoesNotExist", None),
                    ("kubernetes.io/hostname", "NotIn", ["a"]),
                ],
                [
                    ("cloud.google.com/scheduled-maintenance-time", "Gt", ["100"]),
                    ("kubernetes.io/hostname", "NotIn", ["a"]),
                ],
            ],
        ),
        (
            100,
            (),
            [
                [("cloud.google.com/scheduled-maintenance-time", "DoesNotExist", None)],
                [("cloud.google.com/scheduled-maintenance-time", "Gt", ["100"])],
            ],
        ),
    ],
)
def test_the_pods_affinity_keeps_off_bad_nodes_in_every_term(before, avoid, terms):
    pod = render.pod(make_job(), CLUSTER, 0, 0, 2, avoid_maintenance_before=before, avoid_nodes=avoid)
    if terms is None:
        assert "affinity" not in pod["spec"]
        return
    got = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [
        [(e["key"], e["operator"], e.get("values")) for e in term["matchExpressions"]]
        for term in got["nodeSelectorTerms"]
    ] == terms


@pytest.mark.parametrize(
    ("policy", "avoided"),
    [(NodePoolPolicy.existing, ("gke-c-tpu-1",)), (NodePoolPolicy.create, ())],
)
def test_only_pools_made_elsewhere_get_the_affinity(policy, avoided):
    status = TPUJobStatus(node_failures=[NodeFailure(node="gke-c-tpu-1", failures=2, avoided=True)])
    assert bad_nodes.affinity_avoids(policy, status) == avoided


def _on_node(job, node, attempt):
    return tuple(dataclasses.replace(p, node=node) for p in pods(job, attempt, "Running"))


def test_an_existing_pool_job_whose_worker_fails_twice_on_one_node_keeps_off_it():
    job = make_job(nodePool={"policy": "existing"}, runPolicy={"maxRestarts": 5})
    bad = "gke-platform-v5e-1"
    for attempt in (0, 1):
        live = _on_node(job, bad, attempt)
        job = advance(job, step(job, service_exists=True, pods=live))
        decision = step(job, service_exists=True, pods=fail(live, 0, 0, reason="UnexpectedAdmissionError"))
        assert decision.status.phase == Phase.RESTARTING
        job = advance(job, decision)
    (record,) = job.status.node_failures
    assert (record.node, record.failures, record.avoided) == (bad, 2, True)
    (said,) = [e for e in decision.events if e.reason == Reason.BAD_NODE_AVOIDED]
    assert said.type == "Warning"
    assert f"node {bad} failed this job 2 times (last: UnexpectedAdmissionError)" in said.message
    assert "report-host-as-faulty" in said.message
    assert decision.delete_pools == []  # pools made elsewhere are never the job's to delete
    assert s.affinity_avoids(job.spec.node_pool.policy, job.status) == (bad,)
    assert s.newly_avoided(TPUJobStatus(), job.status) == [bad]


def test_application_failures_on_one_node_never_make_it_bad():
    job = make_job(nodePool={"policy": "existing"}, runPolicy={"maxRestarts": 5})
    for attempt in (0, 1, 2):
        live = _on_node(job, "gke-n-1", attempt)
        job = advance(job, step(job, service_exists=True, pods=live))
        job = advance(job, step(job, service_exists=True, pods=fail(live, 0, 0, exit_code=1)))
    assert job.status.node_failures == []


def test_a_created_pool_holding_a_bad_node_is_recreated():
    job = make_job(runPolicy={"maxRestarts": 5})  # policy create: the job's own pool
    pool = naming.node_pool_name(job, 0)
    for attempt in (0, 1):
        live = _on_node(job, "gke-c-own-1", attempt)
        job = advance(job, step(job, pools=ready_pools(job), service_exists=True, pods=live))
        decision = step(
            job, pools=ready_pools(job), service_exists=True, pods=fail(live, 0, 0, reason="NodeLost")
        )
        job = advance(job, decision)
    assert decision.status.phase == Phase.RESTARTING
    assert decision.delete_pools == [pool]  # GKE makes it again with new VMs before the next attempt
    (said,) = [e for e in decision.events if e.reason == Reason.BAD_NODE_AVOIDED]
    assert "its slice's node pool is recreated" in said.message
    assert s.affinity_avoids(job.spec.node_pool.policy, job.status) == ()
    # The pool as GKE removes it, then gone: made again, and the next attempt's pods wait for it.
    stopping = (s.PoolView(0, pool, s.POOL_STOPPING),)
    waiting = step(job, pools=stopping, service_exists=True, now=NOW + dt.timedelta(seconds=30))
    assert waiting.create_pods == [] and waiting.create_pools == []
    gone = (s.PoolView(0, pool, s.POOL_MISSING),)
    again = step(advance(job, waiting), pools=gone, service_exists=True, now=NOW + dt.timedelta(seconds=60))
    assert again.create_pools == [0]


def test_a_device_plugin_condition_counts_for_its_node():
    job, live = running(make_job(tpu=MULTISLICE))
    faults = {"n-1-0": (s.NodeFault(Reason.SLICE_ERROR.value, _heartbeat(5)),)}
    later = NOW + dt.timedelta(seconds=6)
    decision = step(
        job, pools=ready_pools(job), service_exists=True, pods=live, node_faults=faults, now=later
    )
    (record,) = decision.status.node_failures
    assert (record.node, record.failures, record.reason, record.avoided) == (
        "n-1-0",
        1,
        "SliceErrorDetected",
        False,
    )


def test_the_pod_view_reads_a_failed_pods_disruption_reason_bounded():
    from tpujob.reconciler.pod_views import pod_view

    def body(phase, reason):
        condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
        return {
            "metadata": {"name": "train-s0-w0-a0", "labels": {}},
            "spec": {"nodeName": "gke-c-tpu-1"},
            "status": {"phase": phase, "conditions": [condition]},
        }

    failed = pod_view(body("Failed", "DeletionByPodGC"))
    assert (failed.disruption, bad_nodes.node_fault(failed)) == ("DeletionByPodGC", "DeletionByPodGC")
    assert pod_view(body("Running", "DeletionByPodGC")).disruption == ""  # only a failed pod's is kept
    assert len(pod_view(body("Failed", "x" * 10_000)).disruption) == 64  # a tenant's condition, bounded


def test_a_bad_nodes_vm_replaced_since_is_no_longer_avoided_but_still_named():
    job = make_job(nodePool={"policy": "existing"}, runPolicy={"maxRestarts": 5})
    last = s.timestamp(NOW)
    record = NodeFailure(node="gke-n-1", failures=2, reason="NodeLost", last_time=last, avoided=True)
    other = NodeFailure(node="gke-n-2", failures=1, reason="NodeLost", last_time=last)
    job = job.model_copy(update={"status": TPUJobStatus(node_failures=[record, other])})
    later = s.timestamp(NOW + dt.timedelta(minutes=5))
    earlier = s.timestamp(NOW - dt.timedelta(minutes=5))  # deleted before it failed: the failure stands
    decision = step(job, service_exists=True, nodes_deleted={"gke-n-1": later, "gke-n-2": earlier})
    replaced, kept = decision.status.node_failures
    assert (replaced.node, replaced.failures, replaced.avoided, replaced.replaced_time) == (
        "gke-n-1",
        0,
        False,
        later,
    )
    assert (replaced.reason, replaced.last_time) == ("NodeLost", last)  # still named, with its last cause
    assert kept == other
    (said,) = [e for e in decision.events if e.reason == Reason.BAD_NODE_REPLACED]
    assert said.type == "Normal" and "gke-n-1" in said.message
    assert s.affinity_avoids(job.spec.node_pool.policy, decision.status) == ()
    # Said once: the next pass sees the same deletion, already recorded.
    again = step(advance(job, decision), service_exists=True, nodes_deleted={"gke-n-1": later})
    assert [e for e in again.events if e.reason == Reason.BAD_NODE_REPLACED] == []


def test_deleted_nodes_are_remembered_bounded_the_latest_kept():
    from tpujob.handlers import nodes

    deleted: dict[str, str] = {}
    for i in range(nodes.MAX_DELETED_NODES + 10):
        deleted = nodes.note_deleted(deleted, f"n{i}", "2026-11-21T12:00:00Z")
    before = deleted
    # Deleted again: the latest time, last out.
    deleted = nodes.note_deleted(deleted, "n5000", "2026-11-21T13:00:00Z")
    assert len(deleted) == nodes.MAX_DELETED_NODES
    assert "n0" not in deleted and deleted["n5000"] == "2026-11-21T13:00:00Z"
    assert next(reversed(deleted)) == "n5000"
    assert before["n5000"] == "2026-11-21T12:00:00Z"  # a new map: a snapshot holding the old one keeps it


@pytest.mark.parametrize(
    ("reason", "deleted_at", "replaced"),
    [
        ("SliceErrorDetected", 0, True),  # the same second: the node was there when it failed
        ("UnexpectedAdmissionError", 1, True),
        ("NodeLost", 0, True),
        ("DeletionByPodGC", 0, False),  # GC'd because its node was deleted: that deletion is the failure
        ("DeletionByPodGC", 1, True),
        ("UnexpectedAdmissionError", -1, False),  # deleted before it failed here: another VM failed
    ],
)
def test_a_deletion_replaces_a_node_only_after_its_failure(reason, deleted_at, replaced):
    record = NodeFailure(node="n", failures=2, reason=reason, last_time=s.timestamp(NOW), avoided=True)
    when = s.timestamp(NOW + dt.timedelta(seconds=deleted_at))
    assert bad_nodes._deleted_after(record, when) is replaced
