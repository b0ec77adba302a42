"""Kueue's decisions stand, a queued job is charged nothing, and a Workload is the job's only while its whole
pod sets are (jobframework EquivalentToWorkload); in either Workload API version Kueue serves."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tests.unit.test_queue import (
    ADMITTED,
    QUEUE,
    admission,
    admitted_queue,
    advance,
    condition,
    pods,
    queued_job,
    ready_pools,
    running,
    step,
    workload,
)
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.api.status import Phase, Reason
from tpujob.reconciler.kueue import max_pod_sets, served_version, workload_view
from tpujob.render import naming
from tpujob.render.cluster import Cluster
from tpujob.render.workload import (
    KueueApi,
    PriorityFact,
    job_pod_set_facts,
    pod_set_facts,
    pod_sets_differences,
)
from tpujob.render.workload import workload as render_workload
from tpujob.status.cost import chips_held
from tpujob.status.queue_position import VISIBILITY_GROUP

# --- the version served --------------------------------------------------------------------------------


def group(*versions):
    return {"kind": "APIGroup", "name": c.KUEUE_GROUP, "versions": [{"version": v} for v in versions]}


@pytest.mark.parametrize(
    ("served", "spoken"),
    [
        (("v1beta2", "v1beta1"), "v1beta2"),  # Kueue v0.15 and later
        (("v1beta1", "v1beta2"), "v1beta2"),  # whatever discovery's order
        (("v1beta1",), "v1beta1"),  # v0.14 and earlier
        (("v1alpha1",), None),
        ((), None),
    ],
)
def test_the_version_spoken_is_v1beta2_when_served_else_v1beta1(served, spoken):
    assert served_version(group(*served)) == spoken
    assert served_version(None) is None


def crd(version, bound):
    schema = {"properties": {"spec": {"properties": {"podSets": {"maxItems": bound}}}}}
    return {"spec": {"versions": [{"name": version, "schema": {"openAPIV3Schema": schema}}]}}


def test_the_pod_set_cap_is_read_from_the_installed_crd():
    assert max_pod_sets(crd("v1beta2", 10), "v1beta2") == 10
    assert max_pod_sets(crd("v1beta2", 10), "v1beta1") is None
    assert max_pod_sets({"spec": {"versions": [{"name": "v1beta1"}]}}, "v1beta1") is None
    assert max_pod_sets(None, "v1beta2") is None


def test_v1beta1_names_the_priority_class_as_v1beta1_does():
    """v1beta1: priorityClassName and priorityClassSource; v1beta2: priorityClassRef
    (v1beta1/workload_conversion.go)."""
    job = queued_job()
    ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    old = render_workload(job, Cluster(), PriorityFact(1000, ref), KueueApi("v1beta1", 8))
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1" and "priorityClassRef" not in old["spec"]
    assert (old["spec"]["priorityClassName"], old["spec"]["priorityClassSource"]) == (
        "high",
        "kueue.x-k8s.io/workloadpriorityclass",
    )
    pod_ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "p"}
    pod_class = render_workload(job, Cluster(), PriorityFact(5, pod_ref), KueueApi("v1beta1", 8))
    assert pod_class["spec"]["priorityClassSource"] == "scheduling.k8s.io/priorityclass"
    new = render_workload(job, Cluster(), PriorityFact(1000, ref), KueueApi("v1beta2", 18))
    assert new["apiVersion"] == "kueue.x-k8s.io/v1beta2" and new["spec"]["priorityClassRef"] == ref
    assert "priorityClassName" not in new["spec"]


# --- equivalence on whole pod sets --------------------------------------------------------------------

V5E_2X4 = {"type": "v5e", "topology": "2x4"}


def _edit(path, value):
    def apply(pod_set):
        target = pod_set
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


EDITS = {
    "count": _edit(("count",), 3),
    "minCount": _edit(("minCount",), 1),
    "requests": _edit(("template", "spec", "containers", 0, "resources", "requests", "cpu"), "3"),
    "limits": _edit(("template", "spec", "containers", 0, "resources", "limits", c.TPU_RESOURCE), "4"),
    "container name": _edit(("template", "spec", "containers", 0, "name"), "other"),
    "init container": _edit(("template", "spec", "initContainers"), [{"name": "x", "resources": {}}]),
    "node selector": _edit(("template", "spec", "nodeSelector", c.NODE_LABEL_ACCELERATOR), "tpu-v6e-slice"),
    "tolerations": _edit(("template", "spec", "tolerations"), []),
    "name": _edit(("name",), "slice-9"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_field_that_matters_makes_the_workload_not_the_jobs(edit):
    """The table: each field Kueue's ComparePodSets compares (count, minCount, containers' and init
    containers' resources, tolerations), and the node selector, once changed, is a difference."""
    job = queued_job(tpu=V5E_2X4)
    body = render_workload(job, Cluster(), PriorityFact())
    wanted = job_pod_set_facts(job)
    assert not pod_sets_differences(wanted, tuple(pod_set_facts(p) for p in body["spec"]["podSets"]))
    edited = copy.deepcopy(body["spec"]["podSets"])
    EDITS[edit](edited[0])
    assert pod_sets_differences(wanted, tuple(pod_set_facts(p) for p in edited))


def test_what_kueue_does_not_admit_on_is_no_difference():
    """The image, env and args are not what Kueue admits: an edit of them reaches the next attempt's pods."""
    job = queued_job(tpu=V5E_2X4)
    (pod_set,) = render_workload(job, Cluster(), PriorityFact())["spec"]["podSets"]
    edited = copy.deepcopy(pod_set)
    container = edited["template"]["spec"]["containers"][0]
    container.update(image="other:1", args=["--steps", "9"], env=[])
    assert not pod_sets_differences(job_pod_set_facts(job), (pod_set_facts(edited),))


@pytest.mark.parametrize(
    "edited",
    [
        {"tpu": {"type": "v6e", "topology": "2x4"}},  # same chips per host, other nodes
        {"tpu": {**V5E_2X4, "machineType": "ct5lp-hightpu-4t"}},  # two hosts of 4 chips: another count
        {"trainer": {"image": "tpujob-trainer:test", "resources": {"requests": {"cpu": "8"}}}},
        {"capacity": {"mode": "spot"}},  # spot nodes: another node selector and toleration
    ],
    ids=["v6e-2x4", "two-hosts", "cpu-requests", "spot"],
)
def test_an_edited_job_gets_its_admitted_workload_replaced(edited):
    before = queued_job(tpu=V5E_2X4)
    made = workload_view(render_workload(before, Cluster(), PriorityFact()))
    admitted = dataclasses.replace(made, conditions=ADMITTED, admission=admission(flavor="v5e"))
    after = queued_job(**{"tpu": V5E_2X4, **edited})
    replaced = step(after, s.QueueView(QUEUE, workload=admitted))
    assert (replaced.status.phase, replaced.status.reason) == (Phase.QUEUED, Reason.WORKLOAD_REPLACED)
    assert "slice-0" in replaced.status.message and not replaced.create_pools


def test_a_hostile_pod_set_reads_as_a_difference_never_raises():
    job = queued_job()
    for hostile in (None, 3, {"name": 5, "template": []}, {"template": {"spec": {"containers": "x"}}}):
        facts = pod_set_facts(hostile)
        assert pod_sets_differences(job_pod_set_facts(job), (facts,))


# --- Kueue's decisions stand ------------------------------------------------------------------------------


def deactivated(reason, message, admitted=True):
    evicted = condition("Evicted", "True", reason, message)
    base = admitted_queue(evicted) if admitted else s.QueueView(QUEUE, workload=workload(evicted))
    return dataclasses.replace(base, workload=dataclasses.replace(base.workload, active=False))


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (
            "DeactivatedDueToRequeuingLimitExceeded",
            "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
        ),
        (
            "DeactivatedDueToMaximumExecutionTimeExceeded",
            "The workload is deactivated due to exceeding the maximum execution time",
        ),
        ("Deactivated", "The workload is deactivated"),  # an administrator's spec.active: false
    ],
)
def test_a_workload_kueue_or_an_admin_deactivated_stays_deactivated_with_kueues_reason(reason, message):
    job = queued_job(nodePool={"policy": "existing"})
    live = advance(job, running(job))
    decision = step(live, deactivated(reason, message), pods=pods(job, 0, "Running"))
    assert decision.workload.active is None  # never re-activated
    assert (decision.status.phase, decision.status.reason) == (Phase.QUEUED, reason)
    assert message in decision.status.message and "stays deactivated" in decision.status.message
    assert decision.delete_pods  # it stops
    later = step(advance(job, decision), deactivated(reason, message))
    assert later.workload.active is None and later.status.reason == reason


def test_an_inactive_workload_not_yet_evicted_runs_nothing():
    job = queued_job(nodePool={"policy": "existing"})
    queue = admitted_queue()
    inactive = dataclasses.replace(queue, workload=dataclasses.replace(queue.workload, active=False))
    decision = step(job, inactive)
    assert not decision.create_pods and decision.workload.active is None
    assert (decision.status.phase, decision.status.reason) == (Phase.QUEUED, "Deactivated")


def test_only_the_workload_the_operator_deactivated_is_activated_again():
    """The record is in the job's status (written by the operator alone), naming the Workload."""
    suspended = step(queued_job(runPolicy={"suspend": True}), admitted_queue())
    assert suspended.workload.active is False
    assert suspended.status.queue.deactivated_workload == "tpujob-train-abcde"
    ours = deactivated("Deactivated", "The workload is deactivated")
    resumed = step(queued_job(status=suspended.status), ours)
    assert resumed.workload.active is True and "stays deactivated" not in resumed.status.message
    # A record naming another Workload (an earlier one, replaced) proves nothing about this one.
    other = suspended.status.model_copy(deep=True)
    other.queue.deactivated_workload = "tpujob-train-older"
    assert step(queued_job(status=other), ours).workload.active is None
    # Seen active again: the record is dropped.
    active_again = step(queued_job(status=suspended.status), admitted_queue())
    assert active_again.status.queue.deactivated_workload is None


# --- a queued job holds nothing and is charged nothing ---------------------------------------------------


@pytest.mark.parametrize(
    ("gke_says", "recorded", "chips"),
    [
        ("RUNNING", "RUNNING", 16),  # evicted now: the pool is deleted in this pass, still held
        (s.POOL_STOPPING, s.POOL_STOPPING, 16),  # GKE deleting it: held until gone
        (s.POOL_MISSING, s.POOL_DELETED, 0),  # gone: recorded deleted, charged no more
    ],
)
def test_an_evicted_jobs_pools_are_recorded_deleted_once_gke_has_deleted_them(gke_says, recorded, chips):
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    live = advance(job, running(job))
    queue = admitted_queue(condition("Evicted", "True", "Preempted", "Preempted to accommodate a workload"))
    stopped = advance(job, step(live, queue, pods=pods(job, 0, "Running"), pools=ready_pools(job)))
    pool = (s.PoolView(0, naming.node_pool_name(job, 0), gke_says),)
    decision = step(stopped, queue, pools=pool)
    assert decision.status.phase == Phase.QUEUED
    assert [p.state for p in decision.status.node_pools] == [recorded]
    assert chips_held(job, decision.status) == chips


def test_a_queued_job_that_never_had_a_pool_records_none():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    never = (s.PoolView(0, naming.node_pool_name(job, 0), s.POOL_MISSING),)
    decision = step(job, s.QueueView(QUEUE, priority=PriorityFact()), pools=never)
    assert decision.status.node_pools == [] and chips_held(job, decision.status) == 0


class DiscoveryApi:
    """What KueueServed asks of the API server: the group's discovery, the Workload CRD."""

    def __init__(self, group, crd=None, crd_error=None, visibility=None):
        self.group, self.crd, self.crd_error, self.visibility = group, crd, crd_error, visibility

    def get_api_group(self, name):
        assert name in (c.KUEUE_GROUP, VISIBILITY_GROUP)
        found = self.group if name == c.KUEUE_GROUP else self.visibility
        if isinstance(found, Exception):
            raise found
        return found

    def get_crd(self, name):
        assert name == c.KUEUE_WORKLOAD_CRD
        if self.crd_error is not None:
            raise self.crd_error
        return self.crd


def test_discovery_finds_the_version_and_the_cap_and_says_when_kueue_is_not_served():
    from tpujob import kube
    from tpujob.reconciler.kueue import KueueServed

    served = KueueServed(DiscoveryApi(group("v1beta1", "v1beta2"), crd("v1beta2", 18)))  # type: ignore[arg-type]
    assert served.discover() == KueueApi("v1beta2", 18) == served.current
    # The CRD may not be read (RBAC): the fewest pod sets any version allows.
    forbidden = kube.ApiError(403, "Forbidden", b"")
    served = KueueServed(DiscoveryApi(group("v1beta1"), crd_error=forbidden))  # type: ignore[arg-type]
    assert served.discover() == KueueApi("v1beta1", 8)
    # Served, its Workload CRD not there yet (Kueue being installed): not known, rather than a wrong cap.
    installing = KueueServed(DiscoveryApi(group("v1beta2"), crd=None))  # type: ignore[arg-type]
    assert installing.discover() is None and "is not installed" in installing.problem
    gone = KueueServed(DiscoveryApi(None))  # type: ignore[arg-type]
    assert gone.discover() is None and gone.current is None and "v0.14 or later" in gone.problem


def test_a_queued_job_waits_while_the_version_served_is_not_known():
    from tpujob.reconciler.kueue import KueueReader

    reader = KueueReader(DiscoveryApi(None), enabled=True)  # type: ignore[arg-type]
    reader.served.discover()
    view = reader.view(queued_job(), [], reader.served.current, reader.served.problem)
    assert view is not None and not view.known and "v0.14 or later" in view.problem


def test_a_pods_ready_timeout_that_met_a_slice_still_provisioning_says_so_while_it_stands():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    provisioning = (s.PoolView(0, naming.node_pool_name(job, 0), "PROVISIONING"),)
    admitted = step(job, admitted_queue(), pools=provisioning)
    assert admitted.status.phase == Phase.PROVISIONING
    timeout = condition("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/wl")
    evicted = step(advance(job, admitted), admitted_queue(timeout), pools=provisioning)
    assert evicted.status.reason == "PodsReadyTimeout"
    assert "its slice was still being provisioned" in evicted.status.message
    assert "waitForPodsReady.timeout counts from the admission" in evicted.status.message
    later = step(advance(job, evicted), admitted_queue(timeout), pools=provisioning)
    assert "its slice was still being provisioned" in later.status.message
    # A running slice's timeout says nothing of provisioning.
    live = advance(job, running(job))
    ran = step(live, admitted_queue(timeout), pods=pods(job, 0, "Running"), pools=ready_pools(job))
    assert "provisioned" not in ran.status.message
