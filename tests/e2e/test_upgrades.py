"""GKE's node upgrades and auto-repairs against running slices, on the test bed: the pools the operator makes
are shielded from upgrade rounds by their own exclusion; what still recreates a slice (a repair, an upgrade at
the version's end of support) restarts the job under its own reason, without spending maxRestarts."""

from __future__ import annotations

from tests.manifests import plain_job
from tpujob_sandbox import wait_for

V5P_MULTI_HOST = {"type": "v5p", "topology": "2x2x2"}  # 2 hosts in us-central1-a, the operator's zone


def running_slice(jobs, name: str) -> tuple[list, str]:
    """A 2-host job, running, with maxRestarts 0 (a counted restart would fail it); its pods and pool."""
    jobs.create(plain_job(name, tpu=V5P_MULTI_HOST, runPolicy={"maxRestarts": 0}))
    pods = jobs.wait_pods_running(name, 2, attempt=0, timeout=60)
    jobs.wait_phase(name, "Running", timeout=30)
    return pods, jobs.status(name)["nodePools"][0]["name"]


def operations_on(gke, pool: str, kind: str) -> list:
    return [
        op
        for op in gke.operations.all()
        if op.operation_type.name == kind and f"/nodePools/{pool}" in op.target_link
    ]


def succeed(jobs, kubelet, name: str, attempt: int) -> dict:
    for pod in jobs.wait_pods_running(name, 2, attempt=attempt, timeout=90):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    return jobs.wait_phase(name, "Succeeded", timeout=60)


def test_an_upgrade_round_passes_a_running_slice_by_its_pools_own_exclusion(operator, jobs, gke, kubelet):
    first, pool = running_slice(jobs, "shielded")
    assert gke.node_pools()[pool].maintenance_policy.exclusion_until_end_of_support.enabled

    assert gke.run_upgrade_round() == []  # GKE's round reaches the cluster and leaves the slice alone
    assert not operations_on(gke, pool, "UPGRADE_NODES")
    assert {p.metadata.uid for p in jobs.pods("shielded", attempt=0)} == {p.metadata.uid for p in first}
    status = succeed(jobs, kubelet, "shielded", attempt=0)
    assert status.get("restarts", 0) == 0


def test_an_auto_repair_of_one_host_restarts_the_job_as_node_repair_uncounted(operator, jobs, gke, kubelet):
    first, pool = running_slice(jobs, "repaired")
    sick = sorted(gke.node_names(pool))[1]

    gke.auto_repair(pool, sick)  # the whole slice is drained and recreated, exclusions or not
    status = wait_for(
        lambda: (st := jobs.status("repaired")).get("restartsByReason") and st,
        timeout=30,
        what="the restart",
        last_state=lambda: operator.log()[-2000:],
    )
    assert status["restartsByReason"] == {"NodeRepair": 1}
    assert status.get("applicationRestarts", 0) == 0
    assert "AUTO_REPAIR_NODES" in status["message"]
    assert jobs.wait_events("repaired", "NodeRepair")  # posted after the status write
    (repair,) = operations_on(gke, pool, "AUTO_REPAIR_NODES")
    assert repair.target_link.endswith(f"/node/{sick}")

    second = jobs.wait_pods_running("repaired", 2, attempt=1, timeout=90)  # on the recreated hosts
    assert {p.metadata.name for p in first}.isdisjoint(p.metadata.name for p in second)
    status = succeed(jobs, kubelet, "repaired", attempt=1)
    assert status["restarts"] == 1 and status.get("applicationRestarts", 0) == 0


def test_an_upgrade_at_end_of_support_restarts_the_job_as_node_upgrade_uncounted(
    operator, jobs, gke, kubelet
):
    _, pool = running_slice(jobs, "upgraded")

    assert gke.run_upgrade_round(end_of_support=True) == [pool]  # no exclusion outlasts end of support
    status = wait_for(
        lambda: (st := jobs.status("upgraded")).get("restartsByReason") and st,
        timeout=30,
        what="the restart",
        last_state=lambda: operator.log()[-2000:],
    )
    assert status["restartsByReason"] == {"NodeUpgrade": 1}
    assert status.get("applicationRestarts", 0) == 0
    status = succeed(jobs, kubelet, "upgraded", attempt=1)
    assert status["restarts"] == 1


def test_a_pool_gke_refuses_with_its_upgrade_exclusion_is_created_without_it_and_said(
    operator, jobs, gke, kubelet
):
    """A GKE that will not take the pool's own exclusion (maintenancePolicy.exclusionUntilEndOfSupport): the
    create is asked once more without it, the pool is made, and the job says so (a Warning event)."""
    gke.refuse_upgrade_shield()
    _, pool = running_slice(jobs, "unshielded")
    creates = [c.body["nodePool"] for c in gke.recorded if c.rpc == "CreateNodePool"]
    assert ["maintenancePolicy" in body for body in creates] == [True, False]
    assert not gke.node_pools()[pool].maintenance_policy.exclusion_until_end_of_support.enabled
    (event, *_) = jobs.wait_events("unshielded", "UpgradeShieldRefused")
    assert event.type == "Warning" and "Unknown name" in event.message  # GKE's words
    assert "TPUJOB_GKE_UPGRADE_SHIELD" in event.message
    wait_for(
        lambda: "UpgradeShieldRefused" in (log := operator.log()) or "upgrade exclusion" in log,
        timeout=30,
        what="the refused exclusion in the operator's log",
    )
    status = succeed(jobs, kubelet, "unshielded", attempt=0)
    assert status.get("restarts", 0) == 0
    # Said once: every Event before the job's Succeeded one (posted in order) has one UpgradeShieldRefused.
    assert [e.reason for e in jobs.events_through("unshielded", "Succeeded")].count(
        "UpgradeShieldRefused"
    ) == 1


def test_a_metadata_update_on_a_running_slices_pool_restarts_nothing(operator, jobs, gke, kubelet, core):
    """An UPGRADE_NODES operation that leaves the nodes alone (a metadata update: "The nodes are generally
    still usable during this operation", container_v1) restarts nothing; a worker failing on its own
    meanwhile is the application's failure (counted), not a NodeUpgrade."""
    jobs.create(plain_job("updated", tpu=V5P_MULTI_HOST, runPolicy={"maxRestarts": 1}))
    first = jobs.wait_pods_running("updated", 2, attempt=0, timeout=60)
    jobs.wait_phase("updated", "Running", timeout=30)
    pool = jobs.status("updated")["nodePools"][0]["name"]
    nodes_before = {
        n.metadata.name: n.metadata.uid for n in core.list_node().items if pool in n.metadata.name
    }

    # 1. An update that comes and goes: nothing restarts, no pod is touched.
    operation = gke.update_node_pool(pool, gke_seconds=2500)  # 5 s on the test bed
    wait_for(
        lambda: gke.operations.get(operation).status.name == "DONE",
        timeout=30,
        what="the update to end",
    )
    assert gke.node_pools()[pool].status.name == "RUNNING"
    assert {p.metadata.uid for p in jobs.pods("updated", attempt=0)} == {p.metadata.uid for p in first}
    assert jobs.status("updated").get("restarts", 0) == 0

    # 2. While another update runs, a worker fails with exit code 1: the operator looks at GKE (a worker
    # failed), finds the update running, and counts the application's failure, not a NodeUpgrade.
    operation = gke.update_node_pool(pool, gke_seconds=15000)  # 30 s on the test bed
    wait_for(lambda: gke.node_pools()[pool].status.name == "RECONCILING", timeout=10, what="RECONCILING")
    kubelet.fail(jobs.namespace, first[1].metadata.name, exit_code=1)
    status = wait_for(
        lambda: (st := jobs.status("updated")).get("restartsByReason") and st,
        timeout=30,
        what="the restart",
        last_state=lambda: operator.log()[-2000:],
    )
    assert gke.operations.get(operation).status.name != "DONE"  # decided while GKE still updated the pool
    assert status["restartsByReason"] == {"WorkerFailed": 1} and status["applicationRestarts"] == 1
    # The new attempt runs on the same nodes: the update recreated none.
    status = succeed(jobs, kubelet, "updated", attempt=1)
    assert status["restarts"] == 1
    # Never a NodeUpgrade: every Event before the job's Succeeded one (posted in order) has none.
    assert not [e for e in jobs.events_through("updated", "Succeeded") if e.reason == "NodeUpgrade"]
    nodes_after = {name: core.read_node(name).metadata.uid for name in gke.node_names(pool)}
    assert nodes_after == nodes_before


def test_a_repair_that_ended_before_the_operator_looked_is_still_node_repair(operator, jobs, gke, kubelet):
    """The operator is down while GKE repairs a host of the slice (drains and recreates it whole) and ends
    the repair: back up, it finds the workers gone, the pool RUNNING, and in GKE's operations list an
    AUTO_REPAIR_NODES operation on the pool that ended after the attempt began: NodeRepair, not NodeLost."""
    _, pool = running_slice(jobs, "repaired-unseen")
    operator.stop()
    gke.auto_repair(pool)
    (repair,) = operations_on(gke, pool, "AUTO_REPAIR_NODES")
    wait_for(lambda: gke.operations.get(repair.name).status.name == "DONE", timeout=60, what="the repair")
    assert gke.node_pools()[pool].status.name == "RUNNING"
    wait_for(  # drained while nobody watched (the pods' deletion may outlast GKE's operation)
        lambda: not jobs.pods("repaired-unseen", attempt=0), timeout=30, what="the drained pods to go"
    )
    operator.start()
    status = wait_for(
        lambda: (st := jobs.status("repaired-unseen")).get("restartsByReason") and st,
        timeout=30,
        what="the restart",
        last_state=lambda: operator.log()[-2000:],
    )
    assert status["restartsByReason"] == {"NodeRepair": 1}
    event = wait_for(
        lambda: next((e for e in jobs.events("repaired-unseen") if e.reason == "NodeRepair"), None),
        timeout=10,
        what="the NodeRepair event",
    )
    assert "AUTO_REPAIR_NODES" in event.message and "ended since the attempt began" in event.message
    status = succeed(jobs, kubelet, "repaired-unseen", attempt=1)
    assert status["restarts"] == 1 and status.get("applicationRestarts", 0) == 0
