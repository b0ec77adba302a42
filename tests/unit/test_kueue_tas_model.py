"""The test bed's Kueue topology-aware scheduling (tpujob_sandbox.kueue.tas) on tables: where Kueue v0.19.2's
TAS snapshot would place a pod set, and the assignment in the served version's shape, read back by the
operator as Kueue reads it (status/tas.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_kueue_model import NOW, TPU, cluster_queue, local_queue, workload
from tpujob.status.tas import domains as operator_domains
from tpujob_sandbox.kueue import tas
from tpujob_sandbox.kueue.config import KueueConfig
from tpujob_sandbox.kueue.model import World, reconcile

POOL, HOST = "cloud.google.com/gke-nodepool", "kubernetes.io/hostname"
LEVELS = [POOL, HOST]


def node(
    name: str, pool: str, tpus: int = 4, ready: bool = True, taints: list | None = None, **labels: str
) -> dict:
    return {
        "metadata": {"name": name, "labels": {HOST: name, POOL: pool, "tpu": "yes", **labels}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {TPU: str(tpus), "cpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


# Pool a: one node; pool b: three nodes.
NODES = [node("a-1", "a"), node("b-1", "b"), node("b-2", "b"), node("b-3", "b")]


def tas_flavor(name: str = "f") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeLabels": {"tpu": "yes"}, "topologyName": "topo"}}


def topology() -> dict[str, Any]:
    return {"metadata": {"name": "topo"}, "spec": {"levels": [{"nodeLabel": level} for level in LEVELS]}}


def run(*workloads: dict, nodes: list[dict] | None = None, version: str = "v1beta2", quota: int = 64):
    world = World(
        flavors=[tas_flavor()],
        cluster_queues=[cluster_queue(quotas={"f": {TPU: quota}})],
        local_queues=[local_queue()],
        workloads=list(workloads),
        version=version,
        topologies=[topology()],
        nodes=NODES if nodes is None else nodes,
    )
    return reconcile(world, KueueConfig(), NOW)


def assignment_of(plan, name: str) -> dict | None:
    admission = plan.workload_status.get(("ns", name), {}).get("admission")
    return admission["podSetAssignments"][0].get("topologyAssignment") if admission else None


def hosts_of(found: dict) -> list[tuple[tuple[str, ...], int]]:
    return tas.decode(found)


def required(wl: dict, level: str, key: str = tas.REQUIRED) -> dict:
    for pod_set in wl["spec"]["podSets"]:
        pod_set["template"]["metadata"] = {"annotations": {key: level}}
    return wl


def test_an_implied_request_is_unconstrained_on_the_lowest_level_least_room_first():
    # Every node holds one 4-chip pod: the domains by (room, values), the first two taken.
    found = assignment_of(run(workload("w", hosts=2)), "w")
    assert found["levels"] == LEVELS
    assert hosts_of(found) == [(("a", "a-1"), 1), (("b", "b-1"), 1)]


def test_a_required_level_keeps_the_pod_set_in_one_domain_of_it():
    found = assignment_of(run(required(workload("w", hosts=3), POOL)), "w")
    assert hosts_of(found) == [(("b", "b-1"), 1), (("b", "b-2"), 1), (("b", "b-3"), 1)]


def test_a_required_level_that_cannot_hold_it_leaves_it_pending_in_kueues_words():
    plan = run(required(workload("w", hosts=4), POOL))
    assert assignment_of(plan, "w") is None
    message = plan.workload_status[("ns", "w")]["conditions"][0]["message"]
    assert 'topology "topo" allows to fit only 3 out of 4 pod(s)' in message


def test_a_preferred_level_goes_up_when_no_domain_holds_it():
    found = assignment_of(run(required(workload("w", hosts=4), POOL, tas.PREFERRED)), "w")
    assert sorted(v[1] for v, _ in hosts_of(found)) == ["a-1", "b-1", "b-2", "b-3"]


@pytest.mark.parametrize(
    ("nodes", "why"),
    [
        ([node("a-1", "a", ready=False)], "not Ready"),
        ([node("a-1", "a", taints=[{"key": "x", "effect": "NoSchedule"}])], "an untolerated taint"),
        (
            [{**node("a-1", "a"), "metadata": {"name": "a-1", "labels": {HOST: "a-1", POOL: "a"}}}],
            "not the flavor's",
        ),
        ([node("a-1", "a", tpus=2)], "too small"),
    ],
)
def test_nodes_kueue_would_exclude_hold_nothing(nodes, why):
    plan = run(workload("w", hosts=1), nodes=nodes)
    assert assignment_of(plan, "w") is None, why
    assert (
        "doesn't allow to fit any of 1 pod(s)"
        in plan.workload_status[("ns", "w")]["conditions"][0]["message"]
    )


def test_the_pods_node_selector_narrows_the_nodes():
    found = assignment_of(run(workload("w", hosts=1, selector={POOL: "b"})), "w")
    assert hosts_of(found) == [(("b", "b-1"), 1)]


def test_domains_placed_already_are_not_placed_again():
    first = run(workload("one", hosts=2))
    held = workload("one", hosts=2)
    held["status"] = first.workload_status[("ns", "one")]
    found = assignment_of(run(held, workload("two", hosts=2, age=1)), "two")
    assert hosts_of(found) == [(("b", "b-2"), 1), (("b", "b-3"), 1)]


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_the_assignment_is_in_the_served_shape_and_the_operator_reads_it_back(version):
    found = assignment_of(run(workload("w", hosts=3), version=version), "w")
    assert ("domains" in found) == (version == "v1beta1")
    assert operator_domains(found) == (LEVELS, tas.decode(found))
    if version == "v1beta2":  # compactSliceEncoding: one pod each, prefixes around the differing roots
        (piece,) = found["slices"]
        assert piece["podCounts"] == {"universal": 1} and piece["domainCount"] == 3


@pytest.mark.parametrize(
    ("values", "encoded"),
    [
        (["x", "x"], {"universal": "x"}),
        (
            ["node-1-tpu", "node-22-tpu"],
            {"individual": {"prefix": "node-", "suffix": "-tpu", "roots": ["1", "22"]}},
        ),
        (["ababa", "aba"], {"individual": {"suffix": "aba", "roots": ["ab", ""]}}),  # no overlap
        (["a", "b"], {"individual": {"roots": ["a", "b"]}}),
    ],
)
def test_compact_values_as_kueue_packs_them(values, encoded):
    assert tas._compact(values) == encoded
