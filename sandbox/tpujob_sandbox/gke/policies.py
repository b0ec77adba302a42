"""Compute Engine workload policies, which place multi-host TPU7x (Ironwood) node pools.

A user makes one with `gcloud compute resource-policies create workload-policy NAME --type=HIGH_THROUGHPUT
--accelerator-topology=2x2x2 --region=R` (GKE "Deploy TPU7x workloads"); a pool names it in
`placementPolicy.policyName`, and its nodes carry the policy's accelerator topology in the
`cloud.google.com/gke-tpu-topology` label. Reads go through the Compute API's REST path
`/compute/v1/projects/{project}/regions/{region}/resourcePolicies/{name}` (google-cloud-compute's
ResourcePoliciesClient.get), with the topology in `workloadPolicy.acceleratorTopology`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from tpujob_sandbox.gke.errors import GkeError


@dataclass(frozen=True)
class WorkloadPolicy:
    name: str
    region: str
    accelerator_topology: str
    type: str = "HIGH_THROUGHPUT"

    def resource(self, project: str) -> dict[str, Any]:
        """Compute's JSON for the policy (field names of compute_v1.ResourcePolicy)."""
        link = f"https://www.googleapis.com/compute/v1/projects/{project}/regions/{self.region}"
        return {
            "kind": "compute#resourcePolicy",
            "name": self.name,
            "region": link,
            "selfLink": f"{link}/resourcePolicies/{self.name}",
            "status": "READY",
            "workloadPolicy": {"type": self.type, "acceleratorTopology": self.accelerator_topology},
        }


class WorkloadPolicies:
    def __init__(self) -> None:
        self._policies: dict[tuple[str, str], WorkloadPolicy] = {}
        self._lock = threading.Lock()

    def add(self, policy: WorkloadPolicy) -> None:
        with self._lock:
            self._policies[(policy.region, policy.name)] = policy

    def find(self, region: str, name: str) -> WorkloadPolicy | None:
        with self._lock:
            return self._policies.get((region, name))

    def clear(self) -> None:
        with self._lock:
            self._policies.clear()


def policy_not_found(project: str, region: str, name: str) -> GkeError:
    """Compute's 404 for a missing resource policy ("The resource '...' was not found")."""
    return GkeError(
        404,
        "NOT_FOUND",
        f"The resource 'projects/{project}/regions/{region}/resourcePolicies/{name}' was not found",
    )


def pool_policy_missing(project: str, region: str, name: str) -> GkeError:
    """GKE refuses a pool naming a workload policy that does not exist: INVALID_ARGUMENT, since the request
    cannot succeed as written. The exact wording is not documented; this states what is wrong."""
    return GkeError(
        400,
        "INVALID_ARGUMENT",
        f'Placement policy "{name}" was not found: resource '
        f"'projects/{project}/regions/{region}/resourcePolicies/{name}' does not exist.",
    )
