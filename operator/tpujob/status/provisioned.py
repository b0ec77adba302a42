"""A queued job admitted on provisioned capacity makes no node pool of its own. Pure.

Kueue's ProvisioningRequest admission check (pkg/controller/admissionchecks/provisioning) admits a Workload
only once the cluster autoscaler has made its nodes (GKE: queued provisioning, Dynamic Workload Scheduler,
class queued-provisioning.gke.io, which creates a node pool for the request and deletes it when the request
ends). The job's pods consume those nodes (render/podset_updates.py): a pool of the job's own beside them
would be the same TPUs paid for twice. So, for as long as such an admission stands, the job runs as
`nodePool.policy: existing` does: no pool create, its pods selecting the TPU nodes by accelerator and
topology, the provisioned pool's lifetime GKE's and Kueue's business.
"""

from __future__ import annotations

from collections.abc import Iterable

from tpujob.api.job import TPUJob
from tpujob.api.spec import NodePoolPolicy
from tpujob.render.podset_updates import provisioned
from tpujob.render.workload import job_pod_set_facts, pod_sets_differences
from tpujob.status.kueue_views import WorkloadView


def _admitted(workload: WorkloadView) -> bool:
    """Admitted and holding the quota. An evicted or deleted Workload counts until its admission is cleared:
    the job stops on the provisioned nodes (it has no pool of its own to delete), and a running job's shape
    stays the one it was admitted with (status/shape.py)."""

    def true(kind: str) -> bool:
        return any(c.get("type") == kind and c.get("status") == "True" for c in workload.conditions)

    return true("Admitted") and true("QuotaReserved")


def as_created(job: TPUJob) -> TPUJob:
    """A job `as_provisioned` runs as `existing`, as it was written (`create`): what its Workload was made
    from, before the admission came with provisioned capacity."""
    node_pool = job.spec.node_pool.model_copy(update={"policy": NodePoolPolicy.create})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"node_pool": node_pool})})


def provisioned_workload(job: TPUJob, workloads: Iterable[WorkloadView] | None) -> WorkloadView | None:
    """The job's Workload, if Kueue admitted it on capacity a ProvisioningRequest made."""
    uid = job.metadata.uid or ""
    for workload in workloads or ():
        if workload.owner_uid == uid and _admitted(workload) and provisioned(workload.admission_checks):
            return workload
    return None


def as_provisioned(job: TPUJob, workloads: Iterable[WorkloadView] | None) -> TPUJob:
    """The job as the pass runs it: `policy: existing` while its admission came with provisioned capacity."""
    if job.spec.node_pool.policy != NodePoolPolicy.create or provisioned_workload(job, workloads) is None:
        return job
    node_pool = job.spec.node_pool.model_copy(update={"policy": NodePoolPolicy.existing})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"node_pool": node_pool})})


def workload_differences(job: TPUJob, workload: WorkloadView) -> list[str]:
    """What makes `workload`'s pod sets not the job's (render.workload.pod_sets_differences). A job run on
    provisioned capacity has lost its own pool's node selector and toleration (as_provisioned), which its
    Workload, made before, still has: it is compared as it was written too, and either form matches."""
    differences = pod_sets_differences(job_pod_set_facts(job), workload.pod_sets)
    if (
        differences
        and job.spec.node_pool.policy == NodePoolPolicy.existing
        and provisioned_workload(job, [workload])
    ):
        return pod_sets_differences(job_pod_set_facts(as_created(job)), workload.pod_sets)
    return differences
