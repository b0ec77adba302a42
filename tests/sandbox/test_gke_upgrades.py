"""The simulated GKE's node upgrades and auto-repairs (tpujob_sandbox.gke.upgrades), driven by the real
google-cloud-container client, with the real API server."""

from __future__ import annotations

import datetime as dt

import pytest
from google.cloud import container_v1

from tests.sandbox.helpers import create_pool, nodes_of, pool_request
from tpujob_sandbox import wait_for

RECONCILING = container_v1.NodePool.Status.RECONCILING
RUNNING = container_v1.NodePool.Status.RUNNING
SHIELD = {"exclusionUntilEndOfSupport": {"enabled": True}}


def slice_pool(name: str, **fields) -> container_v1.NodePool:
    """A 2-host v5p slice in us-central1-a."""
    return pool_request(
        name=name,
        initialNodeCount=2,
        config={"machineType": "ct5p-hightpu-4t"},
        placementPolicy={"type": "COMPACT", "tpuTopology": "2x2x2"},
        **fields,
    )


def operations(gke, kind: str, pool: str) -> list[container_v1.Operation]:
    """The cluster's `kind` operations on `pool` or one of its nodes (the simulator is shared by the tests
    of a session: other tests' operations are listed too)."""
    parent = f"projects/{gke.project}/locations/{gke.location}"
    return [
        op
        for op in gke.client().list_operations(parent=parent).operations
        if op.operation_type.name == kind
        and (op.target_link.endswith(f"/nodePools/{pool}") or f"/nodePools/{pool}/" in op.target_link)
    ]


def status_of(gke, pool: str) -> int:
    return gke.client().get_node_pool(name=f"{gke.parent}/nodePools/{pool}").status


def wait_running_again(gke, pool: str) -> None:
    wait_for(lambda: status_of(gke, pool) == RUNNING, timeout=30, what=f"{pool} RUNNING again")


def test_a_pool_created_with_its_exclusion_keeps_it_with_a_start_time(gke):
    create_pool(gke, slice_pool("shielded", maintenancePolicy=SHIELD))
    exclusion = gke.client().get_node_pool(name=f"{gke.parent}/nodePools/shielded").maintenance_policy
    assert exclusion.exclusion_until_end_of_support.enabled
    assert exclusion.exclusion_until_end_of_support.start_time.year >= 2025  # output only: set by GKE


def test_an_upgrade_round_recreates_unshielded_slices_and_passes_shielded_ones_by(gke, core):
    create_pool(gke, slice_pool("open"))
    create_pool(gke, slice_pool("shielded", maintenancePolicy=SHIELD))
    before = {n.metadata.name: n.metadata.uid for n in nodes_of(core, "open")}

    assert gke.run_upgrade_round() == ["open"]
    assert status_of(gke, "open") == RECONCILING
    (upgrade,) = operations(gke, "UPGRADE_NODES", "open")  # automatic upgrades are UPGRADE_NODES operations
    assert upgrade.target_link.endswith("/nodePools/open")
    assert upgrade.status.name == "RUNNING"
    wait_running_again(gke, "open")
    assert operations(gke, "UPGRADE_NODES", "open")[0].status.name == "DONE"
    after = {n.metadata.name: n.metadata.uid for n in nodes_of(core, "open")}
    assert after.keys() == before.keys()  # the same hosts, as new Node objects: the whole slice recreated
    assert not set(after.values()) & set(before.values())
    assert status_of(gke, "shielded") == RUNNING


@pytest.mark.parametrize(
    ("scope", "minor", "held"),
    [
        ("NO_UPGRADES", False, True),
        ("NO_MINOR_OR_NODE_UPGRADES", False, True),
        ("NO_MINOR_UPGRADES", False, False),  # node patch upgrades pass
        ("NO_MINOR_UPGRADES", True, True),
    ],
)
def test_a_cluster_exclusion_holds_the_node_upgrades_its_scope_names(gke, scope, minor, held):
    create_pool(gke, slice_pool("open"))
    now = dt.datetime.now(dt.UTC)
    gke.add_maintenance_exclusion("freeze", now - dt.timedelta(hours=1), now + dt.timedelta(days=7), scope)
    cluster = gke.client().get_cluster(name=gke.parent)
    assert (
        cluster.maintenance_policy.window.maintenance_exclusions[
            "freeze"
        ].maintenance_exclusion_options.scope.name
        == scope
    )
    assert gke.run_upgrade_round(minor=minor) == ([] if held else ["open"])
    if not held:
        wait_running_again(gke, "open")


def test_at_end_of_support_no_exclusion_holds_the_upgrade(gke):
    create_pool(gke, slice_pool("shielded", maintenancePolicy=SHIELD))
    assert gke.run_upgrade_round(end_of_support=True) == ["shielded"]
    wait_running_again(gke, "shielded")


def test_an_auto_repair_of_one_host_drains_and_recreates_the_whole_slice_whatever_the_exclusions(gke, core):
    create_pool(gke, slice_pool("sick", maintenancePolicy=SHIELD))
    now = dt.datetime.now(dt.UTC)
    gke.add_maintenance_exclusion("freeze", now - dt.timedelta(hours=1), now + dt.timedelta(days=7))
    first, second = sorted(n.metadata.name for n in nodes_of(core, "sick"))
    before = {n.metadata.uid for n in nodes_of(core, "sick")}

    gke.auto_repair("sick", second)
    assert status_of(gke, "sick") == RECONCILING
    (repair,) = operations(gke, "AUTO_REPAIR_NODES", "sick")
    assert repair.target_link.endswith(f"/nodePools/sick/node/{second}")  # one node is the target
    wait_running_again(gke, "sick")
    assert operations(gke, "AUTO_REPAIR_NODES", "sick")[0].status.name == "DONE"
    after = nodes_of(core, "sick")
    assert {n.metadata.name for n in after} == {first, second}
    assert not {n.metadata.uid for n in after} & before  # both hosts recreated, not only the sick one


def test_gke_can_be_told_to_refuse_a_pools_own_exclusion_and_takes_the_pool_without_it(gke):
    from google.api_core import exceptions as google_errors

    gke.refuse_upgrade_shield()
    with pytest.raises(google_errors.BadRequest, match="exclusionUntilEndOfSupport"):
        gke.client().create_node_pool(
            parent=gke.parent, node_pool=slice_pool("shielded", maintenancePolicy=SHIELD)
        )
    create_pool(gke, slice_pool("bare"))  # the same pool without the field is taken
    gke.clear_faults()
    create_pool(gke, slice_pool("shielded", maintenancePolicy=SHIELD))  # back to GKE's default: taken


def test_a_metadata_update_runs_as_upgrade_nodes_and_leaves_the_nodes_alone(gke, core):
    create_pool(gke, slice_pool("labelled"))
    before = {n.metadata.name: n.metadata.uid for n in nodes_of(core, "labelled")}
    operation = gke.update_node_pool("labelled", gke_seconds=2500)  # 5 s on the test bed
    assert status_of(gke, "labelled") == RECONCILING
    (update,) = [op for op in operations(gke, "UPGRADE_NODES", "labelled") if op.name == operation]
    assert update.status != container_v1.Operation.Status.DONE
    wait_running_again(gke, "labelled")
    assert gke.operations.get(operation).status == container_v1.Operation.Status.DONE
    assert {n.metadata.name: n.metadata.uid for n in nodes_of(core, "labelled")} == before
    assert all(not n.spec.unschedulable for n in nodes_of(core, "labelled"))  # never cordoned
