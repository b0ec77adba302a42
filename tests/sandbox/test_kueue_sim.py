"""Kueue in the test bed: its real CRDs on the 1.36 CRD server (with Kueue's own CEL) and the simulated
Kueue admitting, queueing, preempting and timing out hand-written Workloads. The test plays the job
integration's part (tpujob's operator in production): it creates the Workloads, clears an evicted one's
admission, and reports PodsReady."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client as k8s

from tpujob_sandbox import wait_for
from tpujob_sandbox.kueue import crds
from tpujob_sandbox.kueue.objects import GROUP, VERSIONS, find_condition, format_time, now_utc

TPU = "google.com/tpu"
V5E = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "2x2",
}


VERSION = VERSIONS[0]  # the newest release's, the `kueue` fixture's default


def workload_body(name: str, queue: str, tpus: int = 4, hosts: int = 1, priority: int = 0) -> dict[str, Any]:
    """A Workload as a job integration writes it: one podSet per slice, Kueue's finalizer (no owner: the
    test is the job controller, and Kueue only finalizes orphans that are being deleted)."""
    pod = {
        "containers": [
            {"name": "trainer", "image": "t", "resources": {"requests": {TPU: str(tpus), "cpu": "1"}}}
        ],
        "nodeSelector": V5E,
        "restartPolicy": "Never",
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": name, "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [{"name": "slice-0", "count": hosts, "template": {"spec": pod}}],
        },
    }


@pytest.fixture
def custom(sandbox) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(sandbox.api_client)


@pytest.fixture
def queue(kueue, namespace) -> str:
    """An 8-chip v5e ClusterQueue that preempts lower priorities, and its LocalQueue in the namespace."""
    flavor = kueue.resource_flavor(V5E)
    cq = kueue.cluster_queue({flavor: {TPU: 8, "cpu": 100}}, preemption="LowerPriority")
    return kueue.local_queue(namespace, cq)


def create(custom, namespace: str, body: dict) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", body)


def patch_status(custom, namespace: str, name: str, status: dict) -> None:
    custom.api_client.call_api(
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/workloads/{name}/status",
        "PATCH",
        header_params={"Content-Type": "application/merge-patch+json"},
        body={"status": status},
        auth_settings=["BearerToken"],
    )


def clear_admission(kueue, custom, namespace: str, name: str) -> None:
    """jobframework step 6, as the operator does it after stopping its pods."""
    wl = kueue.workload(namespace, name)
    evicted = find_condition(wl, "Evicted")
    now = format_time(now_utc())
    kept = [
        c for c in wl["status"]["conditions"] if c["type"] not in ("QuotaReserved", "Admitted", "Requeued")
    ]
    requeued = evicted["reason"] == "Preempted"
    conditions = [
        *kept,
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": evicted["message"],
            "lastTransitionTime": now,
        },
        {
            "type": "Admitted",
            "status": "False",
            "reason": "NoReservation",
            "message": "The workload has no reservation",
            "lastTransitionTime": now,
        },
        {
            "type": "Requeued",
            "status": str(requeued),
            "reason": evicted["reason"],
            "message": evicted["message"],
            "lastTransitionTime": now,
        },
    ]
    patch_status(custom, namespace, name, {"admission": None, "conditions": conditions})


def test_a_workload_that_fits_is_admitted_and_the_queues_count_it(kueue, custom, namespace, queue):
    create(custom, namespace, workload_body("fits", queue, hosts=2))
    kueue.wait_condition(namespace, "fits", "Admitted")
    wl = kueue.workload(namespace, "fits")
    assert find_condition(wl, "QuotaReserved")["message"].startswith("Quota reserved in ClusterQueue cq-")
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert (assignment["name"], assignment["count"], assignment["resourceUsage"]) == (
        "slice-0",
        2,
        {TPU: "8", "cpu": "2"},
    )

    def counted() -> dict | None:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", queue)
        return found if (found.get("status") or {}).get("admittedWorkloads") == 1 else None

    lq = wait_for(counted, timeout=10, what="the LocalQueue to count the admitted workload")
    assert lq["status"]["reservingWorkloads"] == 1


def test_a_workload_that_does_not_fit_waits_with_kueues_message(kueue, custom, namespace, queue):
    create(custom, namespace, workload_body("first", queue, hosts=2))
    kueue.wait_condition(namespace, "first", "Admitted")
    create(custom, namespace, workload_body("second", queue, tpus=4))
    found = kueue.wait_condition(namespace, "second", "QuotaReserved", status="False", reason="Pending")
    assert found["message"].startswith(
        "couldn't assign flavors to pod set slice-0: insufficient unused quota"
    )
    assert found["message"].endswith("4 more needed")


def test_a_missing_local_queue_is_reported(kueue, custom, namespace):
    create(custom, namespace, workload_body("lost", "nope"))
    found = kueue.wait_condition(namespace, "lost", "QuotaReserved", status="False", reason="Inadmissible")
    assert found["message"] == "LocalQueue nope doesn't exist"


def test_preemption_waits_for_the_victims_quota(kueue, custom, namespace, queue):
    create(custom, namespace, workload_body("low", queue, hosts=2, priority=1))
    kueue.wait_condition(namespace, "low", "Admitted")
    create(custom, namespace, workload_body("high", queue, hosts=2, priority=100))
    evicted = kueue.wait_condition(namespace, "low", "Evicted", reason="Preempted")
    assert "due to prioritization in the ClusterQueue" in evicted["message"]
    assert kueue.wait_condition(namespace, "low", "Preempted")["reason"] == "InClusterQueue"
    pending = kueue.wait_condition(namespace, "high", "QuotaReserved", status="False")
    assert pending["message"].endswith("Pending the preemption of 1 workload(s)")
    assert not kueue.workload(namespace, "high")["status"].get("admission")  # the victim still holds it
    clear_admission(kueue, custom, namespace, "low")
    kueue.wait_condition(namespace, "high", "Admitted")


def test_pods_not_ready_in_time_are_evicted_and_requeued_after_backoff(kueue, custom, namespace, queue):
    # The timeout runs from admission: 4 s leaves this test time to report PodsReady on a loaded machine.
    kueue.set_wait_for_pods_ready(timeout=4, backoff_base=2, backoff_max=10)
    create(custom, namespace, workload_body("slow", queue))
    kueue.wait_condition(namespace, "slow", "Admitted")
    evicted = kueue.wait_condition(namespace, "slow", "Evicted", reason="PodsReadyTimeout", timeout=15)
    assert evicted["message"] == f"Exceeded the PodsReady timeout {namespace}/slow"
    state = kueue.workload(namespace, "slow")["status"]["requeueState"]
    assert state["count"] == 1 and state["requeueAt"]
    clear_admission(kueue, custom, namespace, "slow")
    requeued = kueue.wait_condition(namespace, "slow", "Requeued", reason="BackoffFinished", timeout=15)
    assert requeued["message"] == "The workload backoff was finished"
    kueue.wait_condition(namespace, "slow", "Admitted")
    # This time the job controller reports its pods ready: no second eviction.
    now = format_time(now_utc())
    ready = {
        "type": "PodsReady",
        "status": "True",
        "reason": "PodsReady",
        "message": "All pods reached readiness and the workload is running",
        "lastTransitionTime": now,
    }
    conditions = [
        c for c in kueue.workload(namespace, "slow")["status"]["conditions"] if c["type"] != "PodsReady"
    ]
    patch_status(custom, namespace, "slow", {"conditions": [*conditions, ready]})
    # Past the 4 s timeout, and a pass of the simulator after that: still admitted.
    deadline, passes = time.monotonic() + 5, kueue.simulator.passes
    wait_for(
        lambda: time.monotonic() > deadline and kueue.simulator.passes > passes + 1,
        timeout=15,
        what="the simulator to look again after the PodsReady timeout",
    )
    assert find_condition(kueue.workload(namespace, "slow"), "Evicted")["status"] == "False"
    assert find_condition(kueue.workload(namespace, "slow"), "Admitted")["status"] == "True"


def test_every_kueue_crd_installs_and_kueues_cel_judges_workloads(kueue, custom, namespace, sandbox):
    api = k8s.ApiextensionsV1Api(sandbox.api_client)
    names = {d.metadata.name for d in api.list_custom_resource_definition().items if d.spec.group == GROUP}
    assert names == {d["metadata"]["name"] for d in crds.load_crds()} and len(names) == 11
    body = workload_body("invalid", "queue")
    body["spec"]["priorityClassRef"] = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": "high"}
    del body["spec"]["priority"]
    with pytest.raises(k8s.ApiException) as refused:
        create(custom, namespace, body)
    assert refused.value.status == 422
    assert "priority should not be nil when priorityClassRef is set" in refused.value.body


def test_without_kueue_the_group_is_not_served(no_kueue, sandbox):
    assert not crds.group_served(sandbox.api_client)
