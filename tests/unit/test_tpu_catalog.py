"""The TPU catalog against the facts in shared/reference/gke-tpu.md."""

from pathlib import Path

import pytest

from tpujob import tpu

# (type, topology, machine type or None for the default) -> (chips, hosts, machine type, accelerator)
FACTS = [
    ("v4", "2x2x1", None, 4, 1, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("v4", "2x2x2", None, 8, 2, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("v4", "2x2x4", None, 16, 4, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("v4", "2x4x4", None, 32, 8, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("v4", "4x4x4", None, 64, 16, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("v4", "4x4x8", None, 128, 32, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("v4", "16x16x16", None, 4096, 1024, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    # v4 takes its multiples-of-4 shapes in any order (xpk's catalog): 8x4x4 and 4x8x4 are 4x4x8 turned.
    ("v4", "8x4x4", None, 128, 32, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("v4", "4x8x4", None, 128, 32, "ct4p-hightpu-4t", "tpu-v4-podslice"),
    ("tpu7x", "1x1x1", None, 1, 1, "tpu7x-standard-1t", "tpu7x"),
    ("v5e", "1x1", None, 1, 1, "ct5lp-hightpu-1t", "tpu-v5-lite-podslice"),
    ("v5e", "2x2", None, 4, 1, "ct5lp-hightpu-4t", "tpu-v5-lite-podslice"),
    ("v5e", "2x4", None, 8, 1, "ct5lp-hightpu-8t", "tpu-v5-lite-podslice"),
    ("v5e", "2x4", "ct5lp-hightpu-4t", 8, 2, "ct5lp-hightpu-4t", "tpu-v5-lite-podslice"),
    ("v5e", "4x4", None, 16, 4, "ct5lp-hightpu-4t", "tpu-v5-lite-podslice"),
    ("v5e", "4x8", None, 32, 8, "ct5lp-hightpu-4t", "tpu-v5-lite-podslice"),
    ("v5e", "8x8", None, 64, 16, "ct5lp-hightpu-4t", "tpu-v5-lite-podslice"),
    ("v5e", "8x16", None, 128, 32, "ct5lp-hightpu-4t", "tpu-v5-lite-podslice"),
    ("v5e", "16x16", None, 256, 64, "ct5lp-hightpu-4t", "tpu-v5-lite-podslice"),
    ("v5p", "2x2x1", None, 4, 1, "ct5p-hightpu-4t", "tpu-v5p-slice"),
    ("v5p", "2x2x2", None, 8, 2, "ct5p-hightpu-4t", "tpu-v5p-slice"),
    ("v5p", "2x2x4", None, 16, 4, "ct5p-hightpu-4t", "tpu-v5p-slice"),
    ("v5p", "2x4x4", None, 32, 8, "ct5p-hightpu-4t", "tpu-v5p-slice"),
    ("v5p", "4x4x4", None, 64, 16, "ct5p-hightpu-4t", "tpu-v5p-slice"),
    ("v5p", "8x8x16", None, 1024, 256, "ct5p-hightpu-4t", "tpu-v5p-slice"),
    ("v6e", "1x1", None, 1, 1, "ct6e-standard-1t", "tpu-v6e-slice"),
    ("v6e", "2x2", None, 4, 1, "ct6e-standard-4t", "tpu-v6e-slice"),
    ("v6e", "2x4", None, 8, 1, "ct6e-standard-8t", "tpu-v6e-slice"),
    ("v6e", "2x4", "ct6e-standard-4t", 8, 2, "ct6e-standard-4t", "tpu-v6e-slice"),
    ("v6e", "4x4", None, 16, 4, "ct6e-standard-4t", "tpu-v6e-slice"),
    ("v6e", "4x8", None, 32, 8, "ct6e-standard-4t", "tpu-v6e-slice"),
    ("v6e", "8x8", None, 64, 16, "ct6e-standard-4t", "tpu-v6e-slice"),
    ("v6e", "8x16", None, 128, 32, "ct6e-standard-4t", "tpu-v6e-slice"),
    ("v6e", "16x16", None, 256, 64, "ct6e-standard-4t", "tpu-v6e-slice"),
    ("tpu7x", "2x2x1", None, 4, 1, "tpu7x-standard-4t", "tpu7x"),
    ("tpu7x", "2x2x2", None, 8, 2, "tpu7x-standard-4t", "tpu7x"),
    ("tpu7x", "4x4x4", None, 64, 16, "tpu7x-standard-4t", "tpu7x"),
]


@pytest.mark.parametrize(
    ("tpu_type", "topology", "machine", "chips", "hosts", "expected_machine", "label"), FACTS
)
def test_slice_shape_matches_gke_facts(tpu_type, topology, machine, chips, hosts, expected_machine, label):
    shape = tpu.resolve_slice(tpu_type, topology, machine)
    assert (shape.chips, shape.hosts, shape.machine_type.name) == (chips, hosts, expected_machine)
    assert shape.generation.accelerator == label
    assert shape.hosts * shape.chips_per_host == shape.chips
    assert shape.multi_host == (hosts > 1)


def test_every_listed_topology_of_every_generation_resolves_consistently():
    seen_types = set()
    for generation in tpu.GENERATIONS.values():
        for topology in generation.topologies:
            shape = tpu.resolve_slice(generation.type, topology)
            seen_types.add(generation.type)
            assert shape.hosts * shape.chips_per_host == shape.chips == tpu.topology_chips(topology)
            assert len(topology.split("x")) == generation.dimensions
            assert generation.machine_type(shape.machine_type.name) is shape.machine_type
    assert seen_types == {"v4", "v5e", "v5p", "v6e", "tpu7x"}


def test_catalog_rows_cover_every_generation_and_are_consistent():
    rows = tpu.catalog_rows()
    assert {row[0] for row in rows} == set(tpu.TPU_TYPES)
    for tpu_type, _label, topology, chips, hosts, machine in rows:
        per_vm = tpu.GENERATIONS[tpu_type].machine_type(machine).chips_per_vm
        assert hosts * per_vm == chips == tpu.topology_chips(topology)


@pytest.mark.parametrize(
    ("tpu_type", "topology", "machine", "field", "fragment"),
    [
        ("v3", "2x2", None, "type", "valid: v4, v5e, v5p, v6e, tpu7x"),
        ("v5e", "3x3", None, "topology", "valid: 1x1, 2x2, 2x4, 4x4"),
        ("v5e", "2x2x2", None, "topology", "v5e takes AxB (2D)"),
        ("v4", "2x2", None, "topology", "v4 takes AxBxC (3D)"),
        ("v5e", "32x32", None, "topology", "1024 chips, more than the largest v5e slice (256 chips)"),
        ("v5p", "4x4x2", None, "topology", "write the dimensions ascending (2x4x4)"),
        ("v5p", "4x4x6", None, "topology", "each a multiple of 4"),
        ("v4", "16x16x32", None, "topology", "more than the largest v4 slice"),
        ("v5e", "2x2", "ct5lp-hightpu-1t", "machineType", "serves only topology 1x1"),
        ("v5e", "4x4", "ct5lp-hightpu-8t", "machineType", "serves only topology 2x4"),
        ("v6e", "1x1", "ct6e-standard-4t", "machineType", "cannot serve topology 1x1"),
        ("v5e", "2x2", "ct6e-standard-4t", "machineType", "not a v5e machine type"),
        ("v5e", "axb", None, "topology", "not a topology"),
        # v4's small shapes are the four listed, not turned (xpk lists 2x2x4, never 4x2x2).
        ("v4", "4x2x2", None, "topology", "AxBxC in any order each a multiple of 4"),
        ("tpu7x", "8x4x4", None, "topology", "write the dimensions ascending (4x4x8)"),
        # No ascending hint when the ascending shape is not valid either.
        ("v5p", "2x1x2", None, "topology", "valid: 2x2x1, 2x2x2"),
        ("tpu7x", "1x1x1", "tpu7x-standard-4t", "machineType", "cannot serve topology 1x1x1"),
        ("tpu7x", "2x2x1", "tpu7x-standard-1t", "machineType", "serves only topology 1x1x1"),
    ],
)
def test_requests_gke_would_refuse_name_the_field_and_the_choices(
    tpu_type, topology, machine, field, fragment
):
    with pytest.raises(tpu.CatalogError) as caught:
        tpu.resolve_slice(tpu_type, topology, machine)
    assert caught.value.field == field
    assert fragment in caught.value.message


def test_only_v4_takes_its_dimensions_in_any_order():
    turned = {t: g.any_dimension_order for t, g in tpu.GENERATIONS.items()}
    assert turned == {"v4": True, "v5e": False, "v5p": False, "v6e": False, "tpu7x": False}


@pytest.mark.parametrize(
    ("tpu_type", "topology", "ambiguous"),
    [
        ("v5e", "2x4", True),  # one ct5lp-hightpu-8t or two ct5lp-hightpu-4t
        ("v6e", "2x4", True),
        ("v5e", "1x1", False),
        ("v6e", "2x2", False),
        ("v6e", "4x4", False),
        ("v5p", "2x2x1", False),
        ("tpu7x", "1x1x1", False),
        ("tpu7x", "2x2x1", False),
        ("v5e", "big", False),
    ],
)
def test_machine_type_is_ambiguous_when_two_machine_types_serve_the_topology(tpu_type, topology, ambiguous):
    assert tpu.machine_type_is_ambiguous(tpu.GENERATIONS[tpu_type], topology) is ambiguous


# Cloud TPU's "TPU regions and zones" table (https://docs.cloud.google.com/tpu/docs/regions-zones), as
# issue #27 names the zones the old North-America table refused.
@pytest.mark.parametrize(
    ("tpu_type", "zone"),
    [
        ("v6e", "asia-northeast1-b"),  # named by examples/v6e-flex-start.yaml's own comment
        ("v6e", "europe-west4-a"),
        ("v5e", "europe-west4-b"),
        ("v5p", "europe-west4-b"),
        ("v5e", "asia-southeast1-b"),
        ("tpu7x", "us-central1-ai1a"),  # an AI zone
        ("v6e", "us-south1-ai1b"),  # an AI zone
        ("tpu7x", "us-central1-c"),
        ("v4", "us-central2-b"),
        ("v5e", "us-central1-a"),
        ("v5p", "us-central1-a"),
    ],
)
def test_zones_of_the_cloud_tpu_table_offer_their_generations(tpu_type, zone):
    assert tpu.zone_problem(tpu_type, zone) is None
    assert tpu_type in tpu.ZONE_GENERATIONS[zone]
    assert zone in tpu.ZONES[tpu_type]


@pytest.mark.parametrize(
    ("tpu_type", "zone"),
    [
        ("v6e", "us-central2-b"),  # only v4 there
        ("v5e", "asia-northeast1-b"),  # v6e only
        ("tpu7x", "us-central1-a"),
        ("v4", "europe-west4-a"),
    ],
)
def test_a_zone_is_refused_for_a_generation_it_lacks_naming_the_zones_that_offer_it(tpu_type, zone):
    """Only where a verified row of the catalog says so."""
    problem = tpu.zone_problem(tpu_type, zone)
    offered = ", ".join(tpu.ZONES[tpu_type])
    assert problem == f"{zone} does not offer {tpu_type} TPUs; zones that do: {offered}"
    assert tpu.zone_warning(tpu_type, zone) is not None


@pytest.mark.parametrize(
    ("tpu_type", "zone", "row"),
    [
        ("v6e", "us-central1-f", "does not list"),  # a real zone the catalog does not list
        ("v6e", "us-central1-ai2c", "does not list"),  # an AI zone Google may add
        ("v4", "europe-west4-b", "lists from an unverified row"),
        ("v5e", "europe-west4-b", "lists from an unverified row"),  # offered, but not verified
        ("v5p", "us-central1-ai1a", "lists from an unverified row"),
    ],
)
def test_a_zone_the_catalog_does_not_know_for_sure_is_a_warning_and_asked_of_gke(tpu_type, zone, row):
    assert tpu.zone_problem(tpu_type, zone) is None
    warning = tpu.zone_warning(tpu_type, zone)
    assert warning is not None and row in warning and "AI zone must be enabled" in warning


def test_every_row_of_the_zone_catalog_cites_its_copy_or_is_marked_unverified_in_the_docs():
    assert set(tpu.ZONE_SOURCES) == set(tpu.ZONE_GENERATIONS)
    assert set(tpu.ZONE_SOURCES.values()) <= {tpu.TPU_ZONES_PAGE, tpu.FLEX_START_PAGE, tpu.UNVERIFIED}
    page = (Path(__file__).parents[2] / "docs" / "concepts" / "capacity.md").read_text()
    section = page[page.index("## The zone catalog") :]
    for zone, source in tpu.ZONE_SOURCES.items():
        if source == tpu.UNVERIFIED:
            assert f"`{zone}`" in section[:4000], zone
    assert tpu.zone_warning("v5p", "us-central1-a") is None  # verified and offered: nothing to say


def test_every_generation_is_offered_somewhere_and_every_zone_offers_a_known_generation():
    assert all(tpu.ZONES[t] for t in tpu.TPU_TYPES)
    assert {g for offered in tpu.ZONE_GENERATIONS.values() for g in offered} == set(tpu.TPU_TYPES)


def test_zones_offering_keeps_the_given_order_and_drops_the_zones_without_the_type():
    zones = ["us-central1-b", "us-central1-a", "europe-west4-b", "us-central1"]
    assert tpu.zones_offering("v5e", zones) == ["us-central1-a", "europe-west4-b"]
    assert tpu.zones_offering("v6e", zones) == ["us-central1-b"]
    assert tpu.zones_offering("v4", zones) == []
