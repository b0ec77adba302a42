"""The operator against GKE as GKE behaves (the simulated GKE's models, see tpujob_sandbox.gke): release
channels, asynchronous stockouts and quota that GKE retries itself, permanent refusals, provisioning
timeouts, a misconfigured zone, unschedulable pods, tpu7x workload policies and spot reclaim's 15 s."""

from __future__ import annotations

import os
import time

from tests.manifests import LIGHT_TRAINING, base_job, plain_job
from tests.sandbox.helpers import create_pool, pool_request
from tpujob_sandbox import EXIT_CODE_SIGTERM, OperatorProcess, log_tail, operator_env, wait_for

V5P_MULTI_HOST = {"type": "v5p", "topology": "2x2x2"}  # 2 hosts in us-central1-a, the operator's zone


def succeed_all(jobs, kubelet, name: str, count: int) -> None:
    for pod in jobs.wait_pods_running(name, count, timeout=60):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase(name, "Succeeded")


def test_a_create_job_runs_on_a_release_channel_cluster_with_auto_upgrade_on(jobs, gke, kubelet):
    cluster = gke.client().get_cluster(name=gke.parent)
    assert cluster.release_channel.channel.name == "REGULAR"  # the default of a new GKE cluster
    jobs.create(plain_job(tpu=V5P_MULTI_HOST))
    succeed_all(jobs, kubelet, "train", 2)
    (create,) = [call for call in gke.recorded if call.rpc == "CreateNodePool"]
    assert create.body["nodePool"]["management"]["autoUpgrade"] is True


def test_a_stockout_gke_retries_shows_stockout_throughout_without_churn_and_succeeds_later(
    jobs, gke, kubelet
):
    gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", 0)
    # GKE still retries when capacity returns, however loaded the machine (10 hours of GKE time, 72 s here; an
    # hour, 7.2 s, ran out under two pytest workers and the create was asked for again)
    gke.pools.retry_window_seconds = 36000
    jobs.create(plain_job(tpu=V5P_MULTI_HOST))
    status = wait_for(
        lambda: (st := jobs.status("train")).get("reason") == "Stockout" and st,
        timeout=30,
        what="the stockout in the status",
    )
    assert "GCE_STOCKOUT" in status["message"]  # GKE's own words
    assert status["nodePools"][0]["condition"] == "GCE_STOCKOUT"
    # GKE retries about every 4 minutes of GKE time for 35 minutes: 6 retries later the status still says
    # why, and the pool was neither deleted nor asked for again.
    pool = status["nodePools"][0]["name"]

    def six_retries_later() -> bool:
        assert jobs.status("train")["reason"] == "Stockout"
        return gke.pools.attempts[pool] >= 6

    wait_for(six_retries_later, timeout=60, interval=0.2, what="6 retries by GKE")
    assert (gke.calls["CreateNodePool"], gke.calls["DeleteNodePool"]) == (1, 0)
    assert jobs.wait_events("train", "Stockout")[0].type == "Warning"

    gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", None)  # capacity is back
    succeed_all(jobs, kubelet, "train", 2)
    assert (gke.calls["CreateNodePool"], gke.calls["DeleteNodePool"]) == (1, 1)
    # One warning for the whole stockout, not one per retry: every Event before the job's Succeeded one.
    assert [e.reason for e in jobs.events_through("train", "Succeeded")].count("Stockout") == 1


def test_an_asynchronous_quota_failure_shows_quota_exceeded(jobs, gke, kubelet):
    gke.set_quota("us-central1", "ct5p-hightpu-4t", 4)  # the slice needs 8 chips
    jobs.create(plain_job(tpu=V5P_MULTI_HOST))
    status = wait_for(
        lambda: (st := jobs.status("train")).get("reason") == "QuotaExceeded" and st,
        timeout=30,
        what="the quota failure in the status",
    )
    failed_at = time.monotonic()
    assert "GCE_QUOTA_EXCEEDED" in status["message"]
    # GKE ended the create at once (it does not wait for quota as for capacity): the operator gives the pool
    # back and asks again on the refusals' backoff (1 s, then 2 s on the test bed), not at every poll.
    wait_for(lambda: gke.calls["CreateNodePool"] >= 3, timeout=60, what="the third create")
    waited = time.monotonic() - failed_at
    print(f"the third create came {waited:.1f} s after the quota failure showed (backoff 1 + 2 s)")
    assert waited >= 1 + 2 - 1
    gke.set_quota("us-central1", "ct5p-hightpu-4t", None)  # the administrator raised the quota
    succeed_all(jobs, kubelet, "train", 2)


def test_a_quota_refusal_shows_quota_exceeded_in_gkes_words_and_is_asked_again_with_a_backoff(
    jobs, gke, kubelet
):
    """GKE's synchronous quota refusal, as it sends it: 403 PERMISSION_DENIED marked only by its words. The
    job shows QuotaExceeded quoting GKE (not the client's request line), and the create is asked again
    after 1, 2, 4 s (TPUJOB_REFUSED_BACKOFF_SECONDS is 1 on the test bed, doubling), not at every poll."""
    gke.inject_call_fault("quota", times=3)
    jobs.create(plain_job("quota"))
    status = wait_for(
        lambda: (st := jobs.status("quota")).get("reason") == "QuotaExceeded" and st,
        timeout=30,
        what="the quota refusal in the status",
    )
    refused_at = time.monotonic()
    # Which quota to raise and where, then GKE's own words (not the client's request line).
    assert status["message"].startswith("raise quota TPU_LITE_PODSLICE_V5 in region us-central1 ")
    assert "GKE: Insufficient regional quota to satisfy request: resource" in status["message"]
    wait_for(lambda: gke.calls["CreateNodePool"] == 4, timeout=60, what="three refusals, then the create")
    waited = time.monotonic() - refused_at
    print(f"the fourth create came {waited:.1f} s after the first refusal showed (backoff 1 + 2 + 4 s)")
    assert waited >= 1 + 2 + 4 - 1.5  # at the 0.2 s poll, without a backoff, it would be under a second
    succeed_all(jobs, kubelet, "quota", 1)


def test_a_job_whose_tpu_the_operators_zone_lacks_is_refused_at_validation_naming_gke_zone(jobs, gke):
    # The operator's zone (us-central1-a, the test bed's gke.zone) offers v5e and v5p, not v6e: a v6e job that
    # names no zone would have every pool refused by GKE, so it is refused before any pool is asked for.
    jobs.create(plain_job(tpu={"type": "v6e", "topology": "2x2"}))
    status = jobs.wait_phase("train", "Failed", timeout=30)
    assert status["reason"] == "InvalidSpec"
    assert "spec.nodePool.zone: not set, so the pools go to us-central1-a" in status["message"]
    assert "chart value gke.zone, env TPUJOB_GKE_ZONE" in status["message"]
    assert "which does not offer v6e TPUs" in status["message"]
    assert gke.calls["CreateNodePool"] == 0


def test_a_permanent_refusal_shows_node_pool_rejected_with_gke_message_and_backs_off(jobs, gke):
    # us-east5-a offers v5p, but is not in the cluster's region (us-central1): GKE refuses the request
    # itself (400 INVALID_ARGUMENT); the operator checks a spec's zone against the TPU, not the region.
    jobs.create(plain_job(tpu={"type": "v5p", "topology": "2x2x1"}, nodePool={"zone": "us-east5-a"}))
    status = wait_for(
        lambda: (st := jobs.status("train")).get("reason") == "NodePoolRejected" and st,
        timeout=30,
        what="the refusal in the status",
    )
    assert 'Node location "us-east5-a" is not in the cluster\'s region "us-central1"' in status["message"]
    condition = next(c for c in status["conditions"] if c["type"] == "NodePoolsReady")
    assert condition["reason"] == "NodePoolRejected"
    event = wait_for(
        lambda: next((e for e in jobs.events("train") if e.reason == "NodePoolRejected"), None),
        timeout=10,
        what="the Warning event",
    )
    assert event.type == "Warning" and "us-east5-a" in event.message
    # Resyncs (every 2 s here) look at GKE again, but do not ask for the pool again inside the 30 s backoff.
    # The refusal does not name the pool's upgrade exclusion, so the pool is not asked for again without it:
    # one create per backoff step.
    looks = gke.calls["GetNodePool"]
    wait_for(lambda: gke.calls["GetNodePool"] >= looks + 3, timeout=30, what="three more passes")
    creates = [c.body["nodePool"] for c in gke.recorded if c.rpc == "CreateNodePool"]
    assert ["maintenancePolicy" in body for body in creates] == [True]
    # No UpgradeShieldRefused: the pass that asked has ended (three more passes since), and a later Event is
    # posted after whatever it decided.
    events = events_decided_so_far(jobs, "train")
    assert not [e for e in events if e.reason == "UpgradeShieldRefused"], events


def events_decided_so_far(jobs, name: str) -> list:
    """The job's Events, every one the operator decided until now among them: a job the operator refuses
    at once (a label key only it judges) gets its InvalidSpec Event after them, from the operator's one
    queue, posted in order (tpujob.reconciler.poster)."""
    jobs.create(plain_job(f"{name}-later", pod={"labels": {"bad key": "x"}}))
    jobs.wait_events(f"{name}-later", "InvalidSpec")
    return jobs.events(name)


def test_provisioning_timeout_fails_the_job_and_leaves_no_pool(jobs, gke):
    gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", 0)  # never comes back
    jobs.create(plain_job(tpu=V5P_MULTI_HOST, runPolicy={"provisioningTimeoutSeconds": 3}))
    status = jobs.wait_phase("train", "Failed", timeout=30)
    assert status["reason"] == "ProvisioningTimeout"
    assert "Stockout" in status["message"]
    # GKE refuses the delete while it still retries the create; the pool goes once GKE gives up.
    wait_for(lambda: not gke.node_pools(), timeout=60, what="the stocked-out pool to be deleted")
    assert gke.calls["CreateNodePool"] == 1


def test_a_region_configured_as_the_zone_is_a_configuration_error_naming_the_setting(
    sandbox, jobs, gke, operator, tmp_path
):
    env = {**operator_env(sandbox, tmp_path), "TPUJOB_GKE_ZONE": "us-central1"}
    operator.stop()
    wrong = OperatorProcess(env, tmp_path / "wrong-operator.log").start()
    try:
        jobs.create(plain_job())
        status = wait_for(
            lambda: (st := jobs.status("train")).get("reason") == "GKEConfigError" and st,
            timeout=30,
            what="the configuration error in the status",
            last_state=lambda: log_tail(tmp_path / "wrong-operator.log"),
        )
        assert "TPUJOB_GKE_ZONE (chart value gke.zone)" in status["message"]
        assert "'us-central1', a region" in status["message"]
        assert "us-central1-a" in status["message"]  # the fix: a zone of the cluster's region
        assert gke.calls["CreateNodePool"] == 0
    finally:
        wrong.stop()
        operator.start()


def test_a_2x4_job_runs_on_an_xpk_style_pool_of_two_4_chip_nodes_and_a_mismatched_one_is_unschedulable(
    jobs, gke, kubelet
):
    # What xpk's `v6e-8` makes: one slice of two ct6e-standard-4t VMs in a 2x4 topology.
    xpk_pool = pool_request(
        name="xpk-v6e-8",
        initialNodeCount=2,
        locations=["us-central1-b"],
        config={"machineType": "ct6e-standard-4t"},
        placementPolicy={"type": "COMPACT", "tpuTopology": "2x4"},
    )
    create_pool(gke, xpk_pool)
    tpu = {"type": "v6e", "topology": "2x4", "machineType": "ct6e-standard-4t"}
    jobs.create(plain_job("fits", tpu=tpu, nodePool={"policy": "existing"}))
    succeed_all(jobs, kubelet, "fits", 2)

    # The default machine type for 2x4 is one 8-chip VM: no such node here.
    jobs.create(
        plain_job("mismatch", tpu={"type": "v6e", "topology": "2x4"}, nodePool={"policy": "existing"})
    )
    status = wait_for(
        lambda: (st := jobs.status("mismatch")).get("reason") == "Unschedulable" and st,
        timeout=60,
        what="the scheduler's reason in the status",
    )
    assert status["phase"] == "Starting"
    assert "nodes are available" in status["message"]  # the scheduler's own words


def test_a_tpu7x_job_with_a_workload_policy_schedules_and_its_workers_get_process_addresses(
    jobs, gke, kubelet
):
    gke.add_workload_policy("ironwood-2x2x2", "2x2x2")
    jobs.create(
        plain_job(
            tpu={"type": "tpu7x", "topology": "2x2x2"},
            nodePool={"zone": "us-central1-c", "workloadPolicy": "ironwood-2x2x2"},
        )
    )
    pods = jobs.wait_pods_running("train", 2, timeout=60)
    for pod in pods:
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        addresses = env["TPU_PROCESS_ADDRESSES"].split(",")
        assert len(addresses) == 2 and all(a.endswith(":8471") for a in addresses)
        assert env["TPU_PROCESS_PORT"] == "8471"
    for pod in pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")


def test_a_tpu7x_job_whose_workload_policy_has_another_topology_is_rejected_before_any_pool(jobs, gke):
    gke.add_workload_policy("ironwood-2x2x4", "2x2x4")
    jobs.create(
        plain_job(
            tpu={"type": "tpu7x", "topology": "2x2x2"},
            nodePool={"zone": "us-central1-c", "workloadPolicy": "ironwood-2x2x4"},
        )
    )
    status = wait_for(
        lambda: (st := jobs.status("train")).get("reason") == "NodePoolRejected" and st,
        timeout=30,
        what="the policy mismatch in the status",
    )
    assert "places 2x2x4 slices, but spec.tpu.topology is 2x2x2" in status["message"]
    assert gke.calls["CreateNodePool"] == 0


def test_a_six_slice_job_meets_gkes_five_operation_limit_and_gets_its_six_pools(jobs, gke, kubelet):
    # GKE runs at most 5 operations on a cluster; the sixth is a 429 "Too many operations" (the simulated
    # GKE's operations.py). The first five creates stay running 3 s, so the sixth meets the limit.
    gke.inject_pool_fault("slow", times=5, provisioning_seconds=3 / gke.time_scale)
    jobs.create(plain_job(tpu={**V5P_MULTI_HOST, "slices": 6}))
    pods = jobs.wait_pods_running("train", 12, timeout=90)
    creates = [call.body["nodePool"]["name"] for call in gke.recorded if call.rpc == "CreateNodePool"]
    assert len(set(creates)) == 6 and len(gke.node_pools()) == 6
    # A pool asked for more than once: the 429s were met and asked again, never deleted nor failed.
    assert len(creates) > 6 and max(creates.count(name) for name in set(creates)) >= 2
    assert gke.calls.get("DeleteNodePool", 0) == 0
    for pod in pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")


def _operator_reads_the_cluster(gke) -> None:
    """Wait for the operator's next GetCluster (its sweep, every 2 s here): it has seen the version since."""
    seen = gke.calls.get("GetCluster", 0)
    wait_for(lambda: gke.calls.get("GetCluster", 0) > seen, timeout=30, what="the operator's GetCluster")


def test_a_tpu7x_job_on_a_1_33_cluster_is_refused_naming_the_version_before_any_pool(jobs, gke):
    gke.set_cluster_version("1.33.5-gke.1201000")
    try:
        _operator_reads_the_cluster(gke)
        jobs.create(plain_job(tpu={"type": "tpu7x", "topology": "1x1x1"}, nodePool={"zone": "us-central1-c"}))
        status = wait_for(
            lambda: (st := jobs.status("train")).get("reason") == "NodePoolRejected" and st,
            timeout=30,
            what="the version refusal in the status",
        )
        assert (
            "tpu7x (Ironwood) node pools need GKE 1.34.0-gke.2201000 or later and the cluster runs "
            "1.33.5-gke.1201000: upgrade the cluster" in status["message"]
        )
        assert gke.calls.get("CreateNodePool", 0) == 0  # the operator knew: GKE was not asked
    finally:
        gke.clear_faults()  # 1.34.0-gke.2201000 again; the next test's operator must have seen it
        _operator_reads_the_cluster(gke)


def test_a_spot_reclaim_gives_the_trainer_15_seconds_and_it_checkpoints(
    sandbox, jobs, gke, kubelet, tmp_path, trainer_image
):
    checkpoints = tmp_path / "checkpoints"
    manifest = base_job("spot", capacity={"mode": "spot"})
    manifest["spec"]["trainer"] = {
        "image": trainer_image,
        "args": ["--steps", "1000000", "--log-every-steps", "10", "--checkpoint-every-steps", "1000000",
                 "--progress", "log", *LIGHT_TRAINING],
        "checkpointDir": str(checkpoints),
    }  # fmt: skip
    with jobs.recording_pods("spot") as seen:  # the reclaimed pod may go with its node
        jobs.create(manifest)
        (pod,) = jobs.wait_pods_running("spot", 1, timeout=60)
        log_path = kubelet.log_path(jobs.namespace, pod.metadata.name)
        wait_for(lambda: "step" in log_tail(log_path), timeout=120, what="the trainer to take steps")
        pool = jobs.status("spot")["nodePools"][0]["name"]
        assert pod.spec.termination_grace_period_seconds >= 15  # what the pod asks does not extend the 15 s

        started = time.monotonic()
        sandbox.preempt_slice(pool)
        elapsed = time.monotonic() - started
        assert elapsed <= 15 + 5, f"the node shutdown took {elapsed:.1f} s"
        (ended,) = seen.wait_finished(attempt=0)
    terminated = ended.status.container_statuses[0].state.terminated
    assert terminated.exit_code == EXIT_CODE_SIGTERM, log_tail(log_path)
    assert "checkpoint at step" in log_tail(log_path), log_tail(log_path)
    assert any(name.startswith("ckpt") for name in os.listdir(checkpoints))
    status = wait_for(
        lambda: (st := jobs.status("spot")).get("restartsByReason") and st,
        timeout=30,
        what="the restart after the reclaim",
    )
    assert status["restartsByReason"] == {"Preempted": 1}


# --- reservations (GKE refuses the create at once: tpujob_sandbox/gke/reservations.py) ---------------------

RESERVED = {"mode": "reservation", "reservation": "res"}  # plain_job: one v5e 2x2 VM in us-central1-a


def refused_with(jobs, name: str, reason: str) -> tuple[dict, float]:
    """The job's status once it shows `reason`, and when it did."""
    status = wait_for(
        lambda: (st := jobs.status(name)).get("reason") == reason and st,
        timeout=30,
        what=f"{reason} in the status",
    )
    return status, time.monotonic()


def assert_asked_again_with_a_backoff(gke, refused_at: float, creates: int) -> None:
    """The create came `creates` times in all, spaced 1, 2, 4 s ... (TPUJOB_REFUSED_BACKOFF_SECONDS is 1
    on the test bed, doubling), not at every 0.2 s poll (that would make `creates` in about a second)."""
    wait_for(lambda: gke.calls["CreateNodePool"] >= creates, timeout=60, what=f"{creates} creates")
    waited = time.monotonic() - refused_at
    backoff = sum(2**n for n in range(creates - 1))  # 1 + 2 + 4 ... before each create after the first
    print(f"create #{creates} came {waited:.1f} s after the first refusal showed (backoff {backoff} s)")
    assert waited >= backoff - 1.5


def test_a_reservation_too_small_shows_reservation_exhausted_with_a_backoff_then_the_job_gets_its_pool(
    jobs, gke, kubelet
):
    """GKE's 429 for a reservation short of VMs: ReservationExhausted in GKE's words with a Warning event,
    asked again with the growing backoff (before this fix: IncompatibleOperation every 5 s); once the
    reservation's owner enlarges it, the pool comes from it and its VM goes back when the job ends."""
    gke.reservations.create("res", "us-central1-a", "ct5lp-hightpu-4t", 0)
    jobs.create(plain_job("reserved", capacity=RESERVED))
    status, refused_at = refused_with(jobs, "reserved", "ReservationExhausted")
    assert status["message"].startswith(
        'Reservation does not have enough resources for the request: specific reservation "res" is '
        "insufficient for node pool"
    )
    assert status["message"].endswith("required 1 and short of 1 VM count of machine type ct5lp-hightpu-4t.")
    event = wait_for(
        lambda: next((e for e in jobs.events("reserved") if e.reason == "ReservationExhausted"), None),
        timeout=10,
        what="the Warning event",
    )
    assert event.type == "Warning"
    assert_asked_again_with_a_backoff(gke, refused_at, creates=4)
    assert jobs.status("reserved")["reason"] == "ReservationExhausted"

    gke.reservations.resize("res", 1)  # the owner enlarged it
    for pod in jobs.wait_pods_running("reserved", 1, timeout=60):
        assert gke.reservations.get("res").in_use == 1
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("reserved", "Succeeded")
    wait_for(lambda: gke.reservations.get("res").in_use == 0, timeout=30, what="the reserved VM given back")


def test_a_missing_reservation_is_refused_as_reservation_not_found_then_the_job_proceeds_when_it_exists(
    jobs, gke, kubelet
):
    """GKE's 404 for a reservation that does not exist: ReservationNotFound in GKE's words, asked again with
    the growing backoff; once the reservation is created, the job gets its pool from it."""
    jobs.create(plain_job("reserved", capacity=RESERVED))
    status, refused_at = refused_with(jobs, "reserved", "ReservationNotFound")
    assert status["message"].startswith('Google Compute Engine: reservation "res" not found for node pool')
    condition = next(c for c in status["conditions"] if c["type"] == "NodePoolsReady")
    assert condition["reason"] == "ReservationNotFound"
    assert_asked_again_with_a_backoff(gke, refused_at, creates=3)

    gke.reservations.create("res", "us-central1-a", "ct5lp-hightpu-4t", 1)
    succeed_all(jobs, kubelet, "reserved", 1)
    wait_for(lambda: gke.reservations.get("res").in_use == 0, timeout=30, what="the reserved VM given back")


def test_a_zone_the_catalog_does_not_list_is_asked_of_gke_with_a_warning_and_gkes_refusal_shown(jobs, gke):
    """us-central1-f is a zone of the cluster's region that tpujob's TPU catalog does not list: the job is not
    refused at validation; its pool is asked of GKE (a ZoneNotListed warning first), and GKE's own refusal
    shows as NodePoolRejected."""
    jobs.create(plain_job(tpu={"type": "v5e", "topology": "2x2"}, nodePool={"zone": "us-central1-f"}))
    status = wait_for(
        lambda: (st := jobs.status("train")).get("reason") == "NodePoolRejected" and st,
        timeout=30,
        what="GKE's refusal in the status",
    )
    assert 'Invalid machine type "ct5lp-hightpu-4t" in zone "us-central1-f"' in status["message"]
    (create, *_) = [c for c in gke.recorded if c.rpc == "CreateNodePool"]
    assert create.body["nodePool"]["locations"] == ["us-central1-f"]
    assert "us-central1-f for v5e: tpujob's zone catalog does not list it" in status["message"]
    (event, *_) = jobs.wait_events("train", "NodePoolRejected")  # posted after the status write
    assert event.type == "Warning" and "zone catalog does not list it" in event.message
