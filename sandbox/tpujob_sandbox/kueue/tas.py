"""Kueue v0.19.2's topology-aware scheduling (TAS) for one pod set on one flavor with a topology. Pure: the
Topology's levels, the Nodes, the usage of the workloads already placed in, a topology assignment (or why
none) out.

After pkg/cache/scheduler/tas_flavor_snapshot.go (FindTopologyAssignmentsForFlavor):
- the flavor's nodes: those with its nodeLabels (pkg/controller/tas/resource_flavor.go, the snapshot's node
  list), Ready, every topology level labelled, no NoSchedule/NoExecute taint that the pod or the flavor does
  not tolerate, and matching the pod's nodeSelector (the snapshot's exclusion stats: taints, node selector);
- each domain of the lowest level holds as many pods as its nodes' allocatable, less the TAS usage already
  placed in it (ComputeUsagePerDomain), fits (fillInCounts); a higher domain holds what its children hold;
- the level searched: the pod set's required or preferred one (annotations kueue.x-k8s.io/podset-required-
  topology / -preferred-topology, as jobframework/tas.go builds the request), else the lowest (an implied
  request: tas_flavorassigner.go isTASImplied, levelKeyWithImpliedFallback), which is unconstrained;
- findLevelWithFitDomains: unconstrained (TASProfileMixed, on by default since v0.15) takes the domain with
  the least room that fits, else several from the least room up; otherwise BestFit: the domains by most room,
  the one with the least room that still fits all, else (preferred) one level up, else several;
  then down to the lowest level the same way (updateCountsToMinimumGeneric);
- the assignment's domains sorted by their values (buildAssignment, compareDomainLevelValues), written in the
  version served: v1beta1 domains, v1beta2 one compact slice (pkg/util/tas/tas_assignment.go
  compactSliceEncoding: universal values where all agree, else a common prefix and suffix around roots).

Not modelled: usage of pods Kueue did not admit (non_tas_usage_controller.go), leaders and pod-set slices
(podset-slice-required-topology), balanced placement, node affinity preferences, the hostname-prefix split
of large v1beta2 assignments (TASAssignmentsEncodingByHostnamePrefix: one slice here, the form it picks when
the split gives one), delayed TAS behind a ProvisioningRequest check (not assigned here).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpujob_sandbox.kueue.objects import Obj
from tpujob_sandbox.kueue.quantity import resource_value

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
Domain = tuple[str, ...]  # a domain's values, from the highest level down to its own


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]  # Kueue's integers (quantity.resource_value)
    taints: tuple[Obj, ...]
    ready: bool


def node_of(body: Obj) -> Node:
    """A Node as listed from the API (camelCase JSON)."""
    status = body.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return Node(
        name=body["metadata"]["name"],
        labels=dict(body["metadata"].get("labels") or {}),
        allocatable={str(k): resource_value(str(k), v) for k, v in (status.get("allocatable") or {}).items()},
        taints=tuple((body.get("spec") or {}).get("taints") or ()),
        ready=ready and not (body.get("spec") or {}).get("unschedulable"),
    )


def levels_of(topology: Obj) -> list[str]:
    return [str(level["nodeLabel"]) for level in (topology.get("spec") or {}).get("levels") or []]


def _tolerated(taint: Obj, tolerations: list[Obj]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            continue
        if toleration.get("operator") == "Exists" or str(toleration.get("value") or "") == str(
            taint.get("value") or ""
        ):
            return True
    return False


def _eligible(node: Node, levels: list[str], flavor: Obj, pod_spec: Obj) -> bool:
    spec = flavor.get("spec") or {}
    if not node.ready or any(level not in node.labels for level in levels):
        return False
    if any(node.labels.get(k) != str(v) for k, v in (spec.get("nodeLabels") or {}).items()):
        return False
    if any(node.labels.get(k) != str(v) for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = [*(pod_spec.get("tolerations") or []), *(spec.get("tolerations") or [])]
    return all(
        _tolerated(t, tolerations) for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute")
    )


def usage_per_domain(assignment: Obj | None, per_pod: dict[str, int]) -> dict[Domain, dict[str, int]]:
    """ComputeUsagePerDomain: each lowest-level domain's pods times one pod's requests, from an admission's
    topology assignment in either version's shape."""
    usage: dict[Domain, dict[str, int]] = {}
    for values, count in decode(assignment):
        used = usage.setdefault(values, {})
        for resource, value in per_pod.items():
            used[resource] = used.get(resource, 0) + value * count
    return usage


def decode(assignment: Obj | None) -> list[tuple[Domain, int]]:
    """InternalSeqFrom: (values, count) per domain, from v1beta1 domains or v1beta2 slices."""
    if not assignment:
        return []
    if "domains" in assignment:
        return [(tuple(d["values"]), int(d["count"])) for d in assignment["domains"]]
    out = []
    for piece in assignment.get("slices") or []:
        for index in range(int(piece["domainCount"])):
            values = []
            for level in piece["valuesPerLevel"]:
                if "universal" in level:
                    values.append(level["universal"])
                else:
                    ind = level["individual"]
                    values.append(ind.get("prefix", "") + ind["roots"][index] + ind.get("suffix", ""))
            counts = piece["podCounts"]
            out.append(
                (
                    tuple(values),
                    int(counts["universal"] if "universal" in counts else counts["individual"][index]),
                )
            )
    return out


def _compact(values: list[str]) -> Obj:
    """fillSingleCompactSliceValues: one value for all, else the common prefix and suffix around roots."""
    if all(v == values[0] for v in values):
        return {"universal": values[0]}
    prefix, suffix = values[0], values[0]
    for value in values[1:]:
        while not value.startswith(prefix):
            prefix = prefix[:-1]
        while not value.endswith(suffix):
            suffix = suffix[1:]
    shortest = min(len(v) for v in values)
    if len(prefix) + len(suffix) > shortest:
        prefix = prefix[: shortest - len(suffix)]
    individual: Obj = {"roots": [v[len(prefix) : len(v) - len(suffix)] for v in values]}
    if prefix:
        individual["prefix"] = prefix
    if suffix:
        individual["suffix"] = suffix
    return {"individual": individual}


def encode(levels: list[str], domains: list[tuple[Domain, int]], version: str) -> Obj:
    """The assignment in the served version's shape (v1beta1: domains; v1beta2: compactSliceEncoding)."""
    if version == "v1beta1":
        return {"levels": levels, "domains": [{"values": list(v), "count": n} for v, n in domains]}
    counts = [n for _, n in domains]
    piece: Obj = {
        "domainCount": len(domains),
        "valuesPerLevel": [_compact([v[i] for v, _ in domains]) for i in range(len(levels))],
        "podCounts": {"universal": counts[0]} if len(set(counts)) == 1 else {"individual": counts},
    }
    return {"levels": levels, "slices": [piece] if domains else []}


def _fits(free: dict[str, int], per_pod: dict[str, int]) -> int:
    wanted = {r: v for r, v in per_pod.items() if v > 0}
    if not wanted:
        return 1 << 30
    return max(min(free.get(r, 0) // v for r, v in wanted.items()), 0)


def _pick(candidates: list[tuple[Domain, int]], count: int, unconstrained: bool) -> list[tuple[Domain, int]]:
    """Domains for `count` pods from candidates (domain, room): one that fits all if any (least room first
    when unconstrained; BestFit: the least room that fits), else several, most room first unless
    unconstrained, each giving what it holds; [] when they cannot hold them all."""
    if unconstrained:
        ordered = sorted(candidates, key=lambda d: (d[1], d[0]))
    else:
        ordered = sorted(candidates, key=lambda d: (-d[1], d[0]))
    fitting = [d for d in ordered if d[1] >= count]
    if fitting:
        best = min(fitting, key=lambda d: (d[1], d[0]))
        return [(best[0], count)]
    out, remaining = [], count
    for domain, room in ordered:
        if remaining <= 0:
            break
        if room <= 0:
            continue
        take = min(room, remaining)
        out.append((domain, take))
        remaining -= take
    return out if remaining <= 0 else []


def assign(
    topology: str,
    levels: list[str],
    nodes: list[Node],
    flavor: Obj,
    pod_set: Obj,
    per_pod: dict[str, int],
    used: dict[Domain, dict[str, int]],
) -> tuple[list[tuple[Domain, int]], str]:
    """The pod set's lowest-level domains and pod counts, or ([], Kueue's words for why it does not fit)."""
    count = int(pod_set.get("count", 1))
    template = pod_set.get("template") or {}
    pod_spec = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    free: dict[Domain, dict[str, int]] = {}
    for node in nodes:
        if not _eligible(node, levels, flavor, pod_spec):
            continue
        leaf = tuple(node.labels[level] for level in levels)
        room = free.setdefault(leaf, {})
        for resource, value in node.allocatable.items():
            room[resource] = room.get(resource, 0) + value
    for leaf, using in used.items():
        for resource, value in using.items():
            if leaf in free:
                free[leaf][resource] = free[leaf].get(resource, 0) - value
    leaf_room = {leaf: _fits(room, per_pod) for leaf, room in free.items()}

    def room_at(depth: int) -> dict[Domain, int]:
        rooms: dict[Domain, int] = {}
        for leaf, room in leaf_room.items():
            rooms[leaf[: depth + 1]] = rooms.get(leaf[: depth + 1], 0) + room
        return rooms

    required, preferred = annotations.get(REQUIRED), annotations.get(PREFERRED)
    wanted = required or preferred
    if wanted is not None and wanted not in levels:
        return [], f'topology "{topology}" doesn\'t have level "{wanted}"'
    unconstrained = wanted is None
    depth = levels.index(wanted) if wanted is not None else len(levels) - 1
    if not leaf_room:
        return [], f'topology "{topology}" doesn\'t allow to fit any of {count} pod(s)'
    while True:
        rooms = room_at(depth)
        best = max(rooms.values())
        if best >= count or required is not None or depth == 0 or unconstrained:
            break
        depth -= 1  # preferred: one level up
    if required is not None and best < count:
        chosen: list[tuple[Domain, int]] = []
    else:
        chosen = _pick(list(rooms.items()), count, unconstrained)
    if not chosen:
        held = best if required is not None else sum(rooms.values())
        if held == 0:
            return [], f'topology "{topology}" doesn\'t allow to fit any of {count} pod(s)'
        return [], f'topology "{topology}" allows to fit only {held} out of {count} pod(s)'
    while depth < len(levels) - 1:  # down to the lowest level
        depth += 1
        below = room_at(depth)
        lower: list[tuple[Domain, int]] = []
        for domain, pods in chosen:
            children = [(d, r) for d, r in below.items() if d[:-1] == domain]
            lower += _pick(children, pods, unconstrained)
        chosen = lower
    return sorted(chosen), ""
