"""The TPU catalog: what GKE offers per TPU generation, and the shape of one slice.

Pure data and arithmetic. Facts from GKE's "Plan TPUs in GKE" and Cloud TPU docs, xpk's system
catalog and GKE's tpu-provisioner (see shared/reference/gke-tpu.md). Rules used:
  chips = product of the topology's dimensions; hosts (VMs) = max(chips / chips per VM, 1).
  2D generations take AxB, 3D generations take AxBxC, dimensions in ascending order (v4's multiples-of-4
  shapes in any order: xpk's catalog builds them without that rule).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final


class CatalogError(ValueError):
    """A TPU request GKE cannot serve. `field` is the spec path to blame (relative to spec.tpu)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class MachineType:
    name: str
    chips_per_vm: int


@dataclass(frozen=True)
class Generation:
    """One TPU generation as GKE exposes it."""

    type: str  # the name in our spec (spec.tpu.type)
    accelerator: str  # node label cloud.google.com/gke-tpu-accelerator
    dimensions: int  # 2 (AxB torus) or 3 (AxBxC torus)
    machine_types: tuple[MachineType, ...]
    max_chips: int  # the largest slice GKE provisions as one node pool
    # 2D generations: every topology GKE accepts. 3D generations: the small shapes; larger ones
    # follow the rule "each dimension a multiple of 4" up to max_chips.
    topologies: tuple[str, ...]
    # Ironwood places multi-host pools with a workload policy instead of a tpuTopology field.
    multi_host_needs_workload_policy: bool = False
    # v4 takes its multiples-of-4 shapes in any order (8x4x4 as well as 4x4x8); the others only ascending.
    # xpk's catalog: generate_tpu_topologies(max_cubes=64, enforce_nondecreasing=False) for v4 and the
    # ascending default for v5p and tpu7x (AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py).
    # Its small shapes stay the four listed, in that order, for every generation.
    any_dimension_order: bool = False
    # TensorFlow runs on it (Cloud TPU's TPU7x page: JAX and PyTorch only).
    runs_tensorflow: bool = True

    def machine_type(self, name: str) -> MachineType | None:
        return next((m for m in self.machine_types if m.name == name), None)


@dataclass(frozen=True)
class SliceShape:
    """One TPU slice: what one node pool holds and what every pod of it asks for."""

    generation: Generation
    topology: str
    machine_type: MachineType
    chips: int
    hosts: int

    @property
    def chips_per_host(self) -> int:
        return self.machine_type.chips_per_vm

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


_SMALL_3D: Final = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
_TORUS_2D: Final = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")

GENERATIONS: Final[dict[str, Generation]] = {
    g.type: g
    for g in (
        Generation(
            type="v4",
            accelerator="tpu-v4-podslice",
            dimensions=3,
            machine_types=(MachineType("ct4p-hightpu-4t", 4),),
            max_chips=4096,
            topologies=_SMALL_3D,
            any_dimension_order=True,
        ),
        Generation(
            type="v5e",
            accelerator="tpu-v5-lite-podslice",
            dimensions=2,
            machine_types=(
                MachineType("ct5lp-hightpu-1t", 1),
                MachineType("ct5lp-hightpu-4t", 4),
                MachineType("ct5lp-hightpu-8t", 8),
            ),
            max_chips=256,
            topologies=_TORUS_2D,
        ),
        Generation(
            type="v5p",
            accelerator="tpu-v5p-slice",
            dimensions=3,
            machine_types=(MachineType("ct5p-hightpu-4t", 4),),
            max_chips=8960,
            topologies=_SMALL_3D,
        ),
        Generation(
            type="v6e",
            accelerator="tpu-v6e-slice",
            dimensions=2,
            machine_types=(
                MachineType("ct6e-standard-1t", 1),
                MachineType("ct6e-standard-4t", 4),
                MachineType("ct6e-standard-8t", 8),
            ),
            max_chips=256,
            topologies=_TORUS_2D,
        ),
        Generation(
            type="tpu7x",
            accelerator="tpu7x",
            dimensions=3,
            # tpu7x-standard-1t is one chip, labelled 1x1x1 (GKE's TPU7x page).
            machine_types=(MachineType("tpu7x-standard-1t", 1), MachineType("tpu7x-standard-4t", 4)),
            max_chips=9216,
            topologies=("1x1x1", *_SMALL_3D),
            multi_host_needs_workload_policy=True,
            runs_tensorflow=False,
        ),
    )
}

TPU_TYPES: Final = tuple(GENERATIONS)

# "TPU v3 and v4 are not supported" for flex-start (GKE "About flex-start provisioning mode"). TPU7x is not
# listed there, but xpk ships Ironwood flex-start recipes and makes those pools as for the other generations
# (AI-Hypercomputer/xpk docs/usage/tpu7x/recipes/flex_filestore_recipe.md, flex_lustre_recipe.md:
# `xpk cluster create --tpu-type=tpu7x-2x2x2 --flex`; src/xpk/core/capacity.py: --flex-start
# --enable-autoscaling --location-policy=ANY --reservation-affinity=none --no-enable-autorepair --max-nodes,
# plus --placement-policy for a multi-host tpu7x pool, src/xpk/core/nodepool.py). Zones and the minimum GKE
# versions are checked against the cluster by the operator and GKE.
FLEX_START_TYPES: Final = ("v5e", "v5p", "v6e", "tpu7x")

# Which TPU generations each zone offers, and the copy each row was read from (ZONE_SOURCES). A snapshot:
# Google adds zones and generations, so the catalog refuses at admission only what a verified row says a zone
# lacks; a zone it does not list, or lists from an unverified row, is a warning and is asked of GKE, whose
# own refusal (a 400 "Invalid machine type ... in zone") shows as NodePoolRejected (zone_problem,
# zone_warning). Single-tenant zones are left out. An AI zone
# (https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones) belongs to its region: its name is the
# region, '-ai', a number and the parent zone's letter; it must be enabled per project ("Manage access to AI
# zones") before GKE makes a pool there.
TPU_ZONES_PAGE: Final = (
    "Cloud TPU 'TPU regions and zones' (https://docs.cloud.google.com/tpu/docs/regions-zones, also "
    "/tpu/docs/types-zones), stored copy"
)
FLEX_START_PAGE: Final = (
    "GKE 'About flex-start provisioning mode' "
    "(https://cloud.google.com/kubernetes-engine/docs/concepts/dws): its flex-start zones for v6e"
)
UNVERIFIED: Final = "unverified"
ZONE_GENERATIONS: Final[dict[str, tuple[str, ...]]] = {
    # North America
    "us-central1-a": ("v5e", "v5p"),
    "us-central1-b": ("v6e",),
    "us-central1-c": ("tpu7x",),
    "us-central1-ai1a": ("tpu7x", "v6e"),
    "us-central2-b": ("v4",),
    "us-east1-d": ("v6e",),
    "us-east5-a": ("v6e", "v5p"),
    "us-east5-b": ("v6e",),
    "us-south1-a": ("v5e",),
    "us-south1-ai1b": ("v6e",),
    "us-west1-c": ("v5e",),
    "us-west4-a": ("v5e",),
    # Europe
    "europe-west4-a": ("v6e",),
    "europe-west4-b": ("v5e", "v5p"),
    # Asia Pacific
    "asia-northeast1-b": ("v6e",),
    "asia-southeast1-b": ("v5e",),
}
# Where each row was read. Unverified rows (README, "The zone catalog"): europe-west4-b and asia-southeast1-b
# come from issue #27's audit and are not in a current copy of the page; us-central1-ai1a is inferred (one
# copy of the page says "us-central1-ai1", the only us-central1 AI zone Compute Engine's "AI zones" page
# names, and the zone's letter is not given).
ZONE_SOURCES: Final[dict[str, str]] = {
    "us-central1-a": TPU_ZONES_PAGE,
    "us-central1-b": TPU_ZONES_PAGE,
    "us-central1-c": TPU_ZONES_PAGE,
    "us-central1-ai1a": UNVERIFIED,
    "us-central2-b": TPU_ZONES_PAGE,
    "us-east1-d": TPU_ZONES_PAGE,
    "us-east5-a": TPU_ZONES_PAGE,
    "us-east5-b": TPU_ZONES_PAGE,
    "us-south1-a": TPU_ZONES_PAGE,
    "us-south1-ai1b": TPU_ZONES_PAGE,
    "us-west1-c": TPU_ZONES_PAGE,
    "us-west4-a": TPU_ZONES_PAGE,
    "europe-west4-a": TPU_ZONES_PAGE,
    "europe-west4-b": UNVERIFIED,
    "asia-northeast1-b": FLEX_START_PAGE,
    "asia-southeast1-b": UNVERIFIED,
}

# The same table by generation: the zones that offer each, in the table's order.
ZONES: Final[dict[str, tuple[str, ...]]] = {
    tpu_type: tuple(zone for zone, offered in ZONE_GENERATIONS.items() if tpu_type in offered)
    for tpu_type in TPU_TYPES
}


# The catalog's refusals as templates: the operator fills them in Python, the CRD's CEL rules
# (api/cel_catalog.py) with CEL expressions, so `kubectl apply` and the operator say the same thing.
ZONE_WITHOUT_TYPE: Final = "{zone} does not offer {type} TPUs; zones that do: {zones}"
TOPOLOGY_WRONG_RANK: Final = "'{topology}' is not a {type} topology: {type} takes {shape}; valid: {valid}"
TOPOLOGY_TOO_LARGE: Final = (
    "'{topology}' has {chips} chips, more than the largest {type} slice ({max_chips} chips); "
    "use more slices instead"
)
TOPOLOGY_UNKNOWN: Final = "'{topology}' is not a {type} topology; valid: {valid}"
MACHINE_TYPE_UNKNOWN: Final = "'{machine}' is not a {type} machine type; valid: {names}"
ONE_CHIP_MACHINE: Final = "{machine} has 1 chip and serves only topology {one_chip}, not {topology}"
EIGHT_CHIP_MACHINE: Final = "{machine} has 8 chips and serves only topology 2x4, not {topology}"
FOUR_CHIP_MACHINE: Final = "{machine} has 4 chips and cannot serve topology {topology}"


def rank_name(dimensions: int) -> str:
    return "AxB (2D)" if dimensions == 2 else "AxBxC (3D)"


def machine_type_names(generation: Generation) -> str:
    return ", ".join(m.name for m in generation.machine_types)


def zone_verified(zone: str) -> bool:
    """The catalog lists `zone` from a copy it cites (not unlisted, not an unverified row)."""
    return ZONE_SOURCES.get(zone, UNVERIFIED) != UNVERIFIED


def zone_problem(tpu_type: str, zone: str) -> str | None:
    """Why `zone` cannot hold this generation, as a verified row of the catalog says (None: it can, or the
    catalog does not know: zone_warning)."""
    offered = ZONES.get(tpu_type, ())
    if zone in offered or not zone_verified(zone):
        return None
    return ZONE_WITHOUT_TYPE.format(zone=zone, type=tpu_type, zones=", ".join(offered))


def zone_warning(tpu_type: str, zone: str) -> str | None:
    """What a user should know before GKE is asked for a pool in `zone`: the catalog does not list it (or
    lists it from an unverified row). None when a verified row says the zone offers the generation."""
    if zone_verified(zone) and zone in ZONES.get(tpu_type, ()):
        return None
    row = "does not list" if zone not in ZONE_GENERATIONS else "lists from an unverified row"
    return (
        f"{zone} for {tpu_type}: tpujob's zone catalog {row} it (a snapshot of Cloud TPU's regions and "
        "zones): asked of GKE anyway; a refusal shows as NodePoolRejected. An AI zone must be enabled for "
        "the project first (Compute Engine, 'Manage access to AI zones')"
    )


def zones_offering(tpu_type: str, zones: Iterable[str]) -> list[str]:
    """The zones of `zones` that offer this generation, in their order."""
    return [zone for zone in zones if zone in ZONES.get(tpu_type, ())]


def parse_topology(topology: str) -> tuple[int, ...] | None:
    """'2x2x4' -> (2, 2, 4); None when it is not positive integers joined by 'x'."""
    parts = topology.split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        return None
    return tuple(int(p) for p in parts)


def topology_chips(topology: str) -> int:
    dims = parse_topology(topology)
    if dims is None:
        raise CatalogError("topology", f"{topology!r} is not a topology like 2x2 or 2x2x4")
    return math.prod(dims)


def describe_valid_topologies(generation: Generation) -> str:
    """The 'valid: ...' part of an error message, short enough to read."""
    listed = ", ".join(generation.topologies)
    if generation.dimensions == 2:
        return listed
    order = "in any order" if generation.any_dimension_order else "with A<=B<=C"
    return (
        f"{listed}, or AxBxC {order} each a multiple of 4 "
        f"(4x4x4, 4x4x8, 4x8x8, 8x8x8, ...) up to {generation.max_chips} chips"
    )


def _topology_problem(generation: Generation, topology: str) -> str | None:
    """Why GKE would refuse this topology for this generation, or None when it is valid."""
    dims = parse_topology(topology)
    valid = describe_valid_topologies(generation)
    if dims is None:
        return f"{topology!r} is not a topology; write it as dimensions joined by 'x'; valid: {valid}"
    if len(dims) != generation.dimensions:
        return TOPOLOGY_WRONG_RANK.format(
            topology=topology, type=generation.type, shape=rank_name(generation.dimensions), valid=valid
        )
    if topology in generation.topologies:
        return None
    chips = math.prod(dims)
    if chips > generation.max_chips:
        return TOPOLOGY_TOO_LARGE.format(
            topology=topology, chips=chips, type=generation.type, max_chips=generation.max_chips
        )
    multiples_of_4 = generation.dimensions == 3 and all(d % 4 == 0 for d in dims)
    ascending = list(dims) == sorted(dims)
    if multiples_of_4 and (ascending or generation.any_dimension_order):
        return None
    ordered = "x".join(str(d) for d in sorted(dims))
    if (
        not ascending
        and not generation.any_dimension_order
        and _topology_problem(generation, ordered) is None
    ):
        return f"{topology!r} is not a {generation.type} topology: write the dimensions ascending ({ordered})"
    return TOPOLOGY_UNKNOWN.format(topology=topology, type=generation.type, valid=valid)


def _machine_type_problem(machine_type: MachineType, chips: int, topology: str) -> str | None:
    """Single-host machine types fit exactly one shape; the 4-chip ones tile larger slices."""
    per_vm = machine_type.chips_per_vm
    if per_vm == 1 and chips != 1:
        one_chip = "x".join("1" for _ in topology.split("x"))
        return ONE_CHIP_MACHINE.format(machine=machine_type.name, one_chip=one_chip, topology=topology)
    if per_vm == 8 and chips != 8:
        return EIGHT_CHIP_MACHINE.format(machine=machine_type.name, topology=topology)
    if per_vm == 4 and chips < 4:
        return FOUR_CHIP_MACHINE.format(machine=machine_type.name, topology=topology)
    if chips % per_vm:
        return f"topology {topology} ({chips} chips) is not a whole number of {machine_type.name} VMs"
    return None


def default_machine_type(generation: Generation, chips: int) -> MachineType:
    """The machine type GKE users pick for a topology: a single host when one VM holds the slice."""
    exact = next((m for m in generation.machine_types if m.chips_per_vm == chips), None)
    if exact is not None:
        return exact
    # Multi-host slices are built from 4-chip VMs on every generation.
    four = next(m for m in generation.machine_types if m.chips_per_vm == 4)
    return four


# A pass asks for the shape in several places (workers expected, pods, pools, metrics): resolved once per
# spec, since the catalog is fixed and the shape frozen. A bad spec raises each time (errors are not cached).
@functools.lru_cache(maxsize=1024)
def resolve_slice(tpu_type: str, topology: str, machine_type: str | None = None) -> SliceShape:
    """The slice GKE would build for this request, or CatalogError naming the field and the fix."""
    generation = GENERATIONS.get(tpu_type)
    if generation is None:
        raise CatalogError("type", f"{tpu_type!r} is not a TPU type; valid: {', '.join(TPU_TYPES)}")
    problem = _topology_problem(generation, topology)
    if problem:
        raise CatalogError("topology", problem)
    chips = topology_chips(topology)
    if machine_type is None:
        chosen = default_machine_type(generation, chips)
    else:
        found = generation.machine_type(machine_type)
        if found is None:
            raise CatalogError(
                "machineType",
                MACHINE_TYPE_UNKNOWN.format(
                    machine=machine_type, type=generation.type, names=machine_type_names(generation)
                ),
            )
        chosen = found
    problem = _machine_type_problem(chosen, chips, topology)
    if problem:
        raise CatalogError("machineType", problem)
    return SliceShape(
        generation=generation,
        topology=topology,
        machine_type=chosen,
        chips=chips,
        hosts=max(chips // chosen.chips_per_vm, 1),
    )


def machine_type_is_ambiguous(generation: Generation, topology: str) -> bool:
    """More than one machine type of the generation serves this topology (v5e/v6e 2x4: one 8-chip VM or
    two 4-chip VMs): pods on pools made elsewhere must name the machine type, or sit on the wrong nodes."""
    dims = parse_topology(topology)
    if dims is None:
        return False
    chips = math.prod(dims)
    fits = [m for m in generation.machine_types if _machine_type_problem(m, chips, topology) is None]
    return len(fits) > 1


def catalog_rows() -> list[tuple[str, str, str, int, int, str]]:
    """(type, accelerator label, topology, chips, hosts, machine type) for every listed shape."""
    rows = []
    for generation in GENERATIONS.values():
        shapes = list(generation.topologies)
        if generation.dimensions == 3:
            shapes += ["4x4x4", "4x4x8", "4x8x8", "8x8x8"]
        for topology in shapes:
            for machine in generation.machine_types:
                try:
                    shape = resolve_slice(generation.type, topology, machine.name)
                except CatalogError:
                    continue
                rows.append(
                    (
                        generation.type,
                        generation.accelerator,
                        topology,
                        shape.chips,
                        shape.hosts,
                        machine.name,
                    )
                )
    return rows
