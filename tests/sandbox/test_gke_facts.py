"""The simulation's own statement of GKE's node pool rules (pure, no cluster)."""

from __future__ import annotations

import pytest

from tpujob import tpu
from tpujob_sandbox import gke_facts
from tpujob_sandbox.gke_facts import InvalidNodePool, pool_shape


@pytest.mark.parametrize(
    ("machine", "count", "topology", "nodes", "label"),
    [
        ("ct5lp-hightpu-1t", 1, "", 1, "1x1"),
        ("ct5lp-hightpu-4t", 3, "", 3, "2x2"),  # three independent single-host slices
        ("ct5lp-hightpu-8t", 1, "", 1, "2x4"),
        ("ct5lp-hightpu-4t", 2, "2x4", 2, "2x4"),
        ("ct5lp-hightpu-4t", 4, "4x4", 4, "4x4"),
        ("ct5lp-hightpu-4t", 64, "16x16", 64, "16x16"),
        ("ct6e-standard-4t", 16, "8x8", 16, "8x8"),
        ("ct4p-hightpu-4t", 2, "2x2x2", 2, "2x2x2"),
        ("ct5p-hightpu-4t", 16, "4x4x4", 16, "4x4x4"),
        ("e2-standard-4", 2, "", 2, ""),
        # A single-host pool may name its own VM's topology (GKE's tpu-provisioner sends it).
        ("ct5lp-hightpu-4t", 1, "2x2", 1, "2x2"),
        ("ct6e-standard-8t", 1, "2x4", 1, "2x4"),
        ("tpu7x-standard-1t", 1, "", 1, "1x1x1"),
        ("tpu7x-standard-4t", 2, "2x2x2", 2, "2x2x2"),
    ],
)
def test_valid_pools_and_the_nodes_gke_builds(machine, count, topology, nodes, label):
    shape = pool_shape("pool", machine, count, topology)
    assert (shape.nodes, shape.topology) == (nodes, label)


@pytest.mark.parametrize(
    ("machine", "count", "topology", "message"),
    [
        ("ct5lp-hightpu-1t", 4, "2x2", "one-chip machine type"),
        ("ct5lp-hightpu-1t", 1, "1x1", "one-chip machine type"),
        ("ct5lp-hightpu-8t", 2, "4x4", "single-host TPU machine type"),
        ("ct5lp-hightpu-8t", 1, "2x2", "cannot be built"),
        ("ct5lp-hightpu-4t", 2, "2x2", "is one VM"),
        ("ct5lp-hightpu-4t", 8, "4x4", "needs exactly 4 nodes"),
        ("ct5lp-hightpu-4t", 1, "3x3", "cannot be built"),
        ("ct5lp-hightpu-4t", 128, "16x32", "at most 256"),
        ("ct4p-hightpu-4t", 4, "4x4", "AxBxC"),
        ("e2-standard-4", 1, "2x2", "not a TPU machine type"),
        ("ct5lp-hightpu-4t", 0, "", "at least 1"),
        ("ct9-hightpu-4t", 1, "", "Invalid machine type"),
    ],
)
def test_invalid_pools_are_refused_with_gke_like_messages(machine, count, topology, message):
    with pytest.raises(InvalidNodePool, match=message):
        pool_shape("pool", machine, count, topology)


def test_node_allocatable_follows_gke_reservations():
    assert gke_facts.allocatable_cpu_millis(4) == 4000 - 80
    assert gke_facts.allocatable_memory_mib(16) == int((16 - 1 - 0.8 - 0.8) * 1024 - 100)


@pytest.mark.parametrize(
    ("generation", "topology"),
    [
        ("v5e", "1x1"), ("v5e", "2x2"), ("v5e", "2x4"), ("v5e", "4x4"), ("v5e", "16x16"),
        ("v6e", "2x2"), ("v6e", "8x8"), ("v4", "2x2x1"), ("v4", "2x2x4"), ("v5p", "4x4x4"),
    ],
)  # fmt: skip
def test_the_operator_catalog_agrees_with_gke(generation, topology):
    """The operator's catalog (tpujob.tpu) asks GKE for what GKE builds: same hosts, chips and label."""
    shape = tpu.resolve_slice(generation, topology)
    machine = gke_facts.machine_type(shape.machine_type.name)
    topology = shape.topology if shape.multi_host else ""
    built = pool_shape("pool", machine.name, shape.hosts, topology)
    assert built.nodes == shape.hosts
    assert built.topology == shape.topology
    assert machine.chips == shape.chips_per_host
    assert machine.accelerator == shape.generation.accelerator


def test_the_operators_zone_catalog_and_the_simulated_gkes_agree():
    """Two statements of Cloud TPU's "TPU regions and zones" table: the operator's (tpu.ZONE_GENERATIONS)
    and the test bed's (zones.TPU_MACHINE_TYPES_BY_ZONE); each zone offers the same generations in both."""
    from tpujob_sandbox.gke import zones

    generation_of = {m.name: g.type for g in tpu.GENERATIONS.values() for m in g.machine_types}
    simulated = {
        zone: {generation_of[machine] for machine in machines}
        for zone, machines in zones.TPU_MACHINE_TYPES_BY_ZONE.items()
    }
    operator = {zone: set(offered) for zone, offered in tpu.ZONE_GENERATIONS.items()}
    assert simulated == operator
    # A zone offers every machine type of a generation it offers (the table lists generations, not VMs).
    for zone, machines in zones.TPU_MACHINE_TYPES_BY_ZONE.items():
        for generation in simulated[zone]:
            assert {m.name for m in tpu.GENERATIONS[generation].machine_types} <= machines, zone
    # Every zone of the table is a zone of a region the simulated GKE knows (AI zones included).
    assert all(zones.is_zone(zone) for zone in operator), [z for z in operator if not zones.is_zone(z)]
