"""What GKE does with a TPU node pool request: the simulation's own table, kept apart from tpujob.tpu.

Stated independently of the operator's catalog on purpose: if both derived from one table, a mistake in
it would be agreed with by construction. Sources: GKE "Plan TPUs" and "TPUs in GKE" pages, xpk's system
catalog (see /work/shared/reference/gke-tpu.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MachineType:
    name: str
    accelerator: str  # node label cloud.google.com/gke-tpu-accelerator ("" for a CPU machine)
    chips: int  # google.com/tpu capacity of one VM
    dimensions: int  # 2 for v5e/v6e topologies (AxB), 3 for v4/v5p/tpu7x (AxBxC)
    single_host_topology: str  # what GKE labels a single-host node with
    multi_host: bool  # can form a slice of several VMs
    cpus: int
    memory_gib: int

    @property
    def is_tpu(self) -> bool:
        return self.chips > 0


MACHINE_TYPES: dict[str, MachineType] = {
    m.name: m
    for m in (
        MachineType("ct4p-hightpu-4t", "tpu-v4-podslice", 4, 3, "2x2x1", True, 240, 407),
        MachineType("ct5lp-hightpu-1t", "tpu-v5-lite-podslice", 1, 2, "1x1", False, 24, 48),
        MachineType("ct5lp-hightpu-4t", "tpu-v5-lite-podslice", 4, 2, "2x2", True, 112, 192),
        MachineType("ct5lp-hightpu-8t", "tpu-v5-lite-podslice", 8, 2, "2x4", False, 224, 384),
        MachineType("ct5p-hightpu-4t", "tpu-v5p-slice", 4, 3, "2x2x1", True, 208, 448),
        MachineType("ct6e-standard-1t", "tpu-v6e-slice", 1, 2, "1x1", False, 44, 176),
        MachineType("ct6e-standard-4t", "tpu-v6e-slice", 4, 2, "2x2", True, 180, 720),
        MachineType("ct6e-standard-8t", "tpu-v6e-slice", 8, 2, "2x4", False, 180, 1440),
        # TPU7x (Ironwood): GKE "TPU7x" page; -1t is a single-chip VM labelled 1x1x1.
        MachineType("tpu7x-standard-1t", "tpu7x", 1, 3, "1x1x1", False, 56, 240),
        MachineType("tpu7x-standard-4t", "tpu7x", 4, 3, "2x2x1", True, 224, 960),
    )
}
# Largest slice GKE offers per accelerator, in chips.
MAX_CHIPS = {
    "tpu-v4-podslice": 4096,
    "tpu-v5-lite-podslice": 256,
    "tpu-v5p-slice": 8960,
    "tpu-v6e-slice": 256,
    "tpu7x": 9216,
}
_GENERAL_PURPOSE = re.compile(r"^(?P<family>[a-z][a-z0-9]*)-(?P<kind>[a-z]+)-(?P<cpus>\d+)$")
_E2_SHARED_CORE = {"e2-micro": (2, 1), "e2-small": (2, 2), "e2-medium": (2, 4)}
_NODE_POOL_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NODE_POOL_NAME = 40


class InvalidNodePool(ValueError):
    """GKE answers 400 INVALID_ARGUMENT with this message."""


def machine_type(name: str) -> MachineType:
    """A TPU machine from the table, or a general-purpose one read from its name (e2-standard-4 ...)."""
    if name in MACHINE_TYPES:
        return MACHINE_TYPES[name]
    if name in _E2_SHARED_CORE:
        cpus, memory = _E2_SHARED_CORE[name]
        return MachineType(name, "", 0, 0, "", False, cpus, memory)
    match = _GENERAL_PURPOSE.match(name)
    if not match or match["family"].startswith("ct") or match["family"].startswith("tpu"):
        raise InvalidNodePool(f'Invalid machine type "{name}".')
    cpus = int(match["cpus"])
    memory_per_cpu = {"highmem": 8, "highcpu": 1, "megamem": 14}.get(match["kind"], 4)
    return MachineType(name, "", 0, 0, "", False, cpus, cpus * memory_per_cpu)


def parse_topology(text: str) -> tuple[int, ...]:
    parts = text.split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise InvalidNodePool(f'Invalid TPU topology "{text}": expected positive integers joined by "x".')
    return tuple(int(p) for p in parts)


def hosts_for_topology(machine: MachineType, topology: str) -> int:
    """VMs in one slice of `topology` on `machine`, or InvalidNodePool the way GKE refuses it."""
    dims = parse_topology(topology)
    if len(dims) != machine.dimensions:
        form = "AxB" if machine.dimensions == 2 else "AxBxC"
        raise InvalidNodePool(
            f'TPU topology "{topology}" is not valid for machine type "{machine.name}": '
            f"expected the form {form}."
        )
    chips = math.prod(dims)
    if chips % machine.chips:
        raise InvalidNodePool(
            f'TPU topology "{topology}" ({chips} chips) cannot be built from "{machine.name}" '
            f"VMs of {machine.chips} chips."
        )
    if chips > MAX_CHIPS[machine.accelerator]:
        raise InvalidNodePool(
            f'TPU topology "{topology}" has {chips} chips; {machine.accelerator} slices have at most '
            f"{MAX_CHIPS[machine.accelerator]}."
        )
    return chips // machine.chips


@dataclass(frozen=True)
class PoolShape:
    """What GKE will build: how many VMs, and the topology label they carry."""

    machine: MachineType
    nodes: int
    topology: str  # "" for a non-TPU pool


def pool_shape(
    name: str, machine_type_name: str, node_count: int, tpu_topology: str, *, policy_topology: str = ""
) -> PoolShape:
    """Validate a create request as GKE would; return the shape or raise InvalidNodePool.

    `policy_topology` is the accelerator topology of the workload policy the pool names (tpu7x)."""
    if not name:
        raise InvalidNodePool("Node pool name must be specified.")
    if len(name) > MAX_NODE_POOL_NAME or not _NODE_POOL_NAME.match(name):
        raise InvalidNodePool(
            f'Invalid node pool name "{name}": must be at most {MAX_NODE_POOL_NAME} characters of '
            "lowercase letters, digits and '-', start with a letter and not end with '-'."
        )
    machine = machine_type(machine_type_name)
    if node_count < 1:
        raise InvalidNodePool("Node pool initial_node_count must be at least 1.")
    topology = tpu_topology or policy_topology
    if not topology:
        return PoolShape(machine, node_count, machine.single_host_topology)
    if not machine.is_tpu:
        raise InvalidNodePool(
            f'placementPolicy.tpuTopology is set but "{machine.name}" is not a TPU machine type.'
        )
    if machine.chips == 1 and tpu_topology:
        # "For single node topologies ... tpuTopology being present will be rejected by the control plane"
        # (GoogleCloudPlatform/ai-on-gke tpu-provisioner, commit ec7178cf, PR #965). The wording is ours.
        raise InvalidNodePool(
            f'"{machine.name}" is a one-chip machine type: do not set placementPolicy.tpuTopology.'
        )
    hosts = hosts_for_topology(machine, topology)
    if hosts == 1:
        # A 4- or 8-chip single-host pool may name its own VM's topology: tpu-provisioner sends 2x2 for
        # ct5lp-hightpu-4t, and GKE's Multislice page calls that pool a valid single-host slice.
        if topology != machine.single_host_topology:
            raise InvalidNodePool(
                f'TPU topology "{topology}" does not match single-host machine type "{machine.name}", '
                f"whose slice is {machine.single_host_topology}."
            )
        if node_count != 1:
            raise InvalidNodePool(
                f'TPU topology "{topology}" on "{machine.name}" is one VM; '
                f"initial_node_count is {node_count}."
            )
        return PoolShape(machine, 1, topology)
    if not machine.multi_host:
        raise InvalidNodePool(
            f'"{machine.name}" is a single-host TPU machine type: it cannot form the multi-host topology '
            f'"{topology}".'
        )
    if node_count != hosts:
        raise InvalidNodePool(
            f'TPU topology "{topology}" on "{machine.name}" needs exactly {hosts} nodes; '
            f"initial_node_count is {node_count}."
        )
    return PoolShape(machine, node_count, topology)


def allocatable_cpu_millis(cpus: int) -> int:
    """GKE's CPU reservation: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4."""
    millis = cpus * 1000
    reserved = 60 + 10 * min(max(cpus - 1, 0), 1) + 5 * min(max(cpus - 2, 0), 2) + 2.5 * max(cpus - 4, 0)
    return int(millis - reserved)


def allocatable_memory_mib(memory_gib: int) -> int:
    """GKE's memory reservation (25/20/10/6/2% bands) plus the 100 MiB eviction threshold."""
    bands = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))
    remaining, reserved = float(memory_gib), 0.0
    for size, share in bands:
        portion = min(remaining, size)
        reserved += portion * share
        remaining -= portion
    return int((memory_gib - reserved) * 1024 - 100)
