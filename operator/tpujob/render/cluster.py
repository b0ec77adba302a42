"""Where a job's parts go and what they are made for: the operator's cluster settings, and the slice a job's
TPU spec resolves to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpujob import tpu
from tpujob.api.job import TPUJob
from tpujob.api.spec import DEFAULT_OAUTH_SCOPES


@dataclass(frozen=True)
class Cluster:
    """Where node pools go: the operator's configuration. The defaults are an example for `tpujob render`."""

    project: str = "my-project"
    location: str = "us-central1"
    cluster: str = "my-cluster"
    zone: str = "us-central1-a"
    # The cluster runs Workload Identity (GetCluster says so): pools then get the GKE metadata server.
    workload_identity: bool = False
    # Pools carry their own exclusion from node auto-upgrades (UPGRADE_SHIELD; TPUJOB_GKE_UPGRADE_SHIELD).
    upgrade_shield: bool = True
    # The pools' nodes act as this Google service account (TPUJOB_GKE_NODE_SERVICE_ACCOUNT); empty: GKE's
    # default, the project's Compute Engine default service account.
    node_service_account: str = ""
    # The nodes' OAuth scopes: the operator's setting, never a job's (TPUJOB_GKE_NODE_OAUTH_SCOPES).
    node_oauth_scopes: tuple[str, ...] = DEFAULT_OAUTH_SCOPES
    # Each job's NetworkPolicy (render/network.py; TPUJOB_NETWORK_POLICY), and the peers that may reach its
    # trainers' metrics port besides the job's own pods (TPUJOB_NETWORK_POLICY_METRICS_FROM).
    network_policy: bool = True
    metrics_from: tuple[Mapping[str, Any], ...] = ()

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    @property
    def zones(self) -> tuple[str, ...]:
        """The operator's zones (TPUJOB_GKE_ZONE, comma-separated): every job's default list."""
        return tuple(z.strip() for z in self.zone.split(",") if z.strip())


def slice_shape(job: TPUJob) -> tpu.SliceShape:
    spec = job.spec.tpu
    return tpu.resolve_slice(spec.type, spec.topology, spec.machine_type)
