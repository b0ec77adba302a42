"""The operator on the test bed: real API server, scheduler and controller-manager, the real GKE
client against the simulated GKE, the simulated kubelet. Each test drives one job to its end: the pods of a
plain image end when the test says (kubelet.succeed/fail), the real trainer's when it is done."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from tests.manifests import base_job, plain_job
from tests.sandbox.helpers import create_pool, pool_request
from tpujob import tpu as tpus
from tpujob.api import constants as c
from tpujob_sandbox import wait_for


def succeed_all(jobs, kubelet, name, attempt=0):
    for pod in jobs.pods(name, attempt):
        kubelet.succeed(jobs.namespace, pod.metadata.name)


def env_of(pod):
    return {e.name: e.value for e in pod.spec.containers[0].env}


@pytest.mark.parametrize(
    ("tpu", "zone", "pools", "pods"),
    [
        ({"type": "v5e", "topology": "2x2"}, None, 1, 1),
        ({"type": "v5p", "topology": "2x2x4"}, None, 1, 4),
        # v6e is not offered in the operator's default zone (us-central1-a), but in us-central1-b.
        ({"type": "v6e", "topology": "4x4", "slices": 2}, "us-central1-b", 2, 8),
    ],
    ids=["single-host-v5e", "multi-host-v5p", "multislice-v6e"],
)
def test_job_runs_to_success_and_releases_its_pools(jobs, gke, kubelet, core, tpu, zone, pools, pods):
    created = time.time()
    jobs.create(plain_job("train", tpu=tpu, nodePool={"zone": zone} if zone else {}))
    running = jobs.wait_pods_running("train", pods)
    jobs.wait_phase("train", "Running")
    for pod in running:
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels[c.NODE_LABEL_TOPOLOGY] == tpu["topology"]
        env = env_of(pod)
        assert env["TPU_WORKER_ID"] == pod.metadata.labels[c.LABEL_WORKER]
        if tpu.get("slices", 1) > 1:
            assert env["MEGASCALE_NUM_SLICES"] == "2"
            assert env["MEGASCALE_SLICE_ID"] == pod.metadata.labels[c.LABEL_SLICE]
    assert core.read_namespaced_service("train", jobs.namespace).spec.cluster_ip == "None"
    succeed_all(jobs, kubelet, "train")
    status = jobs.wait_phase("train", "Succeeded")
    assert status["completionTime"]
    wait_for(lambda: not gke.node_pools(), timeout=30, what="the node pools to be deleted")
    wait_for(
        lambda: not [n for n in core.list_node().items if "tj-train" in n.metadata.name],
        timeout=30,
        what="the TPU nodes to go",
    )
    # Multislice: GKE serializes operations, so the second create may be refused and retried.
    assert len({r.body["nodePool"]["name"] for r in gke.recorded if r.rpc == "CreateNodePool"}) == pools
    assert jobs.wait_events("train", "Succeeded")  # posted after the status write
    assert_final_cost(jobs, "train", tpu, pools, created)


def unix(timestamp: str) -> float:
    return dt.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def assert_final_cost(jobs, name, tpu, pools, created):
    """status.cost once the pools are gone: no chips held, and chips x the seconds the pools were held, to
    the second. At most from the job's create to now (the test's clock, plus a second: status times are
    second-resolved); at least from when the pools were asked for (startTime; the last pool of a multislice
    job may wait for GKE's serialized operations: from runningTime) to completionTime."""

    def pools_deleted():
        status = jobs.status(name)
        return status if {p["state"] for p in status["nodePools"]} == {"Deleted"} else None

    status = wait_for(
        pools_deleted,
        timeout=30,
        what="the status to show the pools deleted",
        last_state=lambda: jobs.status(name),
    )
    chips = tpus.resolve_slice(tpu["type"], tpu["topology"]).chips * pools
    cost = status["cost"]
    assert cost["chips"] == 0 and unix(cost["accountedUntil"]) >= unix(status["completionTime"])
    held_from = status["startTime"] if pools == 1 else status["runningTime"]
    at_least = chips * (unix(status["completionTime"]) - unix(held_from))
    at_most = chips * (time.time() - created + 1)
    assert at_least <= cost["chipSeconds"] <= at_most, (cost, status)


def test_the_real_trainer_trains_to_its_last_step_exits_and_the_job_succeeds(jobs, gke, trainer_image):
    """The happy path with the trainer's own exit: the pod runs `python -m tpujob_trainer` with the env the
    operator set, trains its steps, leaves its progress line in the termination log and exits 0 by itself;
    the operator calls the job Succeeded and gives the pool back."""
    with jobs.recording_pods("train") as seen:  # the pod may be gone with its pool once the job succeeds
        jobs.create(base_job("train", trainer={"image": trainer_image, "args": ["--steps", "10"]}))
        status = jobs.wait_phase("train", "Succeeded", timeout=120)
        assert status["completionTime"] and status.get("restarts", 0) == 0
        (pod,) = seen.wait_finished(attempt=0)
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0, terminated
    (line,) = [x for x in terminated.message.splitlines() if x.startswith(c.PROGRESS_LINE_PREFIX)]
    assert json.loads(line[len(c.PROGRESS_LINE_PREFIX) :])["step"] == 10
    wait_for(lambda: not gke.node_pools(), timeout=30, what="the node pool to be deleted")
    assert jobs.wait_events("train", "Succeeded")  # posted after the status write


def test_worker_failure_restarts_the_group_then_succeeds(jobs, gke, kubelet):
    jobs.create(plain_job("train", tpu={"type": "v5p", "topology": "2x2x4"}))
    first = jobs.wait_pods_running("train", 4)
    kubelet.fail(jobs.namespace, first[1].metadata.name, exit_code=3)
    jobs.wait_pods_running("train", 4, attempt=1)
    succeed_all(jobs, kubelet, "train", attempt=1)
    status = jobs.wait_phase("train", "Succeeded")
    assert status["restartsByReason"] == {"WorkerFailed": 1}
    assert (status["restarts"], status["applicationRestarts"], status["attempt"]) == (1, 1, 1)
    warnings = jobs.wait_events("train", "WorkerFailed")
    assert "exit code 3" in warnings[0].message


def test_repeated_application_failures_end_in_backoff_limit_exceeded(jobs, gke, kubelet):
    jobs.create(plain_job("train", runPolicy={"maxRestarts": 1}))
    for attempt in (0, 1):
        (pod,) = jobs.wait_pods_running("train", 1, attempt=attempt)
        kubelet.fail(jobs.namespace, pod.metadata.name, exit_code=1)
    status = jobs.wait_phase("train", "Failed")
    assert status["reason"] == "BackoffLimitExceeded"
    wait_for(lambda: not gke.node_pools(), timeout=30, what="the node pool to be deleted after failure")


def test_preemption_restarts_without_spending_max_restarts(sandbox, jobs, gke, kubelet):
    jobs.create(plain_job("train", tpu={"type": "v5p", "topology": "2x2x4"}, runPolicy={"maxRestarts": 0}))
    jobs.wait_pods_running("train", 4)
    # Spot reclaim: the slice's VMs shut down gracefully, GKE recreates them a little later.
    sandbox.preempt_slice(jobs.status("train")["nodePools"][0]["name"], recreate_after=1)
    status = wait_for(
        lambda: (s := jobs.status("train")).get("restarts") and s,
        timeout=30,
        what="the restart after preemption",
    )
    assert status["restartsByReason"] == {"Preempted": 1}
    assert status.get("applicationRestarts", 0) == 0
    jobs.wait_pods_running("train", 4, attempt=1, timeout=90)
    succeed_all(jobs, kubelet, "train", attempt=1)
    assert jobs.wait_phase("train", "Succeeded")["restarts"] == 1


def test_quota_refusals_then_a_stockout_then_recovery(jobs, gke, kubelet):
    gke.inject_call_fault("quota", times=2)  # the create call itself refused twice (403)
    gke.set_capacity("us-central1-a", "ct5lp-hightpu-4t", 0)  # then accepted, but the zone is stocked out
    # Each refusal's reason lasts one backoff (1 s, then 2 s): read from a record of every status.
    with jobs.recording_job("train") as history:
        jobs.create(plain_job("train"))
        history.first_status(lambda status: status.get("reason") == "Stockout")
        gke.set_capacity("us-central1-a", "ct5lp-hightpu-4t", None)
        wait_for(
            lambda: jobs.status("train").get("phase") in ("Starting", "Running"),
            timeout=60,
            what="provisioning to recover",
        )
        assert {"Stockout", "QuotaExceeded"} <= {status.get("reason") for status in history.statuses()}
    (pod,) = jobs.wait_pods_running("train", 1)
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")


def test_job_deleted_mid_provisioning_leaves_nothing(jobs, gke, core):
    gke.inject_pool_fault("slow", provisioning_seconds=3 / gke.time_scale)
    jobs.create(plain_job("train", tpu={"type": "v5p", "topology": "2x2x4"}))
    wait_for(lambda: gke.calls["CreateNodePool"] >= 1, timeout=30, what="the pool create call")
    jobs.delete("train")
    wait_for(lambda: jobs.gone("train"), timeout=60, what="the TPUJob to be deleted")
    assert not gke.node_pools()
    wait_for(  # GKE removes a deleted pool's nodes after the pool (tests/e2e/test_crash.py finish)
        lambda: not [n for n in core.list_node().items if "tj-train" in n.metadata.name],
        timeout=30,
        what="the TPU nodes to go",
    )
    assert not jobs.pods("train")
    assert not core.list_namespaced_service(jobs.namespace).items


def test_existing_policy_uses_pools_made_elsewhere(jobs, gke, kubelet):
    create_pool(gke, pool_request(name="platform-v5e"))
    jobs.create(plain_job("train", nodePool={"policy": "existing"}))
    (pod,) = jobs.wait_pods_running("train", 1)
    assert gke.calls["CreateNodePool"] == 1  # only the platform team's
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")
    assert "platform-v5e" in gke.node_pools()  # not ours to delete
