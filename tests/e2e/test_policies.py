"""runPolicy on the test bed: suspend and resume, activeDeadlineSeconds, ttlSecondsAfterFinished."""

from __future__ import annotations

from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob_sandbox import wait_for


def patch_spec(jobs, name, spec):
    jobs.custom.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, jobs.namespace, c.PLURAL, name, {"spec": spec}
    )


def test_suspend_releases_pods_and_pools_and_resume_runs_again(jobs, gke, kubelet):
    jobs.create(plain_job("train"))
    jobs.wait_pods_running("train", 1)
    patch_spec(jobs, "train", {"runPolicy": {"suspend": True}})
    jobs.wait_phase("train", "Suspended")
    wait_for(lambda: not gke.node_pools(), timeout=30, what="the node pool to be deleted on suspend")
    wait_for(lambda: not jobs.pods("train"), timeout=30, what="the pods to be deleted on suspend")
    patch_spec(jobs, "train", {"runPolicy": {"suspend": False}})
    (pod,) = jobs.wait_pods_running("train", 1, attempt=1)
    # The pool came back (a create refused while GKE still deleted the old one is retried).
    assert len(gke.node_pools()) == 1 and gke.calls["DeleteNodePool"] >= 1
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    status = jobs.wait_phase("train", "Succeeded")
    assert status.get("restarts", 0) == 0  # a suspension is not a restart


def test_active_deadline_fails_the_job_and_releases_the_pools(jobs, gke):
    jobs.create(plain_job("train", runPolicy={"activeDeadlineSeconds": 4}))
    wait_for(lambda: gke.calls["CreateNodePool"], timeout=30, what="the pool create call")
    status = jobs.wait_phase("train", "Failed", timeout=60)
    assert status["reason"] == "DeadlineExceeded"
    wait_for(lambda: not gke.node_pools(), timeout=30, what="the node pool to be deleted")
    wait_for(
        lambda: all(p.metadata.deletion_timestamp or p.status.phase != "Running" for p in jobs.pods("train")),
        timeout=30,
        what="no pod of the job left running",
    )


def test_ttl_deletes_the_finished_job(jobs, gke, kubelet):
    # The job may be gone 1 s after it succeeded (the TTL counts from a completionTime in whole seconds):
    # its Succeeded status is read from a record, not a poll that may come after the deletion.
    with jobs.recording_job("train") as history:
        jobs.create(plain_job("train", runPolicy={"ttlSecondsAfterFinished": 2}))
        (pod,) = jobs.wait_pods_running("train", 1)
        kubelet.succeed(jobs.namespace, pod.metadata.name)
        history.first_status(lambda status: status.get("phase") == "Succeeded")
    wait_for(lambda: jobs.gone("train"), timeout=30, what="the TTL to delete the job")
    wait_for(lambda: not gke.node_pools(), timeout=30, what="no node pool left")
