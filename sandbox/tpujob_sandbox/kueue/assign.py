"""Flavor assignment and preemption inside one ClusterQueue, after Kueue v0.19.2's
pkg/scheduler/flavorassigner/flavorassigner.go and pkg/scheduler/preemption/ (classical preemption within
the ClusterQueue only: no cohort, so no borrowing and no reclaim). Pure: the ClusterQueue, its flavors and
the usage of the workloads holding quota in, an assignment or preemption targets out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum

from tpujob_sandbox.kueue import tas
from tpujob_sandbox.kueue.objects import (
    QUOTA_RESERVED,
    Obj,
    admission,
    cluster_queue_checks,
    find_condition,
    is_evicted,
    parse_time,
    priority,
    queue_order_time,
    uid,
)
from tpujob_sandbox.kueue.quantity import format_value, resource_value
from tpujob_sandbox.kueue.requests import (
    FlavorResource,
    Usage,
    add_usage,
    admitted_usage,
    pod_requests,
    pod_set_requests,
)


class Mode(IntEnum):
    """flavorassigner's preemptionMode, worst to best (noPreemptionCandidates counts as noFit here)."""

    NO_FIT = 0
    PREEMPT = 2
    FIT = 3


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[tuple[str, dict[str, int]], ...]  # (flavor name, nominal quota per resource), in order


@dataclass(frozen=True)
class QueueView:
    name: str
    groups: tuple[ResourceGroup, ...]
    strategy: str
    within_cluster_queue: str
    stop_policy: str
    # Its admission checks (checks.cluster_queue_checks): with any, the scheduler only reserves quota.
    admission_checks: tuple[str, ...] = ()

    def group_for(self, resource: str) -> ResourceGroup | None:
        """ClusterQueueSnapshot.RGByResource."""
        return next((g for g in self.groups if resource in g.covered), None)

    def nominal(self, fr: FlavorResource) -> int:
        for group in self.groups:
            for name, quotas in group.flavors:
                if name == fr[0] and fr[1] in quotas:
                    return quotas[fr[1]]
        return 0

    def flavor_names(self) -> list[str]:
        return [name for g in self.groups for name, _ in g.flavors]


def queue_view(cq: Obj) -> QueueView:
    spec = cq.get("spec") or {}
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = tuple(
            (
                str(f["name"]),
                {
                    str(r["name"]): resource_value(str(r["name"]), r["nominalQuota"])
                    for r in f.get("resources") or []
                },
            )
            for f in group.get("flavors") or []
        )
        groups.append(ResourceGroup(tuple(group.get("coveredResources") or ()), flavors))
    return QueueView(
        name=cq["metadata"]["name"],
        groups=tuple(groups),
        # The CRD's defaults (clusterqueue_types.go): BestEffortFIFO, withinClusterQueue Never, no stop.
        strategy=spec.get("queueingStrategy") or "BestEffortFIFO",
        within_cluster_queue=(spec.get("preemption") or {}).get("withinClusterQueue") or "Never",
        stop_policy=spec.get("stopPolicy") or "None",
        admission_checks=tuple(cluster_queue_checks(cq)),
    )


# --- which flavors a pod may land on (flavorassigner.checkFlavorForPodSets) --------------------------------


def _taint_text(taint: Obj) -> str:
    """corev1.Taint.ToString."""
    text = taint["key"] + (f"={taint['value']}" if taint.get("value") else "")
    return f"{text}:{taint['effect']}" if taint.get("effect") else text


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    """corev1.Toleration.ToleratesTaint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator") == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated_taint(flavor: Obj, pod_spec: Obj) -> str | None:
    """The first NoSchedule/NoExecute nodeTaint of the flavor that neither the pod nor the flavor's own
    tolerations tolerate (corev1helpers.FindMatchingUntoleratedTaint)."""
    tolerations = [
        *(pod_spec.get("tolerations") or []),
        *((flavor.get("spec") or {}).get("tolerations") or []),
    ]
    for taint in (flavor.get("spec") or {}).get("nodeTaints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return _taint_text(taint)
    return None


def _matches(expression: Obj, labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def matches_node_labels(flavor: Obj, pod_spec: Obj) -> bool:
    """flavorSelector: the pod's nodeSelector and required node affinity, cut down to the flavor's own label
    keys, against the flavor's nodeLabels as if they were a node's."""
    labels = {str(k): str(v) for k, v in ((flavor.get("spec") or {}).get("nodeLabels") or {}).items()}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if key in labels and labels[key] != str(value):
            return False
    required = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    terms = []
    for term in required:
        kept = [e for e in term.get("matchExpressions") or [] if e["key"] in labels]
        if not kept:  # a term with no relevant key matches any flavor (terms are ORed)
            return True
        terms.append(kept)
    return not terms or any(all(_matches(e, labels) for e in term) for term in terms)


# --- assignment -----------------------------------------------------------------------------------------


@dataclass
class PodSetAssignment:
    name: str
    count: int
    requests: dict[str, int]
    flavors: dict[str, str] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    mode: Mode = Mode.FIT
    failed: bool = False  # no flavor at all for some resource: the assignment stops here
    topology: Obj | None = None  # its topologyAssignment, in the served version's shape (tas.py)

    def to_api(self) -> Obj:
        """PodSetAssignment.toAPI: only resources with a flavor."""
        found = {
            "name": self.name,
            "flavors": dict(self.flavors),
            "resourceUsage": {r: format_value(r, self.requests[r]) for r in self.flavors},
            "count": self.count,
        }
        if self.topology is not None:
            found["topologyAssignment"] = self.topology
        return found


@dataclass
class Assignment:
    pod_sets: list[PodSetAssignment]
    usage: Usage
    preempt_frs: set[FlavorResource]

    @property
    def mode(self) -> Mode:
        """Assignment.RepresentativeMode: the worst pod set."""
        if not self.pod_sets or any(ps.failed for ps in self.pod_sets):
            return Mode.NO_FIT
        return min(ps.mode for ps in self.pod_sets)

    def message(self) -> str:
        """Assignment.Message: every pod set that does not fit, its reasons sorted (Status.Message)."""
        parts = [
            f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(ps.reasons))}"
            for ps in self.pod_sets
            if ps.reasons
        ]
        return "; ".join(parts)


@dataclass(frozen=True)
class Cluster:
    """What the assigner sees: the ClusterQueue, the ResourceFlavors by name, and the workloads holding quota
    in the ClusterQueue (evicted ones included until their admission is cleared)."""

    queue: QueueView
    flavors: dict[str, Obj]
    holders: tuple[Obj, ...]
    # For topology-aware scheduling (tas.py): Topologies' levels by name, the cluster's Nodes, and the
    # Workload version the assignments are written in.
    topologies: dict[str, list[str]] = field(default_factory=dict)
    nodes: tuple[tas.Node, ...] = ()
    version: str = "v1beta2"

    def usage(self) -> Usage:
        total: Usage = {}
        for wl in self.holders:
            add_usage(total, admitted_usage(wl))
        return total


def assign_flavors(wl: Obj, cluster: Cluster, now: datetime) -> Assignment:
    """FlavorAssigner.assignFlavors: pod sets in order, each resource group's flavors in order, first fit;
    a flavor needing preemption is kept only if no later one fits (flavorFungibility whenCanPreempt
    TryNextFlavor, the default). Usage of earlier pod sets counts against later ones."""
    usage = cluster.usage()
    result = Assignment([], {}, set())
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        count = int(pod_set.get("count", 1))
        requests = pod_set_requests(pod_set)
        if cluster.queue.group_for("pods") is not None:
            requests["pods"] = count  # a ClusterQueue covering "pods" counts them
        ps = PodSetAssignment(str(pod_set["name"]), count, requests)
        pod_spec = ((pod_set.get("template") or {}).get("spec")) or {}
        for resource in sorted(requests):
            if resource in ps.flavors:
                continue  # assigned with its resource group
            group = cluster.queue.group_for(resource)
            if group is None:
                if requests[resource] == 0:
                    continue  # zero requests of an uncovered resource are ignored (#8079)
                ps.reasons.append(f"resource {resource} unavailable in ClusterQueue")
                ps.failed = True
                break
            chosen = _flavor_for_group(wl, ps, pod_spec, group, cluster, usage, result.usage, now)
            if chosen is None:
                ps.failed = True
                break
        if not ps.failed:
            _assign_topology(wl, ps, pod_set, cluster, result.pod_sets)
        result.pod_sets.append(ps)
        if ps.failed:
            return result  # assignFlavors returns at the first pod set with no flavor
        for resource, flavor in ps.flavors.items():
            fr = (flavor, resource)
            result.usage[fr] = result.usage.get(fr, 0) + requests[resource]
    return result


def _tas_usage(
    cluster: Cluster, flavor: str, placed: list[PodSetAssignment]
) -> dict[tas.Domain, dict[str, int]]:
    """The TAS usage in `flavor`'s domains: the holders' admissions and the workload's earlier pod sets."""
    used: dict[tas.Domain, dict[str, int]] = {}

    def add(assignment: Obj | None, per_pod: dict[str, int]) -> None:
        for leaf, amounts in tas.usage_per_domain(assignment, per_pod).items():
            for resource, value in amounts.items():
                used.setdefault(leaf, {})[resource] = used.get(leaf, {}).get(resource, 0) + value

    for holder in cluster.holders:
        templates = {p["name"]: p for p in (holder.get("spec") or {}).get("podSets") or []}
        for psa in (admission(holder) or {}).get("podSetAssignments") or []:
            if flavor in (psa.get("flavors") or {}).values() and psa.get("topologyAssignment"):
                spec = ((templates.get(psa["name"]) or {}).get("template") or {}).get("spec") or {}
                add(psa["topologyAssignment"], pod_requests(spec))
    for earlier in placed:
        if flavor in earlier.flavors.values() and earlier.topology is not None:
            add(earlier.topology, {r: v // max(earlier.count, 1) for r, v in earlier.requests.items()})
    return used


def _assign_topology(
    wl: Obj, ps: PodSetAssignment, pod_set: Obj, cluster: Cluster, placed: list[PodSetAssignment]
) -> None:
    """tas_flavorassigner.go assignTopology: a pod set on a flavor with spec.topologyName gets a topology
    assignment, or does not fit (NoFit, with the snapshot's reason). Delayed (not assigned here) behind an
    admission check (podSetTopologyRequest: a ProvisioningRequest check assigns it after provisioning)."""
    names = {
        str(((cluster.flavors.get(f) or {}).get("spec") or {}).get("topologyName") or "")
        for f in ps.flavors.values()
    } - {""}
    if not names or cluster.queue.admission_checks:
        return
    topology = names.pop()
    levels = cluster.topologies.get(topology)
    if not levels:
        ps.reasons.append(f'topology "{topology}" not found')
        ps.failed = True
        return
    flavor = next(
        f for f in ps.flavors.values() if (cluster.flavors[f].get("spec") or {}).get("topologyName")
    )
    pod_spec = ((pod_set.get("template") or {}).get("spec")) or {}
    per_pod = pod_requests(pod_spec)
    domains, why = tas.assign(
        topology,
        levels,
        list(cluster.nodes),
        cluster.flavors[flavor],
        pod_set,
        per_pod,
        _tas_usage(cluster, flavor, placed),
    )
    if not domains:
        ps.reasons.append(why)
        ps.failed = True
        return
    ps.topology = tas.encode(levels, domains, cluster.version)


def _flavor_for_group(
    wl: Obj,
    ps: PodSetAssignment,
    pod_spec: Obj,
    group: ResourceGroup,
    cluster: Cluster,
    usage: Usage,
    assumed: Usage,
    now: datetime,
) -> str | None:
    """findFlavorForPodSets: the group's flavors in order; reasons from every flavor tried are kept unless
    one fits outright."""
    wanted = {r: v for r, v in ps.requests.items() if r in group.covered}
    reasons: list[str] = []
    best: tuple[Mode, str, dict[str, str]] | None = None
    for flavor_name, _ in group.flavors:
        flavor = cluster.flavors.get(flavor_name)
        if flavor is None:
            reasons.append(f"flavor {flavor_name} not found")
            continue
        if taint := untolerated_taint(flavor, pod_spec):
            reasons.append(f"untolerated taint {taint} in flavor {flavor_name}")
            continue
        if not matches_node_labels(flavor, pod_spec):
            reasons.append(f"flavor {flavor_name} doesn't match node affinity")
            continue
        mode = Mode.FIT
        for resource in sorted(wanted):
            fr = (flavor_name, resource)
            got, why = _fits_quota(wl, fr, assumed.get(fr, 0), wanted[resource], cluster, usage, now)
            reasons.extend(why)
            mode = min(mode, got)
            if mode == Mode.NO_FIT:
                break
        if mode == Mode.FIT:
            ps.flavors.update(dict.fromkeys(wanted, flavor_name))
            return flavor_name
        if mode == Mode.PREEMPT and best is None:
            best = (mode, flavor_name, dict.fromkeys(wanted, flavor_name))
    ps.reasons.extend(reasons)
    if best is None:
        return None
    ps.mode = min(ps.mode, Mode.PREEMPT)
    ps.flavors.update(best[2])
    return best[1]


def _fits_quota(
    wl: Obj, fr: FlavorResource, assumed: int, request: int, cluster: Cluster, usage: Usage, now: datetime
) -> tuple[Mode, list[str]]:
    """fitsResourceQuota without a cohort: the maximum capacity is the nominal quota."""
    resource = fr[1]
    nominal = cluster.queue.nominal(fr)
    available = max(nominal - usage.get(fr, 0), 0)
    value = assumed + request
    if value > nominal:
        return Mode.NO_FIT, [
            f"insufficient quota for {resource} in flavor {fr[0]}, previously considered podsets requests "
            f"({format_value(resource, assumed)}) + current podset request "
            f"({format_value(resource, request)}) "
            f"> maximum capacity ({format_value(resource, nominal)})"
        ]
    if value <= available:
        return Mode.FIT, []
    short = format_value(resource, value - available)
    reason = f"insufficient unused quota for {resource} in flavor {fr[0]}, {short} more needed"
    # The preemption oracle (preemption_oracle.go SimulatePreemption): could preemption free enough?
    if preemption_targets(wl, cluster, {fr: value}, {fr}, now):
        return Mode.PREEMPT, [reason]
    return Mode.NO_FIT, [reason]


# --- preemption (pkg/scheduler/preemption) ----------------------------------------------------------------


def satisfies_policy(preemptor: Obj, candidate: Obj, policy: str) -> bool:
    """common.SatisfiesPreemptionPolicy (SchedulerTimestampPreemptionBuffer is off by default)."""
    lower = priority(preemptor) > priority(candidate)
    if policy == "LowerPriority":
        return lower
    if policy == "LowerOrNewerEqualPriority":
        newer = priority(preemptor) == priority(candidate) and queue_order_time(preemptor) < queue_order_time(
            candidate
        )
        return lower or newer
    return policy == "Any"


def _reservation_time(wl: Obj, now: datetime) -> datetime:
    found = find_condition(wl, QUOTA_RESERVED)
    return parse_time((found or {}).get("lastTransitionTime")) or now


def candidate_order(wl: Obj, now: datetime) -> tuple[bool, int, float, str]:
    """common.CandidatesOrdering within one ClusterQueue: evicted first, then lower priority, then the most
    recently reserved, then UID."""
    return (not is_evicted(wl), priority(wl), -_reservation_time(wl, now).timestamp(), uid(wl))


def preemption_targets(
    preemptor: Obj, cluster: Cluster, needed: Usage, frs: set[FlavorResource], now: datetime
) -> list[Obj]:
    """classicalPreemptions for candidates in the preemptor's own ClusterQueue: remove candidates in order
    until the preemptor fits, then put back (last but one first) any it fits without (fillBackWorkloads)."""
    policy = cluster.queue.within_cluster_queue
    if policy == "Never":
        return []
    candidates = sorted(
        (
            wl
            for wl in cluster.holders
            if uid(wl) != uid(preemptor)
            and frs & set(admitted_usage(wl))
            and satisfies_policy(preemptor, wl, policy)
        ),
        key=lambda wl: candidate_order(wl, now),
    )
    remaining = cluster.usage()

    def fits() -> bool:
        return all(remaining.get(fr, 0) + value <= cluster.queue.nominal(fr) for fr, value in needed.items())

    targets: list[Obj] = []
    for candidate in candidates:
        add_usage(remaining, admitted_usage(candidate), -1)
        targets.append(candidate)
        if fits():
            for index in range(len(targets) - 2, -1, -1):
                add_usage(remaining, admitted_usage(targets[index]))
                if fits():
                    del targets[index]
                else:
                    add_usage(remaining, admitted_usage(targets[index]), -1)
            return targets
    return []
