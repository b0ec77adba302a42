"""Kueue's topology assignment on a `policy: existing` job's pods (status/tas.py): read from either Workload
version's shape as Kueue reads it (pkg/util/tas/tas_assignment.go InternalSeqFrom), each worker on the domain
its rank picks (pkg/controller/tas/topology_ungater.go rankToDomainID, podsToUngateInfo)."""

from __future__ import annotations

import pytest

from tests.unit.test_queue import ADMITTED, FLAVOR, QUEUE, admission, queued_job, step, workload
from tpujob import status as s
from tpujob.api.status import Phase
from tpujob.render import plan
from tpujob.render.cluster import Cluster
from tpujob.status.tas import TopologyAssignmentError, domains, worker_selectors

HOST = "kubernetes.io/hostname"
BLOCK = "cloud.google.com/gce-topology-block"
# Four hosts: two on node a-1 and a-2 of block a, two on b-7 and b-9 of block b.
V1BETA1 = {
    "levels": [BLOCK, HOST],
    "domains": [
        {"values": ["a", "a-1"], "count": 1},
        {"values": ["a", "a-2"], "count": 1},
        {"values": ["b", "b-7"], "count": 1},
        {"values": ["b", "b-9"], "count": 1},
    ],
}
V1BETA2 = {  # the same, as Kueue v0.15+ packs it (compactSliceEncoding): two slices, prefix and universal
    "levels": [BLOCK, HOST],
    "slices": [
        {
            "domainCount": 2,
            "valuesPerLevel": [{"universal": "a"}, {"individual": {"prefix": "a-", "roots": ["1", "2"]}}],
            "podCounts": {"universal": 1},
        },
        {
            "domainCount": 2,
            "valuesPerLevel": [{"universal": "b"}, {"individual": {"prefix": "b-", "roots": ["7", "9"]}}],
            "podCounts": {"individual": [1, 1]},
        },
    ],
}
WANTED = (
    {BLOCK: "a", HOST: "a-1"},
    {BLOCK: "a", HOST: "a-2"},
    {BLOCK: "b", HOST: "b-7"},
    {BLOCK: "b", HOST: "b-9"},
)


@pytest.mark.parametrize("assignment", [V1BETA1, V1BETA2], ids=["v1beta1", "v1beta2"])
def test_each_version_reads_as_the_same_worker_domains(assignment):
    assert worker_selectors(assignment, 4) == WANTED


def test_a_domain_of_several_pods_takes_consecutive_ranks_and_suffixes_count():
    assignment = {
        "levels": [HOST],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"prefix": "n", "suffix": "-tpu", "roots": ["1", "2"]}}],
                "podCounts": {"individual": [3, 1]},
            }
        ],
    }
    assert domains(assignment) == ([HOST], [(("n1-tpu",), 3), (("n2-tpu",), 1)])
    assert [w[HOST] for w in worker_selectors(assignment, 4)] == ["n1-tpu"] * 3 + ["n2-tpu"]


@pytest.mark.parametrize(
    ("assignment", "field"),
    [
        ("text", "topologyAssignment: not an object"),
        ({"levels": [], "domains": []}, "topologyAssignment.levels"),
        ({"levels": [HOST], "domains": [{"values": ["a", "b"], "count": 1}]}, "domains[0].values: 2 values"),
        ({"levels": [HOST], "domains": [{"values": ["a"], "count": 0}]}, "domains[0].count"),
        ({"levels": [HOST], "domains": [{"values": ["a"], "count": True}]}, "domains[0].count"),
        ({"levels": [HOST], "slices": [{"domainCount": 1}]}, "slices[0].valuesPerLevel"),
        (
            {
                "levels": [HOST],
                "slices": [
                    {
                        "domainCount": 2,
                        "valuesPerLevel": [{"universal": "n"}],
                        "podCounts": {"individual": [1]},
                    }
                ],
            },
            "slices[0].podCounts",
        ),
        (
            {
                "levels": [HOST],
                "slices": [
                    {
                        "domainCount": 2,
                        "valuesPerLevel": [{"individual": {"roots": ["x"]}}],
                        "podCounts": {"universal": 1},
                    }
                ],
            },
            "valuesPerLevel[0].individual.roots: no value for domain 1",
        ),
    ],
)
def test_a_malformed_assignment_raises_naming_the_field(assignment, field):
    with pytest.raises(TopologyAssignmentError, match=field.replace("[", r"\[").replace("]", r"\]")):
        worker_selectors(assignment, 1)


def test_an_assignment_that_does_not_place_each_host_raises():
    with pytest.raises(TopologyAssignmentError, match="places 4 pod"):
        worker_selectors(V1BETA1, 2)


def test_an_assignment_that_splits_a_slice_over_node_pools_raises_naming_them():
    pool = "cloud.google.com/gke-nodepool"
    split = {
        "levels": [pool, HOST],
        "domains": [{"values": ["tpu-a", "a-1"], "count": 1}, {"values": ["tpu-b", "b-1"], "count": 1}],
    }
    with pytest.raises(TopologyAssignmentError, match="splits the slice over node pools tpu-a, tpu-b"):
        worker_selectors(split, 2)
    together = {
        **split,
        "domains": [{"values": ["tpu-a", "a-1"], "count": 1}, {"values": ["tpu-a", "a-2"], "count": 1}],
    }
    assert [w[HOST] for w in worker_selectors(together, 2)] == ["a-1", "a-2"]


def tas_queue(topology):
    found = admission()
    found["podSetAssignments"][0]["topologyAssignment"] = topology
    return s.QueueView(QUEUE, workload=workload(*ADMITTED, admission=found), flavors={FLAVOR.name: FLAVOR})


def test_an_existing_pool_job_puts_each_worker_on_its_assigned_domain():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"}, nodePool={"policy": "existing"})
    decision = step(job, tas_queue(V1BETA2))
    assert decision.status.phase != Phase.FAILED, decision.status.message
    assert decision.create_pools == [] and decision.create_pods == s.expected_workers(job)
    placement = decision.placement[0]
    assert placement.worker_node_selectors == WANTED
    for worker, wanted in enumerate(WANTED):
        selector = plan.pod(job, Cluster(), 0, worker, placement=placement)["spec"]["nodeSelector"]
        assert {k: selector[k] for k in wanted} == wanted
        assert selector["cloud.google.com/gke-tpu-topology"] == "2x2x4"  # the job's own selectors stay
        assert FLAVOR.node_labels.items() <= selector.items()  # and the flavor's


def test_an_assignment_the_job_cannot_follow_stops_it_naming_the_field():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"}, nodePool={"policy": "existing"})
    short = {"levels": [HOST], "domains": [{"values": ["n1"], "count": 1}]}
    decision = step(job, tas_queue(short))
    assert (decision.status.phase, decision.status.reason) == (Phase.FAILED, "FailedToStart")
    assert "podSetAssignments[slice-0].topologyAssignment: places 1 pod(s)" in decision.status.message
    assert "4 host(s)" in decision.status.message
    assert decision.create_pods == []
