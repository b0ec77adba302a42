"""Kueue's topology-aware scheduling (TAS) and `nodePool.policy: create`. Pure.

A ResourceFlavor with `spec.topologyName` makes Kueue's scheduler place each pod set on the nodes it sees
now, by topology domain, and write the placement into the admission
(status.admission.podSetAssignments[].topologyAssignment; Kueue pkg/cache/tas, pkg/scheduler/flavorassigner
tas_flavorassigner.go); the job's pods are then bound to those domains (pkg/controller/tas,
topology_ungater.go: a node selector per pod by its assigned domain). Nodes the operator creates only after
the admission (`policy: create`) are in none of the assigned domains, so such an admission cannot be
honoured: the job is refused, saying why and what to do. (Passing an assignment to the pods of a
`policy: existing` job is not done yet: those pods keep the flavor's selectors only.)
"""

from __future__ import annotations

from typing import Any

from tpujob.api.job import TPUJob
from tpujob.api.spec import NodePoolPolicy


def tas_problem(job: TPUJob, admission: dict[str, Any] | None) -> str | None:
    """Why a topology-aware admission cannot run this job (None: it can, or the admission has no topology)."""
    if job.spec.node_pool.policy != NodePoolPolicy.create:
        return None
    assigned = [
        str(a.get("name"))
        for a in (admission or {}).get("podSetAssignments") or []
        if isinstance(a, dict) and a.get("topologyAssignment")
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
