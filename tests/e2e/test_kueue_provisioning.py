"""Kueue's ProvisioningRequest admission check (Dynamic Workload Scheduler, queued provisioning) with
TPUJobs: Kueue asks GKE for the slice's nodes through a ProvisioningRequest before it admits the Workload,
and the job runs on those nodes, never on a second pool of its own (the team would pay for its TPUs twice).
Kueue's check controller is simulated from its source (tpujob_sandbox.kueue.provisioning), GKE's queued
provisioning from its documentation (tpujob_sandbox.gke.queued_provisioning)."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.e2e.test_kueue import condition, pools_of, queued, workload_of
from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob.render.podset_updates import CONSUME_PROVISIONING_REQUEST, PROVISIONING_CLASS
from tpujob_sandbox import wait_for
from tpujob_sandbox.gke.queued_provisioning import CLASS, QUEUED_LABEL

SLICES = 2
V5E_4X4 = {"type": "v5e", "topology": "4x4", "slices": SLICES}  # 4 hosts of 4 chips a slice
LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "4x4",
}
HOSTS = 4


def dws_queue(kueue, namespace: str, **check) -> str:
    flavor = kueue.resource_flavor(node_labels=LABELS, prefix="v5e-4x4")
    cluster_queue = kueue.cluster_queue(
        {flavor: {c.TPU_RESOURCE: 16 * SLICES}}, admission_checks=[kueue.provisioning_check(**check)]
    )
    return kueue.local_queue(namespace, cluster_queue)


def test_a_provisioned_job_runs_on_gkes_queued_pools_one_per_slice_and_makes_none(
    jobs, gke, kubelet, provisioning_requests, core
):
    kueue = provisioning_requests
    queue = dws_queue(kueue, jobs.namespace)
    jobs.create(queued(plain_job("dws", tpu=V5E_4X4), queue))
    running = jobs.wait_pods_running("dws", SLICES * HOSTS, timeout=120)
    made = list(gke.queued_provisioning.created)
    # One pool per slice in all: GKE's, for the request; the operator asked GKE for none.
    assert len(made) == SLICES, made
    assert gke.calls_received().get("CreateNodePool", 0) == 0
    assert pools_of(gke, "dws") == []
    assert sorted(p for p in gke.node_pools() if p in made) == sorted(made)
    name = workload_of(jobs, kueue, "dws")["metadata"]["name"]
    for pod in running:
        annotations = pod.metadata.annotations or {}
        assert annotations[PROVISIONING_CLASS] == CLASS
        assert annotations[CONSUME_PROVISIONING_REQUEST].startswith(f"{name}-")
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels[c.NODE_LABEL_NODEPOOL] in made
        assert node.metadata.labels[QUEUED_LABEL] == "true"
    assert condition(workload_of(jobs, kueue, "dws"), "Admitted")["status"] == "True"
    for pod in running:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("dws", "Succeeded", timeout=60)
    assert jobs.status("dws").get("nodePools", []) == []  # nothing of its own to count or delete
    # The Workload finished: Kueue deletes its request, and GKE the request's pools.
    wait_for(
        lambda: not set(made) & set(gke.node_pools()),
        timeout=60,
        what="GKE to delete the provisioned pools once the request is gone",
        last_state=lambda: sorted(gke.node_pools()),
    )
    assert gke.calls_received().get("CreateNodePool", 0) == 0


def test_a_failed_request_is_rejected_and_kueue_deactivates_the_workload(jobs, gke, provisioning_requests):
    kueue = provisioning_requests
    queue = dws_queue(kueue, jobs.namespace, backoff_limit=0)
    gke.queued_provisioning.fail_next("no TPU capacity for the request in us-central1-a")
    jobs.create(queued(plain_job("nocap", tpu=V5E_4X4), queue))
    status = wait_for(
        lambda: "Rejected" in (s := jobs.status("nocap")).get("message", "") and s,
        timeout=120,
        what="the job to say Kueue evicted it for the rejected check",
        last_state=lambda: jobs.status("nocap"),
    )
    assert status["phase"] == "Queued"
    assert status["reason"] == "DeactivatedDueToAdmissionCheck"
    assert "no TPU capacity for the request" in status["message"]
    assert gke.calls_received().get("CreateNodePool", 0) == 0 and pools_of(gke, "nocap") == []
    assert jobs.pods("nocap") == []
    # Kueue's decision stands: Kueue sets spec.active false after its eviction's condition, and the operator
    # (which activates only a Workload it deactivated itself, when it suspended the job) leaves it so.
    wait_for(
        lambda: workload_of(jobs, kueue, "nocap")["spec"]["active"] is False,
        timeout=30,
        what="the Workload deactivated by Kueue",
    )


def test_an_expired_booking_before_admission_is_rejected_and_its_pools_go(jobs, gke, provisioning_requests):
    """The booking of a provisioned request expires (GKE: the pods did not come in time) while the Workload
    still waits for another admission check: Kueue's provisioning controller (controller.go syncCheckStates,
    case isBookingExpired, !workload.IsAdmitted) retries within retryStrategy.backoffLimitCount, else rejects
    the check, and the workload controller deactivates the Workload (reconcileCheckBasedEviction). The job
    stays queued with Kueue's reason, made no pool of its own, and GKE's pools for the request are gone."""
    kueue = provisioning_requests
    flavor = kueue.resource_flavor(node_labels=LABELS, prefix="v5e-4x4")
    # A second check that nobody marks Ready (a team's own approval controller, say): the Workload keeps its
    # quota reservation, provisioned, but is not admitted while the booking runs out.
    approval = kueue._create_cluster(
        "admissionchecks", "AdmissionCheck", "approval", {"controllerName": "example.com/approval"}
    )
    cluster_queue = kueue.cluster_queue(
        {flavor: {c.TPU_RESOURCE: 16 * SLICES}},
        admission_checks=[kueue.provisioning_check(backoff_limit=0), approval],
    )
    queue = kueue.local_queue(jobs.namespace, cluster_queue)
    earlier = len(gke.queued_provisioning.created)  # the session's other tests' requests
    jobs.create(queued(plain_job("expiry", tpu=V5E_4X4), queue))

    def provisioned():
        try:
            found = workload_of(jobs, kueue, "expiry")
        except k8s.ApiException as error:
            if error.status == 404:  # not made yet
                return None
            raise
        states = (found.get("status") or {}).get("admissionChecks") or []
        return any(s.get("state") == "Ready" for s in states) and found

    workload = wait_for(
        provisioned,
        timeout=120,
        what="the provisioning check Ready (GKE made the request's pools)",
        last_state=lambda: jobs.status("expiry"),
    )
    made = list(gke.queued_provisioning.created[earlier:])
    assert len(made) == SLICES and set(made) <= set(gke.node_pools())
    assert condition(workload, "Admitted").get("status") != "True"
    assert jobs.status("expiry")["phase"] == "Queued" and jobs.pods("expiry") == []
    ready = next(s for s in workload["status"]["admissionChecks"] if s.get("state") == "Ready")
    request = ready["podSetUpdates"][0]["annotations"][CONSUME_PROVISIONING_REQUEST]
    gke.queued_provisioning.expire(jobs.namespace, request, "the pods did not arrive within the booking")
    status = wait_for(
        lambda: (s := jobs.status("expiry")).get("reason") == "DeactivatedDueToAdmissionCheck" and s,
        timeout=60,
        what="the job to say Kueue deactivated its Workload for the rejected check",
        last_state=lambda: jobs.status("expiry"),
    )
    assert status["phase"] == "Queued"
    assert "the pods did not arrive within the booking" in status["message"]
    wait_for(
        lambda: workload_of(jobs, kueue, "expiry")["spec"]["active"] is False,
        timeout=30,
        what="the Workload deactivated by Kueue, and left so",
    )
    wait_for(
        lambda: not set(made) & set(gke.node_pools()),
        timeout=60,
        what="GKE to delete the expired request's pools",
        last_state=lambda: sorted(gke.node_pools()),
    )
    assert gke.calls_received().get("CreateNodePool", 0) == 0 and pools_of(gke, "expiry") == []
    assert jobs.pods("expiry") == [] and jobs.status("expiry").get("nodePools", []) == []
