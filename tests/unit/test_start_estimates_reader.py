"""What a queued job's start estimate is made from, as the reconciler reads it
(reconciler/start_estimates.py): a ClusterQueue's quota and reservation, the operator's jobs holding quota
in it and waiting in it. Whatever a tenant wrote into a job or a Workload leaves that job out; it never
raises."""

import datetime as dt
import json

import pytest

from tests.manifests import base_job
from tpujob import status as s
from tpujob.reconciler import start_estimates as reader
from tpujob.render.workload import pod_set_facts

T0 = dt.datetime(2026, 11, 24, 12, 0, 0, tzinfo=dt.UTC)
TPU = "google.com/tpu"
V5E = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "2x2",
}


def cluster_queue(strategy=None, status=None):
    spec = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu", TPU],
                "flavors": [
                    {"name": "v5e", "resources": [{"name": "cpu", "nominalQuota": "64"},
                                                  {"name": TPU, "nominalQuota": "16"}]},
                    {"name": "v6e", "resources": [{"name": TPU, "nominalQuota": 8}]},
                ],
            }
        ]
    }  # fmt: skip
    if strategy:
        spec["queueingStrategy"] = strategy
    body = {"metadata": {"name": "cq"}, "spec": spec}
    if status is not None:
        body["status"] = status
    return body


def test_quota_and_strategy():
    assert reader.queue_quota(cluster_queue()) == ({"v5e": 16, "v6e": 8}, False)
    assert reader.queue_quota(cluster_queue("StrictFIFO"))[1] is True


def test_reservation_and_pending():
    status = {
        "pendingWorkloads": 3,
        "flavorsReservation": [
            {"name": "v5e", "resources": [{"name": "cpu", "total": "8"}, {"name": TPU, "total": "12"}]},
            {"name": "v6e", "resources": [{"name": TPU, "total": "0"}]},
        ],
    }
    assert reader.queue_reservation(cluster_queue(status=status)) == ({"v5e": 12, "v6e": 0}, 3)
    # Kueue has not written it yet: not zero, unknown.
    assert reader.queue_reservation(cluster_queue()) == (None, None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(4, 4), ("16", 16), ("2k", 2000), ("1.5", None), (True, None), (None, None), ("", None)],
)
def test_count(value, expected):
    assert reader.count(value) == expected


def workload(name, reserved, cq="cq", usage="4", priority=0, created="2026-11-24T11:00:00Z", selector=V5E):
    conditions = ({"type": "QuotaReserved", "status": "True"},) if reserved else ()
    admission = (
        {
            "clusterQueue": cq,
            "podSetAssignments": [
                {"name": "slice-0", "flavors": {TPU: "v5e"}, "resourceUsage": {TPU: usage}}
            ],
        }
        if reserved
        else None
    )
    pod_set = {
        "name": "slice-0",
        "count": 1,
        "template": {"spec": {"nodeSelector": selector, "containers": []}},
    }
    return s.WorkloadView(
        name,
        "1",
        conditions=conditions,
        admission=admission,
        pod_sets=(pod_set_facts(pod_set),),
        priority=priority,
        queue_order_time=created,
    )


def job_wire(name, uid, phase, cq="cq", progress=None, **run_policy):
    body = base_job(name)
    body["metadata"].update(uid=uid, namespace="ml")
    if run_policy:
        body["spec"]["runPolicy"] = run_policy
    status = {"phase": phase, "queue": {"name": "q", "clusterQueue": cq}}
    if progress is not None:
        status["progress"] = progress
    if phase == "Running":
        status["startTime"] = "2026-11-24T11:30:00Z"
    body["status"] = status
    return json.dumps(body, separators=(",", ":"))


def test_holders_and_waiters_of_one_queue():
    eta = "2026-11-24T12:30:00Z"
    jobs = [
        (job_wire("run", "u1", "Running", progress={"eta": eta, "attempt": 0}), [workload("w1", True)]),
        (job_wire("cap", "u2", "Running", activeDeadlineSeconds=3600), [workload("w2", True)]),
        (job_wire("wait", "u3", "Queued", activeDeadlineSeconds=600), [workload("w3", False, priority=5)]),
        (job_wire("other", "u4", "Running"), [workload("w4", True, cq="elsewhere")]),
        (job_wire("waits-elsewhere", "u5", "Queued", cq="elsewhere"), [workload("w5", False)]),
        # A tenant's Workload whose usage is not a quantity: it holds nothing the operator counts.
        (job_wire("odd", "u6", "Running"), [workload("w6", True, usage="lots")]),
    ]
    holders, waiters = reader.gather(
        "cq", jobs, {"v5e": V5E, "v6e": {"cloud.google.com/gke-tpu-topology": "2x4"}}, T0
    )
    assert [h.what for h in holders] == ["TPUJob ml/run", "TPUJob ml/cap", "TPUJob ml/odd"]
    run, cap, odd = holders
    assert (run.chips, run.ends, run.bound) == (
        {"v5e": 4},
        dt.datetime(2026, 11, 24, 12, 30, tzinfo=dt.UTC),
        False,
    )
    assert (cap.ends, cap.bound) == (dt.datetime(2026, 11, 24, 12, 30, tzinfo=dt.UTC), True)  # 11:30 + 1 h
    assert odd.chips == {} and odd.ends is None and "not yet training" not in odd.unknown
    (wait,) = waiters
    assert (wait.key, wait.chips, wait.priority, wait.flavors) == ("u3", 4, 5, ("v5e",))
    assert wait.runs_at_most == 600 and wait.deadline is None
    assert wait.since == dt.datetime(2026, 11, 24, 11, 0, tzinfo=dt.UTC)


def test_an_unreadable_job_is_left_out():
    broken = json.dumps(
        {
            "metadata": {"uid": "u9"},
            "spec": {"tpu": {"type": "v99", "topology": "2x2"}},
            "status": {"phase": "Queued", "queue": {"clusterQueue": "cq"}},
        },
        separators=(",", ":"),
    )
    assert reader.gather(
        "cq", [(broken, [workload("w9", False)]), ("not json", [workload("w8", True)])], {}, T0
    ) == (
        (),
        (),
    )


def test_queue_order_time_is_the_podsready_eviction_or_the_creation():
    meta = {"creationTimestamp": "2026-11-24T11:00:00Z"}
    evicted = (
        {
            "type": "Evicted",
            "status": "True",
            "reason": "PodsReadyTimeout",
            "lastTransitionTime": "2026-11-24T11:40:00Z",
        },
    )
    preempted = (
        {
            "type": "Evicted",
            "status": "True",
            "reason": "Preempted",
            "lastTransitionTime": "2026-11-24T11:40:00Z",
        },
    )
    from tpujob.reconciler.kueue import queue_order_time

    assert queue_order_time(meta, evicted) == "2026-11-24T11:40:00Z"
    assert queue_order_time(meta, preempted) == "2026-11-24T11:00:00Z"
