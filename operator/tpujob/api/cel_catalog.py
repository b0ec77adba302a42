"""The CRD's rules that need the TPU catalog, generated from tpu.py (never copied by hand): the topologies
and machine types of each generation, which slices are one host (no Multislice of them), the zones of each
generation, flex-start's generations, where a workload policy is needed and where TensorFlow runs.

Each takes `tpu`, the CEL expression of a spec.tpu object ("self" on spec.tpu, "self.tpu" on spec). Single-
fault manifests get the operator's verdict, path and words; a rule that needs a valid slice (as the operator
judges only a shape that resolves) holds when the topology is not one, leaving that to the topology's rule.
"""

from __future__ import annotations

from tpujob import tpu as catalog
from tpujob.api import messages as m
from tpujob.api.cel_text import (
    FORBIDDEN,
    INVALID,
    REQUIRED,
    CelRule,
    all_of,
    any_of,
    cel_format,
    lit,
    number_text,
)
from tpujob.api.spec import MAX_SLICES, TOPOLOGY_PATTERN
from tpujob.api.validation import DEFAULT_TRAINER_REPOSITORY, multislice_problem

# Large 3D shapes the catalog allows by rule, not by list; a machine type that fails one of them serves
# only the listed shapes it passes (the 1- and 8-chip VMs), one that passes them all fails only listed ones.
_RULE_SHAPES = ("4x4x4", "4x4x8", "4x8x8", "8x8x8")


def _dims(tpu: str) -> str:
    return f"{tpu}.topology.split('x')"


def _chips(tpu: str, rank: int) -> str:
    return " * ".join(f"int({_dims(tpu)}[{i}])" for i in range(rank))


def shape_exists(generation: catalog.Generation, tpu: str) -> str:
    """The topology is one of this generation's (tpu._topology_problem finds none)."""
    listed = f"{tpu}.topology in {lit(list(generation.topologies))}"
    if generation.dimensions == 2:
        return listed
    dims = [f"int({_dims(tpu)}[{i}])" for i in range(3)]
    by_rule = [
        f"{_dims(tpu)}.size() == 3",
        f"{_dims(tpu)}.all(d, int(d) % 4 == 0)",
        f"{_chips(tpu, 3)} <= {generation.max_chips}",
    ]
    if not generation.any_dimension_order:
        by_rule.append(f"{dims[0]} <= {dims[1]} && {dims[1]} <= {dims[2]}")
    return any_of(listed, all_of(*by_rule))


def topology_exists(tpu: str, types: tuple[str, ...] = catalog.TPU_TYPES) -> str:
    """The topology is one of its type's, the type one of `types` (those a rule is about: a shorter rule)."""
    return all_of(
        f"{tpu}.topology.matches({lit(TOPOLOGY_PATTERN)})",
        any_of(
            *(
                all_of(f"{tpu}.type == {lit(g.type)}", shape_exists(g, tpu))
                for g in catalog.GENERATIONS.values()
                if g.type in types
            )
        ),
    )


def _slice_key(tpu: str) -> str:
    return f"{tpu}.type + '/' + {tpu}.topology + '/' + (has({tpu}.machineType) ? {tpu}.machineType : '')"


def _single_host_slices() -> dict[str, catalog.SliceShape]:
    """type/topology/machineType ('' for the default) of every slice that is one VM."""
    found = {}
    for generation in catalog.GENERATIONS.values():
        for topology in generation.topologies:
            for machine in (None, *(t.name for t in generation.machine_types)):
                try:
                    shape = catalog.resolve_slice(generation.type, topology, machine)
                except catalog.CatalogError:
                    continue
                if not shape.multi_host:
                    found[f"{generation.type}/{topology}/{machine or ''}"] = shape
    return found


def topology_rules() -> tuple[CelRule, ...]:
    """One rule per generation on spec.tpu: its topology exists (tpu._topology_problem's words)."""
    rules = []
    for g in catalog.GENERATIONS.values():
        valid = lit(catalog.describe_valid_topologies(g))
        words = {"topology": "self.topology", "type": lit(g.type), "valid": valid}
        wrong_rank = cel_format(
            catalog.TOPOLOGY_WRONG_RANK, shape=lit(catalog.rank_name(g.dimensions)), **words
        )
        too_large = cel_format(
            catalog.TOPOLOGY_TOO_LARGE,
            topology="self.topology",
            type=lit(g.type),
            # No string(int) in a message: the API server cannot bound its length, and prices the
            # message as if it were a whole request.
            chips=lit("too many"),
            max_chips=lit(str(g.max_chips)),
        )
        unknown = cel_format(catalog.TOPOLOGY_UNKNOWN, **words)
        rules.append(
            CelRule(
                rule=f"self.type != {lit(g.type)} || !self.topology.matches({lit(TOPOLOGY_PATTERN)}) || "
                + shape_exists(g, "self"),
                message=f"not a {g.type} topology; valid: {catalog.describe_valid_topologies(g)}",
                message_expression=f"{_dims('self')}.size() != {g.dimensions} ? {wrong_rank} : "
                f"({_chips('self', g.dimensions)} > {g.max_chips} ? {too_large} : {unknown})",
                field_path=".topology",
                reason=INVALID,
            )
        )
    return tuple(rules)


def _machine_pairs() -> tuple[list[str], list[str], list[str], dict[str, int]]:
    """machineType/topology pairs the exact machine types (one shape each) serve, pairs the tiling ones
    (4-chip VMs) cannot serve, the exact machine types, and every machine type's chips."""
    served: list[str] = []
    refused: list[str] = []
    exact_types: list[str] = []
    chips: dict[str, int] = {}
    for g in catalog.GENERATIONS.values():
        for machine in g.machine_types:
            chips[machine.name] = machine.chips_per_vm

            def serves(topology: str, machine: str = machine.name, generation: str = g.type) -> bool:
                try:
                    catalog.resolve_slice(generation, topology, machine)
                except catalog.CatalogError:
                    return False
                return True

            exact = g.dimensions == 3 and not all(serves(t) for t in _RULE_SHAPES)
            exact = exact or (g.dimensions == 2 and not serves(g.topologies[-1]))
            for topology in g.topologies:
                if exact and serves(topology):
                    served.append(f"{machine.name}/{topology}")
                elif not exact and not serves(topology):
                    refused.append(f"{machine.name}/{topology}")
            if exact:
                exact_types.append(machine.name)
    return served, refused, exact_types, chips


def _machine_known(tpu: str) -> str:
    names = {g.type: [t.name for t in g.machine_types] for g in catalog.GENERATIONS.values()}
    return f"({tpu}.machineType in {lit(names)}[{tpu}.type])"


def _machine_serves(tpu: str) -> str:
    """The machine type (one of the type's) serves the topology (tpu._machine_type_problem finds none)."""
    served, refused, exact, _ = _machine_pairs()
    pair = f"({tpu}.machineType + '/' + {tpu}.topology)"
    return (
        f"(!({pair} in {lit(refused)}) && (!({tpu}.machineType in {lit(exact)}) || {pair} in {lit(served)}))"
    )


def slice_resolves(tpu: str, types: tuple[str, ...] = catalog.TPU_TYPES) -> str:
    """tpu.resolve_slice gives a shape (the type one of `types`): the operator judges the rest of the spec
    against it."""
    machine = f"(!has({tpu}.machineType) || ({_machine_known(tpu)} && {_machine_serves(tpu)}))"
    return all_of(topology_exists(tpu, types), machine)


def multi_host(tpu: str, types: tuple[str, ...]) -> str:
    """A slice of one of `types` that resolves and is more than one VM."""
    return all_of(slice_resolves(tpu, types), f"!({_slice_key(tpu)} in {lit(list(_single_host_slices()))})")


def machine_type_rules() -> tuple[CelRule, ...]:
    joined = {g.type: catalog.machine_type_names(g) for g in catalog.GENERATIONS.values()}
    known = _machine_known("self")
    chips = _machine_pairs()[3]
    one_chip = "self.topology.split('x').size() == 2 ? '1x1' : '1x1x1'"
    words = {"machine": "self.machineType", "topology": "self.topology"}
    per_vm = f"{lit(chips)}[self.machineType]"
    return (
        CelRule(
            rule=f"!has(self.machineType) || {known}",
            message="not a machine type of this TPU type",
            message_expression=cel_format(
                catalog.MACHINE_TYPE_UNKNOWN,
                machine="self.machineType",
                type="self.type",
                names=f"{lit(joined)}[self.type]",
            ),
            field_path=".machineType",
            reason=INVALID,
        ),
        CelRule(
            rule=f"!has(self.machineType) || !{known} || !{topology_exists('self')} || "
            + _machine_serves("self"),
            message="this machine type cannot serve the topology",
            message_expression=f"{per_vm} == 1 ? "
            f"{cel_format(catalog.ONE_CHIP_MACHINE, one_chip=one_chip, **words)}"
            f" : ({per_vm} == 8 ? {cel_format(catalog.EIGHT_CHIP_MACHINE, **words)}"
            f" : {cel_format(catalog.FOUR_CHIP_MACHINE, **words)})",
            field_path=".machineType",
            reason=INVALID,
        ),
    )


def multislice_rule() -> CelRule:
    """slices > 1 only of multi-host slices; the message is validation.multislice_problem's, by slice."""
    assert m.MULTISLICE_OF_ONE_HOST.startswith("{slices}")
    tails = {key: multislice_problem(shape, "") for key, shape in _single_host_slices().items()}
    return CelRule(
        rule=f"self.slices <= 1 || !({_slice_key('self')} in {lit(list(tails))})",
        message="Multislice (slices > 1) needs multi-host slices; use a larger topology or slices: 1",
        message_expression=f"{number_text('self.slices', MAX_SLICES)} + {lit(tails)}[{_slice_key('self')}]",
        field_path=".slices",
        reason=INVALID,
    )


def tpu_rules() -> tuple[CelRule, ...]:
    """The rules on spec.tpu."""
    return (*topology_rules(), *machine_type_rules(), multislice_rule())


def _needs_workload_policy() -> str:
    needing = tuple(g.type for g in catalog.GENERATIONS.values() if g.multi_host_needs_workload_policy)
    return all_of(
        multi_host("self.tpu", needing),
        "(!has(self.nodePool) || self.nodePool.policy == 'create')",
    )


def spec_rules() -> tuple[CelRule, ...]:
    """The catalog's rules across spec.tpu and another part of the spec (they sit on spec)."""
    no_tensorflow = tuple(g.type for g in catalog.GENERATIONS.values() if not g.runs_tensorflow)
    image = "self.trainer.image"
    repository = f"{image}.substring({image}.lastIndexOf('/') + 1)"
    # Only verified rows refuse (tpu.zone_problem): an unlisted zone, or one from an unverified row, is asked
    # of GKE with a warning.
    zones = {
        zone: list(types) for zone, types in catalog.ZONE_GENERATIONS.items() if catalog.zone_verified(zone)
    }
    zones_of_type = {t: ", ".join(z) for t, z in catalog.ZONES.items()}
    zone = "self.nodePool.zone"
    return (
        CelRule(
            rule="!has(self.capacity) || self.capacity.mode != 'flexStart' || "
            f"self.tpu.type in {lit(list(catalog.FLEX_START_TYPES))}",
            message="flexStart does not offer this TPU type; use mode spot, reservation or onDemand",
            message_expression=cel_format(
                m.FLEX_START_TYPE, types=lit(", ".join(catalog.FLEX_START_TYPES)), type="self.tpu.type"
            ),
            field_path=".capacity.mode",
            reason=INVALID,
        ),
        CelRule(
            rule=f"!{slice_resolves('self.tpu', no_tensorflow)} || "
            f"!{repository}.startsWith({lit(DEFAULT_TRAINER_REPOSITORY)})",
            message="the TensorFlow trainer does not run on this TPU type; use a JAX or PyTorch/XLA image",
            message_expression=cel_format(m.TENSORFLOW_ELSEWHERE, image=image, type="self.tpu.type"),
            field_path=".trainer.image",
            reason=INVALID,
        ),
        CelRule(
            # Whatever the topology (the operator judges the zone of a slice that resolves): a zone is a zone.
            rule=f"!has(self.nodePool) || !has({zone}) || !({zone} in {lit(zones)}) || self.tpu.type in "
            f"{lit(zones)}[{zone}]",
            message="this zone does not offer this TPU type",
            message_expression=cel_format(
                catalog.ZONE_WITHOUT_TYPE,
                zone=zone,
                type="self.tpu.type",
                zones=f"{lit(zones_of_type)}[self.tpu.type]",
            ),
            field_path=".nodePool.zone",
            reason=INVALID,
        ),
        CelRule(
            rule=f"!{_needs_workload_policy()} || (has(self.nodePool) && has(self.nodePool.workloadPolicy))",
            message="multi-host pools of this TPU type are placed by a workload policy: name one",
            message_expression=cel_format(m.WORKLOAD_POLICY_NEEDED, type="self.tpu.type"),
            field_path=".nodePool.workloadPolicy",
            reason=REQUIRED,
        ),
        CelRule(
            rule="!has(self.nodePool) || !has(self.nodePool.workloadPolicy) || "
            f"!{slice_resolves('self.tpu')} || {_needs_workload_policy()}",
            message=m.WORKLOAD_POLICY_UNUSED,
            field_path=".nodePool.workloadPolicy",
            reason=FORBIDDEN,
        ),
    )
