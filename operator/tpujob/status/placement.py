"""What must hold before a pool is asked of GKE: a cluster recent enough for flex-start and for TPU7x, and
for a pool placed by a workload policy (tpu7x multi-host), a policy that exists and places the job's
topology. Pure: the cluster's version and the policy as the Compute API described it are observed facts."""

from __future__ import annotations

from tpujob.api.job import TPUJob
from tpujob.api.spec import CapacityMode, TPUType
from tpujob.api.status import Reason
from tpujob.status.model import GKEError, PolicyFact

# "To run TPUs [with flex-start], use GKE version 1.33.0-gke.1712000 or later" (GKE flex-start page).
FLEX_START_TPU_MIN_VERSION = "1.33.0-gke.1712000"
# "Ironwood (TPU7x) is available in GKE Standard clusters that run version 1.34.0-gke.2201000 and later"
# (GKE "About Ironwood (TPU7x) in GKE", https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood).
TPU7X_MIN_VERSION = "1.34.0-gke.2201000"


def version_key(version: str) -> tuple[int, ...]:
    """1.33.5-gke.1201000 -> (1, 33, 5, 1201000): GKE versions compare by these numbers."""
    return tuple(int(n) for n in version.replace("-gke.", ".").split(".") if n.isdigit())


def flex_start_problem(cluster_version: str) -> GKEError | None:
    """A cluster too old for flex-start TPU pools (None: fine, or its version not known yet)."""
    if not cluster_version or version_key(cluster_version) >= version_key(FLEX_START_TPU_MIN_VERSION):
        return None
    return GKEError(
        Reason.POOL_REJECTED,
        f"flex-start TPU node pools need GKE {FLEX_START_TPU_MIN_VERSION} or later and the cluster runs "
        f"{cluster_version}: upgrade the cluster, or use spec.capacity.mode spot, reservation or onDemand",
        permanent=True,
    )


def tpu7x_problem(cluster_version: str) -> GKEError | None:
    """A cluster too old for TPU7x (Ironwood) pools (None: fine, or its version not known yet)."""
    if not cluster_version or version_key(cluster_version) >= version_key(TPU7X_MIN_VERSION):
        return None
    return GKEError(
        Reason.POOL_REJECTED,
        f"tpu7x (Ironwood) node pools need GKE {TPU7X_MIN_VERSION} or later and the cluster runs "
        f"{cluster_version}: upgrade the cluster (gcloud container clusters upgrade --master "
        f"--cluster-version={TPU7X_MIN_VERSION} or later), or use another spec.tpu.type",
        permanent=True,
    )


def policy_problem(policy: PolicyFact, topology: str) -> GKEError | None:
    """Why a pool placed by `policy` cannot hold a `topology` slice (None: it can)."""
    if policy.error is not None:
        return policy.error
    if policy.topology is None:
        return GKEError(
            Reason.POOL_REJECTED,
            f"workload policy {policy.name} not found in projects/{policy.project}/regions/{policy.region}; "
            f"create it: gcloud compute "
            f"resource-policies create workload-policy {policy.name} --type=HIGH_THROUGHPUT "
            f"--accelerator-topology={topology} --region={policy.region}",
            permanent=True,
        )
    if policy.topology != topology:
        return GKEError(
            Reason.POOL_REJECTED,
            f"workload policy {policy.name} places {policy.topology} slices, but spec.tpu.topology is "
            f"{topology}: name a policy with --accelerator-topology={topology}, or set spec.tpu.topology: "
            f"{policy.topology}",
            permanent=True,
        )
    return None


def placement_problem(job: TPUJob, cluster_version: str, policy: PolicyFact | None) -> GKEError | None:
    """Why no pool of the job may be asked for now (None: they may)."""
    if job.spec.tpu.type == TPUType.tpu7x and (problem := tpu7x_problem(cluster_version)):
        return problem
    if job.spec.capacity.mode == CapacityMode.flex_start and (problem := flex_start_problem(cluster_version)):
        return problem
    if policy is None:
        return None
    return policy_problem(policy, job.spec.tpu.topology)
