"""What a Kueue admission puts on a slice (its flavors' node labels, taints and tolerations), and the taint
in GKE's words for the pool the operator creates. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Placement:
    """What a Kueue admission puts on one slice: node selectors and tolerations on its pods, node labels and
    taints on the pool the operator creates for it (Kueue's podset.PodSetInfo, from the assigned flavors)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: tuple[dict[str, str], ...] = ()
    # The admission checks' pod set updates (render/podset_updates.py) besides the selectors and tolerations
    # above: labels and annotations on the pods (a ProvisioningRequest's consume annotation among them).
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Kueue's topology assignment (status/tas.py): each worker's node selectors for its assigned domain, by
    # worker number (empty: the flavor has no topology).
    worker_node_selectors: tuple[dict[str, str], ...] = ()


# GKE's names for a Kubernetes taint effect (container_v1.NodeTaint.Effect).
GKE_TAINT_EFFECTS = {
    "NoSchedule": "NO_SCHEDULE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
}


def gke_taint(taint: dict[str, str]) -> dict[str, str]:
    effect = taint.get("effect") or "NoSchedule"
    return {
        "key": taint["key"],
        "value": taint.get("value") or "",
        "effect": GKE_TAINT_EFFECTS.get(effect, effect),
    }
