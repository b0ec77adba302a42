"""Flex-start TPU slices on the test bed: an operator for the sandbox's us-east5 cluster (where GKE offers
flex-start for v5p and v6e), the simulated GKE playing the cluster autoscaler's part."""

from __future__ import annotations

import calendar
import json
import time

import pytest
from kubernetes import client as k8s

from tests.manifests import plain_job
from tpujob_sandbox import FLEX_START_LOCATION, OperatorProcess, operator_env, wait_for
from tpujob_sandbox.gke import zones as zone_facts

FLEX_ZONE = "us-east5-a"
V5P = "ct5p-hightpu-4t"


@pytest.fixture
def east_operator(sandbox, operator, tmp_path, request):
    """The operator of the us-east5 cluster, alone (the session's operator, for us-central1, is stopped).
    Indirect parameter: more TPUJOB_* settings."""
    env = {
        **operator_env(sandbox, tmp_path),
        "TPUJOB_GKE_LOCATION": FLEX_START_LOCATION,
        "TPUJOB_GKE_ZONE": FLEX_ZONE,
        **getattr(request, "param", {}),
    }
    operator.stop()
    east = OperatorProcess(env, tmp_path / "east-operator.log").start()
    yield east
    east.stop()
    operator.start()


# The operator lets a queued flex-start request move zones (off by default: the move loses its queue place).
FLEX_FALLBACK_ALLOWED = {"TPUJOB_GKE_FLEX_START_ZONE_FALLBACK": "true"}


def flex_job(name: str = "flex", **capacity):
    return plain_job(
        name,
        tpu={"type": "v5p", "topology": "2x2x2"},
        capacity={"mode": "flexStart", **capacity},
        runPolicy={"maxRestarts": 0},  # a counted restart would fail the job
    )


def succeed_all(jobs, kubelet, name: str, attempt: int) -> dict:
    for pod in jobs.wait_pods_running(name, 2, attempt=attempt, timeout=60):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    return jobs.wait_phase(name, "Succeeded", timeout=60)


def test_a_flex_start_job_waits_for_capacity_gets_its_whole_slice_and_succeeds(
    east_operator, jobs, gke, kubelet
):
    gke.set_capacity(FLEX_ZONE, V5P, 0)  # Dynamic Workload Scheduler has nothing yet
    jobs.create(flex_job())
    status = wait_for(
        lambda: (st := jobs.status("flex")).get("reason") == "WaitingForCapacity" and st,
        timeout=60,
        what="the job to queue for capacity",
        last_state=lambda: east_operator.log()[-2000:],
    )
    assert status["phase"] == "Provisioning"
    assert status["provisioningSince"] and status["provisioningSince"] in status["message"]
    (pool,) = gke.cluster_state(FLEX_START_LOCATION, "sandbox").pools.all().values()
    assert pool.config.flex_start and pool.initial_node_count == 0
    assert all(p.status.phase == "Pending" for p in jobs.pods("flex"))

    gke.set_capacity(FLEX_ZONE, V5P, None)  # capacity frees up: the whole slice at once
    final = succeed_all(jobs, kubelet, "flex", attempt=0)
    assert final.get("restarts", 0) == 0
    east_pools = gke.cluster_state(FLEX_START_LOCATION, "sandbox").pools
    wait_for(lambda: not east_pools.all(), timeout=60, what="the flex pool to be deleted")


def test_a_flex_start_job_checkpoints_and_restarts_on_a_new_slice_before_its_run_duration_ends(
    east_operator, jobs, gke, kubelet
):
    # Act 20 s after the slice runs: the second slice has as long for its pods to succeed (with 10 s, a
    # loaded machine could restart it a second time first).
    manifest = flex_job(maxRunDurationSeconds=90)
    manifest["spec"]["runPolicy"]["maintenanceLeadSeconds"] = 70
    jobs.create(manifest)
    first = jobs.wait_pods_running("flex", 2, attempt=0, timeout=60)
    status = jobs.wait_phase("flex", "Running", timeout=30)
    assert status["runDeadline"] in status["message"]
    east_operator.kill()  # SIGKILL with the run clock started: the new process keeps the recorded deadline
    east_operator.start()
    status = wait_for(
        lambda: (st := jobs.status("flex")).get("restartsByReason") and st,
        timeout=60,
        what="the restart ahead of the run duration",
    )
    assert status["restartsByReason"] == {"RunDurationReached": 1}
    assert status.get("applicationRestarts", 0) == 0  # maxRestarts is 0: a counted restart would have failed
    # The old pods were told to stop (SIGTERM, their checkpoint) and removed, before GKE took the VMs back.
    wait_for(lambda: not jobs.pods("flex", attempt=0), timeout=60, what="the first attempt's pods to go")
    assert {p.metadata.name for p in first}.isdisjoint(p.metadata.name for p in jobs.pods("flex"))
    final = succeed_all(jobs, kubelet, "flex", attempt=1)  # on a new slice, queued anew
    assert final["restarts"] == 1
    assert gke.calls["CreateNodePool"] == 2  # one pool per slice lifetime


def test_a_slow_start_counts_the_run_duration_from_the_slice_nodes_creation_and_checkpoints_ahead_of_it(
    east_operator, jobs, gke, kubelet, core
):
    """GKE deletes flex-start VMs maxRunDuration after they were created, however long the workers took to
    start: here a Secret they need comes late, and the recorded deadline is the nodes' creation plus the run
    duration, not the moment the workers ran (the simulated GKE ends the run from the slice's registration:
    gke/autoscaler.py)."""
    manifest = flex_job(maxRunDurationSeconds=60)
    manifest["spec"]["runPolicy"]["maintenanceLeadSeconds"] = 30
    manifest["spec"]["trainer"]["env"] = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}}
    ]
    jobs.create(manifest)
    status = wait_for(
        lambda: (st := jobs.status("flex")).get("runDeadline") and st,
        timeout=90,
        what="the run deadline, once the slice's nodes are up",
    )
    nodes = core.list_node(
        label_selector=f"cloud.google.com/gke-nodepool={status['nodePools'][0]['name']}"
    ).items
    created = min(node.metadata.creation_timestamp for node in nodes).timestamp()
    deadline = calendar.timegm(time.strptime(status["runDeadline"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(deadline - (created + 60)) <= 1, (status["runDeadline"], created)
    assert status["phase"] != "Running"  # the workers still wait for the Secret: the clock runs anyway
    core.create_namespaced_secret(
        jobs.namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="late"), string_data={"token": "hf_123"}),
    )
    status = wait_for(
        lambda: (st := jobs.status("flex")).get("restartsByReason") and st,
        timeout=90,
        what="the restart ahead of GKE's deadline",
    )
    assert status["restartsByReason"] == {"RunDurationReached": 1}
    restarted = calendar.timegm(time.strptime(status["lastRestartTime"], "%Y-%m-%dT%H:%M:%SZ"))
    # Lead 30 s, plus a resync and what a loaded machine adds: still well ahead of GKE ending the run.
    assert restarted <= created + 60 - 30 + 8, (status["lastRestartTime"], created)


def test_flex_start_on_v4_is_refused_at_validation(operator, jobs):
    """At `kubectl apply` (the CRD's CEL), with the operator's words."""
    manifest = flex_job()
    manifest["spec"]["tpu"] = {"type": "v4", "topology": "2x2x2"}
    with pytest.raises(k8s.ApiException) as refused:
        jobs.create(manifest)
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert [cause["field"] for cause in causes] == ["spec.capacity.mode"], causes
    assert "flexStart offers v5e, v5p, v6e, tpu7x TPUs, not v4" in causes[0]["message"], causes


def test_a_stockout_in_the_first_zone_falls_back_to_the_second_with_no_pool_left_in_the_first(
    east_operator, jobs, gke, kubelet
):
    east = gke.cluster_state(FLEX_START_LOCATION, "sandbox").pools
    gke.set_capacity("us-east5-a", "ct6e-standard-4t", 0)  # stocked out for good
    manifest = plain_job(
        "zones",
        tpu={"type": "v6e", "topology": "4x4"},  # v6e is in us-east5-a and us-east5-b
        capacity={"zones": ["us-east5-a", "us-east5-b"], "zoneFallbackSeconds": 10},
    )
    jobs.create(manifest)
    wait_for(
        lambda: jobs.status("zones").get("reason") == "Stockout", timeout=60, what="the stockout in zone 1"
    )
    pods = wait_for(
        lambda: len(found := jobs.wait_pods_running("zones", 4, timeout=120)) == 4 and found,
        timeout=150,
        what="the slice in zone 2",
    )
    assert pods
    wait_for(lambda: jobs.status("zones")["zone"] == "us-east5-b", timeout=30, what="zone 2 in the status")
    wait_for(  # nothing left in us-east5-a
        lambda: [p.locations for p in east.all().values()] == [["us-east5-b"]],
        timeout=30,
        what="the pool in us-east5-a to go",
        last_state=lambda: [p.locations for p in east.all().values()],
    )

    def fallback_said() -> bool:
        fallbacks = [e for e in jobs.events("zones") if e.reason == "ZoneFallback"]
        return any(e.type == "Warning" and "Stockout in us-east5-a" in e.message for e in fallbacks) and any(
            "trying us-east5-b" in e.message for e in fallbacks
        )

    wait_for(
        fallback_said,
        timeout=30,
        what="the ZoneFallback Warning naming both zones",
        last_state=lambda: [(e.reason, e.message) for e in jobs.events("zones")],
    )
    for pod in pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("zones", "Succeeded", timeout=60)


@pytest.mark.parametrize("east_operator", [FLEX_FALLBACK_ALLOWED], indirect=True)
def test_killed_while_a_flex_start_slice_is_queued_and_during_a_zone_fallback(
    east_operator, jobs, gke, kubelet
):
    """SIGKILL while queued for flex-start capacity, and again right after a zone fallback began: each
    restart converges, and each pool is created exactly once (one in each zone)."""
    gke.set_capacity("us-east5-a", "ct6e-standard-4t", 0)
    gke.set_capacity("us-east5-b", "ct6e-standard-4t", 0)
    manifest = plain_job(
        "killed",
        tpu={"type": "v6e", "topology": "4x4"},
        # 30 s in each zone: the second restart and the capacity in us-east5-b must come within it, or the job
        # moves on, back to us-east5-a (a loaded CI machine once took longer than 10 s).
        capacity={"mode": "flexStart", "zones": ["us-east5-a", "us-east5-b"], "zoneFallbackSeconds": 30},
        runPolicy={"maxRestarts": 0},
    )
    jobs.create(manifest)
    wait_for(
        lambda: jobs.status("killed").get("reason") == "WaitingForCapacity", timeout=60, what="the queue"
    )
    east_operator.kill()
    east_operator.start()
    wait_for(lambda: jobs.status("killed").get("zone") == "us-east5-b", timeout=90, what="the zone fallback")
    east_operator.kill()
    east_operator.start()
    gke.set_capacity("us-east5-b", "ct6e-standard-4t", None)
    pods = jobs.wait_pods_running("killed", 4, timeout=120)
    for pod in pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    status = jobs.wait_phase("killed", "Succeeded", timeout=60)
    assert status.get("applicationRestarts", 0) == 0
    creates = [c.path for c in gke.recorded if c.rpc == "CreateNodePool"]
    zones = [c.body["nodePool"]["locations"] for c in gke.recorded if c.rpc == "CreateNodePool"]
    assert zones == [["us-east5-a"], ["us-east5-b"]], creates


def test_a_maintenance_notice_on_a_running_slice_checkpoints_ahead_and_restarts_as_maintenance(
    operator, jobs, gke, kubelet
):
    manifest = plain_job(
        "maint",
        tpu={"type": "v5p", "topology": "2x2x2"},
        runPolicy={"maxRestarts": 0, "maintenanceLeadSeconds": 24},  # a counted restart would fail the job
    )
    # The operator stops workers the longer of the lead and their grace ahead (TPUJobSpec.stop_lead_seconds):
    # a grace under the lead keeps the lead this test times against.
    manifest["spec"]["trainer"]["terminationGracePeriodSeconds"] = 10
    jobs.create(manifest)
    first = jobs.wait_pods_running("maint", 2, attempt=0, timeout=60)
    jobs.wait_phase("maint", "Running", timeout=30)
    pool = jobs.status("maint")["nodePools"][0]["name"]
    # The job acts 6 s on; the 24 s after leave room for an operator restart on a loaded machine.
    at = time.time() + 30
    gke.announce_maintenance(
        pool, at
    )  # GKE labels the slice's nodes cloud.google.com/scheduled-maintenance-time

    status = wait_for(
        lambda: (st := jobs.status("maint")).get("maintenanceTime") and st,
        timeout=30,
        what="the notice in status",
    )
    wait_for(
        lambda: any(e.reason == "MaintenanceScheduled" for e in jobs.events("maint")),
        timeout=10,
        what="the MaintenanceScheduled event",
    )
    operator.kill()  # SIGKILL between the notice and the restart: the new process restarts the job once
    operator.start()
    status = wait_for(
        lambda: (st := jobs.status("maint")).get("restartsByReason") and st, timeout=30, what="the restart"
    )
    assert time.time() < at  # ahead of the maintenance: the workers had their SIGTERM to checkpoint
    assert status["restartsByReason"] == {"Maintenance": 1}
    assert status.get("applicationRestarts", 0) == 0
    wait_for(lambda: not jobs.pods("maint", attempt=0), timeout=60, what="the first attempt's pods to go")
    # The new pods avoid the nodes under notice: they wait until the hosts come back from maintenance.
    pending = wait_for(
        lambda: len(found := jobs.pods("maint", attempt=1)) == 2 and found,
        timeout=30,
        what="the second attempt's pods",
    )
    assert all(p.status.phase == "Pending" for p in pending), [
        (p.metadata.name, p.status.phase) for p in pending
    ]
    second = jobs.wait_pods_running("maint", 2, attempt=1, timeout=90)
    assert time.time() >= at
    assert {p.metadata.name for p in first}.isdisjoint(p.metadata.name for p in second)
    for pod in second:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    assert jobs.wait_phase("maint", "Succeeded", timeout=60)["restarts"] == 1


def creates_in(gke) -> list[list[str]]:
    return [c.body["nodePool"]["locations"] for c in gke.recorded if c.rpc == "CreateNodePool"]


def test_quota_with_two_zones_backs_off_in_its_zone_and_names_the_quota_to_raise(
    east_operator, jobs, gke, kubelet
):
    """TPU quota is regional: past zoneFallbackSeconds a QuotaExceeded job stays in its zone (nothing is made
    in the second one), asks again there on the refusals' backoff, and says which quota to raise, where."""
    gke.set_quota(FLEX_START_LOCATION, "ct6e-standard-4t", 4)  # the 4x4 slice needs 16 chips
    metric = zone_facts.quota_family("ct6e-standard-4t")
    jobs.create(
        plain_job(
            "quota",
            tpu={"type": "v6e", "topology": "4x4"},  # v6e is in us-east5-a and us-east5-b
            capacity={"zones": ["us-east5-a", "us-east5-b"], "zoneFallbackSeconds": 10},
        )
    )
    status = wait_for(
        lambda: (st := jobs.status("quota")).get("reason") == "QuotaExceeded" and st,
        timeout=60,
        what="the quota shortfall in the status",
        last_state=lambda: east_operator.log()[-2000:],
    )
    shown = time.monotonic()
    assert status["message"].startswith(f"raise quota {metric} in region {FLEX_START_LOCATION} "), status
    assert "GCE_QUOTA_EXCEEDED" in status["message"]  # GKE's own words follow

    def past_the_fallback_time() -> bool:
        current = jobs.status("quota")
        # Asked again in its zone between the shortfalls (Provisioning for a moment), never moved.
        assert current.get("reason") != "ZoneFallback" and current.get("zone") == "us-east5-a", current
        return time.monotonic() - shown > 10 + 3 and gke.calls["CreateNodePool"] >= 3

    wait_for(
        past_the_fallback_time, timeout=90, interval=0.2, what="zoneFallbackSeconds to pass, asked again"
    )
    zones = creates_in(gke)
    print(f"{len(zones)} creates in {time.monotonic() - shown:.1f} s of QuotaExceeded, all in {zones[0]}")
    assert all(z == ["us-east5-a"] for z in zones), zones  # nothing in the second zone
    warnings = jobs.wait_events("quota", "QuotaExceeded")
    assert all(e.type == "Warning" for e in warnings)
    assert all(f"{metric} in region {FLEX_START_LOCATION}" in e.message for e in warnings)

    gke.set_quota(FLEX_START_LOCATION, "ct6e-standard-4t", None)  # the quota was raised
    for pod in jobs.wait_pods_running("quota", 4, timeout=120):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    assert jobs.wait_phase("quota", "Succeeded", timeout=60)["zone"] == "us-east5-a"
    assert all(z == ["us-east5-a"] for z in creates_in(gke))
    # Never a fallback: every Event before the job's Succeeded one (posted in order) has none.
    events = jobs.events_through("quota", "Succeeded")
    assert not [e for e in events if e.reason == "ZoneFallback"]
    assert all(e.type == "Warning" for e in events if e.reason == "QuotaExceeded")


def test_a_flex_start_request_queued_past_the_fallback_time_keeps_its_place(
    east_operator, jobs, gke, kubelet
):
    """Without the operator's TPUJOB_GKE_FLEX_START_ZONE_FALLBACK a queued flex-start request stays queued in
    its zone past zoneFallbackSeconds: one pool, never deleted, and the status says what a move would cost."""
    east = gke.cluster_state(FLEX_START_LOCATION, "sandbox").pools
    gke.set_capacity("us-east5-a", "ct6e-standard-4t", 0)
    jobs.create(
        plain_job(
            "queued",
            tpu={"type": "v6e", "topology": "4x4"},
            capacity={"mode": "flexStart", "zones": ["us-east5-a", "us-east5-b"], "zoneFallbackSeconds": 10},
            runPolicy={"maxRestarts": 0},
        )
    )
    wait_for(
        lambda: jobs.status("queued").get("reason") == "WaitingForCapacity",
        timeout=60,
        what="the request to queue",
        last_state=lambda: east_operator.log()[-2000:],
    )
    queued = time.monotonic()

    def still_queued_past_the_fallback_time() -> bool:
        current = jobs.status("queued")
        assert (current.get("reason"), current.get("zone")) == ("WaitingForCapacity", "us-east5-a"), current
        assert len(east.all()) == 1
        return time.monotonic() - queued > 10 + 5

    wait_for(
        still_queued_past_the_fallback_time, timeout=60, interval=0.2, what="zoneFallbackSeconds to pass"
    )
    status = jobs.status("queued")
    assert (
        "its place in the queue" in status["message"]
        and "TPUJOB_GKE_FLEX_START_ZONE_FALLBACK" in status["message"]
    )
    assert (gke.calls["CreateNodePool"], gke.calls.get("DeleteNodePool", 0)) == (1, 0)
    assert [p.locations for p in east.all().values()] == [["us-east5-a"]]

    gke.set_capacity("us-east5-a", "ct6e-standard-4t", None)  # its turn comes, in the zone it queued in
    for pod in jobs.wait_pods_running("queued", 4, timeout=120):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("queued", "Succeeded", timeout=60)
    assert gke.calls["CreateNodePool"] == 1
    # Never a fallback: every Event before the job's Succeeded one (posted in order) has none.
    assert not [e for e in jobs.events_through("queued", "Succeeded") if e.reason == "ZoneFallback"]
