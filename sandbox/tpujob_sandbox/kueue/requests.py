"""What a Workload asks for and what an admitted one holds, as Kueue v0.19.2 counts it (pure)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tpujob_sandbox.kueue.objects import Obj, admission
from tpujob_sandbox.kueue.quantity import resource_value

FlavorResource = tuple[str, str]  # (flavor, resource), Kueue's resources.FlavorResource
Usage = dict[FlavorResource, int]


def _container_requests(container: Obj) -> dict[str, int]:
    """A container's requests; a limit stands in for a missing request (workload.AdjustResources applies
    limits as missing requests before Kueue counts them)."""
    resources = container.get("resources") or {}
    found = dict(resources.get("limits") or {})
    found.update(resources.get("requests") or {})
    return {name: resource_value(name, amount) for name, amount in found.items()}


def pod_requests(pod_spec: Obj) -> dict[str, int]:
    """One pod's requests as pkg/util/limitrange TotalRequests sums them: the containers added up, each
    init container a floor (the max of the two). Pod overhead and native sidecars are not modelled."""
    total: dict[str, int] = defaultdict(int)
    for container in pod_spec.get("containers") or []:
        for name, value in _container_requests(container).items():
            total[name] += value
    for container in pod_spec.get("initContainers") or []:
        for name, value in _container_requests(container).items():
            total[name] = max(total[name], value)
    return dict(total)


def pod_set_requests(pod_set: Obj) -> dict[str, int]:
    """workload.NewInfo's TotalRequests for one podSet: per-pod requests times the count."""
    per_pod = pod_requests(((pod_set.get("template") or {}).get("spec")) or {})
    count = int(pod_set.get("count", 1))
    return {name: value * count for name, value in per_pod.items()}


def admitted_usage(wl: Obj) -> Usage:
    """The quota an admitted workload holds: each podSet's resourceUsage in its assigned flavors."""
    usage: Usage = defaultdict(int)
    for assignment in (admission(wl) or {}).get("podSetAssignments") or []:
        flavors: dict[str, Any] = assignment.get("flavors") or {}
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            if resource in flavors:
                usage[(str(flavors[resource]), resource)] += resource_value(resource, amount)
    return dict(usage)


def add_usage(total: Usage, more: Usage, sign: int = 1) -> None:
    for fr, value in more.items():
        total[fr] = total.get(fr, 0) + sign * value
