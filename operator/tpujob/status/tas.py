"""Kueue's topology-aware scheduling (TAS): what an admission's topology assignment means for a job. Pure.

A ResourceFlavor with `spec.topologyName` makes Kueue's scheduler place each pod set on the nodes it sees
now, by topology domain, and write the placement into the admission
(status.admission.podSetAssignments[].topologyAssignment; Kueue pkg/cache/scheduler/tas_flavor_snapshot.go,
pkg/scheduler/flavorassigner/tas_flavorassigner.go).

- `policy: existing`: the job's pods go to the assigned domains. Kueue's own integrations create their pods
  with the scheduling gate kueue.x-k8s.io/topology, and its topology ungater
  (pkg/controller/tas/topology_ungater.go) removes it from each pod with node selectors for one domain: the
  pod's rank (its pod-index label, readRanksIfAvailable) picks the domain, the domains laid out in the
  assignment's order, each repeated by its pod count (rankToDomainID), and the selectors are the levels'
  keys with the domain's values (podsToUngateInfo, utiltas.NodeLabelsFromKeysAndValues). The operator
  creates its pods itself, so it gives each worker those selectors at creation, with no gate: worker w of a
  slice is rank w of the slice's pod set.
- `policy: create`: nodes the operator creates only after the admission are in none of the assigned domains,
  so such an admission cannot be honoured: the job is refused, saying why and what to do.

The assignment comes in the served Workload version's shape: v1beta1 lists domains (levels; domains[] of
values and count); v1beta2 packs them into slices (levels; slices[] of domainCount, valuesPerLevel[] each
universal or individual prefix+roots+suffix, podCounts universal or individual), read back as Kueue reads
them (pkg/util/tas/tas_assignment.go InternalSeqFrom, valueAtIndex, countAtIndex). A Workload's status is
not the operator's to trust: a malformed assignment raises TopologyAssignmentError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tpujob.api.constants import NODE_LABEL_NODEPOOL
from tpujob.api.job import TPUJob
from tpujob.api.spec import NodePoolPolicy
from tpujob.render.placement import Placement

# The assignment's field, in the admission's pod set assignments.
FIELD = "topologyAssignment"


def tas_problem(job: TPUJob, admission: dict[str, Any] | None) -> str | None:
    """Why a topology-aware admission cannot run this job (None: it can, or the admission has no topology)."""
    if job.spec.node_pool.policy != NodePoolPolicy.create:
        return None
    assigned = [
        str(a.get("name"))
        for a in (admission or {}).get("podSetAssignments") or []
        if isinstance(a, dict) and a.get(FIELD)
    ]
    if not assigned:
        return None
    return (
        f"Kueue admitted pod set {assigned[0]} with a topology assignment (its ResourceFlavor has "
        "spec.topologyName: topology-aware scheduling), which places the pods on nodes that exist at "
        "admission; spec.nodePool.policy is create, and the pools it makes come after the admission, in none "
        "of the assigned domains. Use spec.nodePool.policy: existing with TPU node pools made beforehand, or "
        "a ClusterQueue whose flavor has no spec.topologyName (or a ProvisioningRequest admission check, "
        "which provisions the nodes before admission)"
    )


class TopologyAssignmentError(ValueError):
    """A topology assignment the job cannot follow (malformed, or not one domain per host)."""


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise TopologyAssignmentError(f"{where}: not a list of label keys or values")
    return list(value)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TopologyAssignmentError(f"{where}: not a positive count")
    return value


def _v1beta1_domains(levels: list[str], domains: Any, where: str) -> list[tuple[tuple[str, ...], int]]:
    if not isinstance(domains, list):
        raise TopologyAssignmentError(f"{where}.domains: not a list")
    out = []
    for index, domain in enumerate(domains):
        at = f"{where}.domains[{index}]"
        if not isinstance(domain, Mapping):
            raise TopologyAssignmentError(f"{at}: not an object")
        values = _strings(domain.get("values"), f"{at}.values")
        if len(values) != len(levels):
            raise TopologyAssignmentError(f"{at}.values: {len(values)} values for {len(levels)} levels")
        out.append((tuple(values), _count(domain.get("count"), f"{at}.count")))
    return out


def _level_value(values: Any, index: int, where: str) -> str:
    """valueAtIndex: the universal value, or prefix + roots[index] + suffix."""
    if not isinstance(values, Mapping):
        raise TopologyAssignmentError(f"{where}: not an object")
    if isinstance(values.get("universal"), str):
        return str(values["universal"])
    individual = values.get("individual")
    if not isinstance(individual, Mapping):
        raise TopologyAssignmentError(f"{where}: neither universal nor individual")
    roots = individual.get("roots")
    if not isinstance(roots, list) or index >= len(roots) or not isinstance(roots[index], str):
        raise TopologyAssignmentError(f"{where}.individual.roots: no value for domain {index}")
    prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        raise TopologyAssignmentError(f"{where}.individual: prefix and suffix must be strings")
    return f"{prefix}{roots[index]}{suffix}"


def _v1beta2_domains(levels: list[str], slices: Any, where: str) -> list[tuple[tuple[str, ...], int]]:
    if not isinstance(slices, list):
        raise TopologyAssignmentError(f"{where}.slices: not a list")
    out = []
    for number, piece in enumerate(slices):
        at = f"{where}.slices[{number}]"
        if not isinstance(piece, Mapping):
            raise TopologyAssignmentError(f"{at}: not an object")
        count = _count(piece.get("domainCount"), f"{at}.domainCount")
        per_level = piece.get("valuesPerLevel")
        if not isinstance(per_level, list) or len(per_level) != len(levels):
            raise TopologyAssignmentError(f"{at}.valuesPerLevel: not one entry per level ({len(levels)})")
        pods = piece.get("podCounts")
        if not isinstance(pods, Mapping):
            raise TopologyAssignmentError(f"{at}.podCounts: not an object")
        individual, universal = pods.get("individual"), pods.get("universal")
        if universal is not None:
            counts: list[Any] = [universal] * count
        elif isinstance(individual, list) and len(individual) == count:
            counts = individual
        else:
            raise TopologyAssignmentError(f"{at}.podCounts: neither universal nor one count per domain")
        for index in range(count):
            values = tuple(
                _level_value(v, index, f"{at}.valuesPerLevel[{level}]") for level, v in enumerate(per_level)
            )
            out.append((values, _count(counts[index], f"{at}.podCounts")))
    return out


def domains(assignment: Any, where: str = FIELD) -> tuple[list[str], list[tuple[tuple[str, ...], int]]]:
    """The assignment's levels and its domains in order, each (its value at every level, its pod count), from
    either version's shape (InternalSeqFrom). Raises TopologyAssignmentError naming the field."""
    if not isinstance(assignment, Mapping):
        raise TopologyAssignmentError(f"{where}: not an object")
    levels = _strings(assignment.get("levels"), f"{where}.levels")
    if "slices" in assignment:
        return levels, _v1beta2_domains(levels, assignment["slices"], where)
    return levels, _v1beta1_domains(levels, assignment.get("domains"), where)


def worker_selectors(assignment: Any, hosts: int, where: str = FIELD) -> tuple[dict[str, str], ...]:
    """The node selectors of each worker of a slice (index: the worker's number, its rank in the pod set):
    rankToDomainID, then NodeLabelsFromKeysAndValues. Raises TopologyAssignmentError when the assignment is
    malformed or does not place exactly the slice's `hosts` pods."""
    levels, found = domains(assignment, where)
    by_rank = [dict(zip(levels, values, strict=True)) for values, count in found for _ in range(count)]
    if len(by_rank) != hosts:
        raise TopologyAssignmentError(
            f"{where}: places {len(by_rank)} pod(s), and the slice has {hosts} host(s)"
        )
    pools = sorted({rank[NODE_LABEL_NODEPOOL] for rank in by_rank if NODE_LABEL_NODEPOOL in rank})
    if len(pools) > 1:
        # A multi-host TPU slice is one node pool: its hosts share the slice's ICI, and hosts of two pools
        # are two slices (GKE's multi-host slices: one node pool each). Kueue places the pod set where quota
        # and nodes fit, and may split it when the Topology's levels allow.
        raise TopologyAssignmentError(
            f"{where}: splits the slice over node pools {', '.join(pools)}; a multi-host TPU slice runs in "
            "one node pool, and the operator does not yet ask Kueue for one pool per slice: queue multi-host "
            "slices on a ClusterQueue whose flavor has no spec.topologyName"
        )
    return tuple(by_rank)


def with_topology(placement: Placement, pod_set_assignment: Any, hosts: int) -> Placement:
    """The slice's placement with each worker's domain, when its pod set assignment has a topology."""
    if not isinstance(pod_set_assignment, Mapping) or not pod_set_assignment.get(FIELD):
        return placement
    where = f"status.admission.podSetAssignments[{pod_set_assignment.get('name')}].{FIELD}"
    return replace(placement, worker_node_selectors=worker_selectors(pod_set_assignment[FIELD], hosts, where))
