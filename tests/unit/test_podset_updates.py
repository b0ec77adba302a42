"""Admission checks' pod set updates (Kueue pkg/podset/podset.go Merge) and provisioned capacity: a job
admitted through a ProvisioningRequest check runs on the provisioned nodes and makes no pool of its own."""

import dataclasses

import pytest

from tests.unit.test_queue import ADMITTED, FLAVOR, QUEUE, admission, queued_job, step, workload
from tpujob import status as s
from tpujob.api.spec import NodePoolPolicy
from tpujob.api.status import Phase
from tpujob.render.cluster import Cluster
from tpujob.render.placement import Placement
from tpujob.render.plan import pod
from tpujob.render.podset_updates import (
    CONSUME_PROVISIONING_REQUEST,
    PROVISIONING_CLASS,
    PodSetUpdate,
    PodSetUpdateConflict,
    merge,
    provisioned,
    updates_for,
    with_updates,
)
from tpujob.render.workload import job_pod_set_facts
from tpujob.status.provisioned import as_provisioned, workload_differences

QP = "queued-provisioning.gke.io"


def check(state="Ready", *updates, name="dws-prov"):
    return {"name": name, "state": state, "message": "", "podSetUpdates": list(updates)}


def prov_update(pod_set="slice-0", request="wl-dws-prov-1"):
    """What Kueue's provisioning controller writes (controller.go podSetUpdates)."""
    return {
        "name": pod_set,
        "annotations": {CONSUME_PROVISIONING_REQUEST: request, PROVISIONING_CLASS: QP},
    }


@pytest.mark.parametrize(
    ("base", "other", "what"),
    [
        (PodSetUpdate(annotations={"a": "1"}), PodSetUpdate(annotations={"a": "2"}), "annotations"),
        (PodSetUpdate(labels={"l": "x"}), PodSetUpdate(labels={"l": "y"}), "labels"),
        (PodSetUpdate(node_selector={"n": "x"}), PodSetUpdate(node_selector={"n": "y"}), "nodeSelector"),
    ],
)
def test_a_key_set_twice_to_different_values_is_a_conflict_named_by_field(base, other, what):
    with pytest.raises(PodSetUpdateConflict) as raised:
        merge(base, other)
    assert raised.value.what == what


def test_merge_adds_keys_keeps_equal_ones_and_never_duplicates_a_toleration():
    toleration = {"key": "k", "operator": "Exists", "effect": "NoSchedule"}
    merged = merge(
        PodSetUpdate(labels={"a": "1"}, node_selector={"n": "x"}, tolerations=(toleration,)),
        PodSetUpdate(labels={"a": "1", "b": "2"}, node_selector={"m": "y"}, tolerations=(dict(toleration),)),
    )
    assert merged.labels == {"a": "1", "b": "2"} and merged.node_selector == {"n": "x", "m": "y"}
    assert merged.tolerations == (toleration,)


def test_only_ready_checks_update_only_their_pod_set():
    checks = [check("Pending", prov_update()), check("Ready", prov_update("slice-1"), name="other")]
    assert updates_for(checks, "slice-0") == PodSetUpdate()
    assert updates_for(checks, "slice-1").provisioning_request == "wl-dws-prov-1"
    assert not provisioned(checks[:1]) and provisioned(checks)


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "slice-0", "labels": ["not", "a", "map"]},
        {"name": "slice-0", "nodeSelector": {"k": 3}},
        {"name": "slice-0", "tolerations": "Exists"},
    ],
)
def test_a_malformed_update_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"status\.admissionChecks\[0\]\.podSetUpdates\[slice-0\]"):
        updates_for([check("Ready", bad)], "slice-0")


def test_the_pods_carry_the_update_and_the_flavors_part():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    toleration = {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}
    update = {**prov_update(), "labels": {"team": "a"}, "tolerations": [toleration]}
    placement = with_updates(
        job, 0, Placement(node_selector={"example.com/team": "a"}), [check("Ready", update)]
    )
    worker = pod(job, Cluster(), 0, 0, placement=placement)
    assert worker["metadata"]["annotations"][CONSUME_PROVISIONING_REQUEST] == "wl-dws-prov-1"
    assert worker["metadata"]["annotations"][PROVISIONING_CLASS] == QP
    assert worker["metadata"]["labels"]["team"] == "a"
    assert worker["spec"]["nodeSelector"]["example.com/team"] == "a"
    assert toleration in worker["spec"]["tolerations"]


def test_an_update_for_another_tpu_conflicts_with_the_jobs_own_selector():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    update = {"name": "slice-0", "nodeSelector": {"cloud.google.com/gke-tpu-topology": "4x4x4"}}
    with pytest.raises(PodSetUpdateConflict) as raised:
        with_updates(job, 0, Placement(), [check("Ready", update)])
    assert (raised.value.what, raised.value.key) == ("nodeSelector", "cloud.google.com/gke-tpu-topology")


def provisioned_queue(*updates):
    return s.QueueView(
        QUEUE,
        workload=workload(*ADMITTED, admission=admission(), admission_checks=(check("Ready", *updates),)),
        flavors={FLAVOR.name: FLAVOR},
    )


def test_a_job_admitted_on_provisioned_capacity_makes_no_pool_and_its_pods_consume_the_request():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    queue = provisioned_queue(prov_update())
    assert as_provisioned(job, [queue.workload]).spec.node_pool.policy == NodePoolPolicy.existing
    effective = as_provisioned(job, [queue.workload])
    decision = step(effective, queue)
    assert decision.create_pools == [] and decision.create_pods == s.expected_workers(job)
    assert decision.placement[0].annotations[CONSUME_PROVISIONING_REQUEST] == "wl-dws-prov-1"
    worker = pod(effective, Cluster(), 0, 0, placement=decision.placement[0])
    assert "cloud.google.com/gke-nodepool" not in worker["spec"]["nodeSelector"]  # GKE's pool, not ours


@pytest.mark.parametrize(
    "checks",
    [
        (),  # no admission check: the operator makes its pool, as before
        (check("Ready", {"name": "slice-0", "labels": {"team": "a"}}),),  # an update, but no provisioning
        (check("Pending", prov_update()),),  # not Ready (Kueue would not have admitted it either)
    ],
)
def test_without_a_ready_provisioning_check_the_job_makes_its_own_pool(checks):
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    view = workload(*ADMITTED, admission=admission(), admission_checks=checks)
    assert as_provisioned(job, [view]) is job


def test_a_provisioned_job_keeps_the_workload_made_before_its_pools_selector_went():
    """The Workload was made from the job as written (its own pool's selector and toleration); run on
    provisioned capacity the job has lost them (as_provisioned): still the same Workload, not replaced. A
    replaced one asked for capacity again, for ever (found in e2e when the equivalence on whole pod sets met
    the provisioning check). A job edited to another TPU still differs."""
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    view = dataclasses.replace(provisioned_queue(prov_update()).workload, pod_sets=job_pod_set_facts(job))
    effective = as_provisioned(job, [view])
    assert job_pod_set_facts(effective) != job_pod_set_facts(job)  # the own pool's selector went
    assert workload_differences(effective, view) == []
    edited = as_provisioned(queued_job(tpu={"type": "v5p", "topology": "2x2x2"}), [view])
    assert workload_differences(edited, view)


def test_another_jobs_workload_does_not_count_an_evicted_one_does_until_its_admission_is_cleared():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    checks = (check("Ready", prov_update()),)
    other = s.WorkloadView(
        name="x", resource_version="1", owner_uid="someone-else", conditions=ADMITTED, admission_checks=checks
    )
    assert as_provisioned(job, [other]) is job
    evicted = workload(
        *ADMITTED,
        {"type": "Evicted", "status": "True", "reason": "Preempted"},
        admission=admission(),
        admission_checks=checks,
    )
    # Stopping on the provisioned nodes: still no pool of its own (none to delete), its shape unchanged.
    assert as_provisioned(job, [evicted]).spec.node_pool.policy == NodePoolPolicy.existing
    cleared = workload(
        {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
        admission_checks=(check("Pending"),),
    )
    assert as_provisioned(job, [cleared]) is job


def test_an_update_the_job_cannot_honour_fails_it_naming_the_field_and_the_fix():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    update = {**prov_update(), "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}}
    decision = step(as_provisioned(job, [provisioned_queue(update).workload]), provisioned_queue(update))
    assert (decision.status.phase, decision.status.reason) == (Phase.FAILED, "FailedToStart")
    assert "nodeSelector[cloud.google.com/gke-tpu-accelerator]='tpu-v6e-slice'" in decision.status.message
    assert "spec.tpu" in decision.status.message
    assert decision.create_pools == [] and decision.create_pods == []
    assert any(e.type == "Warning" and e.reason == "FailedToStart" for e in decision.events)
    finished = next(c for c in decision.workload.conditions if c["type"] == "Finished")
    assert (finished["status"], finished["reason"]) == ("True", "FailedToStart")


def tas_admission():
    found = admission()
    found["podSetAssignments"][0]["topologyAssignment"] = {
        "levels": ["kubernetes.io/hostname"],
        "slices": [{"domainCount": 4, "valuesPerLevel": [{"universal": "n"}], "podCounts": {"universal": 1}}],
    }
    return found


def test_a_topology_aware_admission_refuses_a_job_that_creates_its_pools_naming_the_fix():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    queue = s.QueueView(
        QUEUE, workload=workload(*ADMITTED, admission=tas_admission()), flavors={FLAVOR.name: FLAVOR}
    )
    decision = step(job, queue)
    assert (decision.status.phase, decision.status.reason) == (Phase.FAILED, "InvalidForKueue")
    assert "topologyName" in decision.status.message and "policy: existing" in decision.status.message
    assert decision.create_pools == [] and decision.create_pods == []


def test_a_topology_aware_admission_on_provisioned_capacity_runs():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    view = workload(*ADMITTED, admission=tas_admission(), admission_checks=(check("Ready", prov_update()),))
    queue = s.QueueView(QUEUE, workload=view, flavors={FLAVOR.name: FLAVOR})
    decision = step(as_provisioned(job, [view]), queue)
    assert decision.create_pods == s.expected_workers(job) and decision.create_pools == []
