"""The test bed's Kueue visibility answers (tpujob_sandbox.kueue.visibility) on tables: Kueue v0.19.2's
pending_workloads_cq.go / _lq.go positions, limit and offset, read back by the operator
(status/queue_position.py)."""

from __future__ import annotations

from tests.unit.test_kueue_model import cluster_queue, local_queue, workload
from tpujob.status.queue_position import QueuePosition, positions
from tpujob_sandbox.kueue import visibility
from tpujob_sandbox.kueue.model import World

PENDING = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]}
RESERVED = {
    "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
    "admission": {"clusterQueue": "cq", "podSetAssignments": []},
}


def world(*workloads):
    return World(
        cluster_queues=[cluster_queue("cq"), cluster_queue("empty")],
        local_queues=[local_queue("q"), local_queue("r")],
        workloads=list(workloads),
    )


# Queue order: priority, then age (older first), then UID. "b" is in LocalQueue r; "held" holds quota.
WORKLOADS = (
    workload("low", priority=1, status=PENDING),
    workload("high", priority=9, status=PENDING),
    workload("b", priority=5, queue="r", status=PENDING),
    workload("old", priority=1, age=-100, status=PENDING),
    workload("held", priority=9, status=RESERVED),
    workload("off", priority=9, status=PENDING, active=False),
)


def test_the_cluster_queues_pending_workloads_in_queue_order_with_both_positions():
    answer = visibility.cluster_queue_summary(world(*WORKLOADS), "v1beta2", "cq")
    assert answer["kind"] == "PendingWorkloadsSummary"
    assert answer["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta2"
    assert [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
        for i in answer["items"]
    ] == [
        ("high", 0, 0),
        ("b", 1, 0),
        ("old", 2, 1),
        ("low", 3, 2),
    ]
    first = answer["items"][0]
    assert first["priority"] == 9 and first["localQueueName"] == "q"
    assert first["metadata"]["ownerReferences"] == [{"kind": "TPUJob", "name": "high", "uid": "j"}]
    # What the operator reads of it.
    assert positions(answer)[("ns", "b")] == QueuePosition(1, 0)


def test_limit_and_offset_keep_the_positions_counted_from_the_queues_head():
    answer = visibility.cluster_queue_summary(world(*WORKLOADS), "v1beta1", "cq", limit=2, offset=1)
    assert [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
        for i in answer["items"]
    ] == [
        ("b", 1, 0),
        ("old", 2, 1),
    ]
    assert visibility.bounded(-1, -5) == (0, 0) and visibility.bounded(10**9, 3) == (100_000, 3)


def test_a_local_queues_own_in_the_same_order():
    answer = visibility.local_queue_summary(world(*WORKLOADS), "v1beta2", "ns", "q", offset=1)
    assert [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
        for i in answer["items"]
    ] == [
        ("old", 2, 1),
        ("low", 3, 2),
    ]


def test_an_unknown_queue_is_not_found_and_an_empty_one_lists_nothing():
    assert visibility.cluster_queue_summary(world(*WORKLOADS), "v1beta2", "nope") is None
    assert visibility.local_queue_summary(world(*WORKLOADS), "v1beta2", "ns", "nope") is None
    assert visibility.cluster_queue_summary(world(*WORKLOADS), "v1beta2", "empty")["items"] == []
