"""Where a queued job stands (status/queue_position.py, reconciler/kueue.py PendingPositions): Kueue's
visibility API read at most once per ClusterQueue per interval, shared by its jobs; the LocalQueue's pending
count when the API is not served."""

from __future__ import annotations

import pytest

from tests.unit.test_kueue_decisions import DiscoveryApi, group
from tests.unit.test_queue import QUEUE, condition, queued_job, step, workload
from tpujob import kube
from tpujob import status as s
from tpujob.reconciler.kueue import KueueReader, KueueServed, PendingPositions
from tpujob.render.workload import KueueApi
from tpujob.status.queue_position import VISIBILITY_GROUP, QueuePosition, positions, visibility_version


def item(name, in_cq, in_lq, namespace="ns", **extra):
    return {
        "metadata": {"name": name, "namespace": namespace},
        "priority": 0,
        "localQueueName": "q",
        "positionInClusterQueue": in_cq,
        "positionInLocalQueue": in_lq,
        **extra,
    }


def summary(*items):
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{VISIBILITY_GROUP}/v1beta2",
        "items": list(items),
    }


def test_positions_are_read_by_namespace_and_name():
    found = positions(summary(item("a", 0, 0), item("b", 1, 0, namespace="other"), item("c", 2, 1)))
    assert found == {
        ("ns", "a"): QueuePosition(0, 0),
        ("other", "b"): QueuePosition(1, 0),
        ("ns", "c"): QueuePosition(2, 1),
    }


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "text",
        {"items": "x"},
        summary("x", {"metadata": "x"}),
        summary(item("a", -1, 0)),
        summary(item("a", True, 0)),
        summary(item("a", "1", 0)),
        summary({"metadata": {"name": "a", "namespace": "ns"}}),  # no positions
        summary(item(7, 0, 0)),
    ],
)
def test_an_answer_not_of_kueues_shape_gives_no_position(answer):
    assert positions(answer) == {}


@pytest.mark.parametrize(
    ("versions", "read"),
    [(("v1beta1", "v1beta2"), "v1beta2"), (("v1beta1",), "v1beta1"), (("v1alpha1",), None), ((), None)],
)
def test_the_visibility_version_read_is_the_newest_served(versions, read):
    assert visibility_version(group(*versions)) == read
    assert visibility_version(None) is None


class VisibilityApi(DiscoveryApi):
    def __init__(self, answer=None, error=None, visibility=None):
        super().__init__(group("v1beta2"), crd=None, visibility=visibility or group("v1beta2"))
        self.answer, self.error, self.asked = answer, error, []

    def get_pending_workloads(self, grp, version, cluster_queue):
        self.asked.append((grp, version, cluster_queue))
        if self.error is not None:
            raise self.error
        return self.answer


def test_one_read_per_cluster_queue_per_interval_serves_every_job_queued_there():
    api = VisibilityApi(summary(item("a", 0, 0), item("b", 1, 1)))
    cache = PendingPositions(api, interval=3600)  # type: ignore[arg-type]
    assert cache.position("v1beta2", "cq", "ns", "a") == QueuePosition(0, 0)
    assert cache.position("v1beta2", "cq", "ns", "b") == QueuePosition(1, 1)
    assert cache.position("v1beta2", "cq", "ns", "gone") is None
    assert api.asked == [(VISIBILITY_GROUP, "v1beta2", "cq")]
    cache.position("v1beta2", "other-cq", "ns", "a")
    assert [a[2] for a in api.asked] == ["cq", "other-cq"] and cache.reads == 2
    again = PendingPositions(api, interval=0)  # type: ignore[arg-type]
    again.position("v1beta2", "cq", "ns", "a")
    again.position("v1beta2", "cq", "ns", "b")
    assert again.reads == 2  # past the interval: read again


def test_a_refused_read_gives_no_position_and_is_not_retried_within_the_interval():
    api = VisibilityApi(error=kube.ApiError(403, "Forbidden"))
    cache = PendingPositions(api, interval=3600)  # type: ignore[arg-type]
    assert cache.position("v1beta2", "cq", "ns", "a") is None
    assert cache.position("v1beta2", "cq", "ns", "b") is None
    assert len(api.asked) == 1


@pytest.mark.parametrize(
    ("visibility", "found"),
    [
        (group("v1beta1", "v1beta2"), "v1beta2"),
        (None, None),  # not served
        (kube.ApiError(503, "Service Unavailable"), None),  # its APIService registered, Kueue's server down
    ],
)
def test_discovery_finds_the_visibility_api_or_its_absence(visibility, found):
    served = KueueServed(DiscoveryApi(group("v1beta2"), crd=None, visibility=visibility))  # type: ignore[arg-type]
    served.discover()
    assert served.visibility == found


PENDING = condition("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set slice-0: ...")


def test_a_queued_job_says_its_position_in_the_cluster_queue_when_kueue_serves_it():
    queue = s.QueueView(
        QUEUE,
        workload=workload(PENDING),
        cluster_queue="tpu-cq",
        pending_workloads=5,
        position=QueuePosition(2, 1),
    )
    decision = step(queued_job(), queue)
    assert decision.status.queue.position == 3
    assert "position 3 in ClusterQueue tpu-cq (2 in LocalQueue" in decision.status.message
    assert "pending in LocalQueue" not in decision.status.message


def test_without_the_visibility_api_it_says_the_local_queues_count():
    queue = s.QueueView(QUEUE, workload=workload(PENDING), cluster_queue="tpu-cq", pending_workloads=5)
    decision = step(queued_job(), queue)
    assert decision.status.queue.position is None
    assert "5 workload(s) pending in LocalQueue" in decision.status.message


@pytest.mark.parametrize(("served", "read"), [(group("v1beta1", "v1beta2"), True), (None, False)])
def test_the_reader_asks_the_visibility_api_only_where_it_is_served(served, read):
    job = queued_job()
    api = VisibilityApi(summary(item("tpujob-train-abcde", 4, 0, namespace=job.metadata.namespace)))
    api.visibility = served
    api.get_kueue_object = lambda version, plural, name, namespace=None: {"spec": {"clusterQueue": "tpu-cq"}}
    reader = KueueReader(api, enabled=True)  # type: ignore[arg-type]
    served_api = KueueApi("v1beta2", 18)
    view = reader.view(job, workloads=[workload(PENDING)], served=served_api)
    assert view is not None and view.position == (QueuePosition(4, 0) if read else None)
    assert api.asked == ([(VISIBILITY_GROUP, "v1beta2", "tpu-cq")] if read else [])
    reader.view(job, workloads=[workload(PENDING)], served=served_api)
    assert len(api.asked) == (1 if read else 0)  # within the interval: the same reading
