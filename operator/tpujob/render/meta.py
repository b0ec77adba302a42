"""What every Kubernetes object the operator makes for a job carries: its labels and its owner."""

from __future__ import annotations

from typing import Any

from tpujob.api import constants as c
from tpujob.api.job import TPUJob


def job_labels(job: TPUJob) -> dict[str, str]:
    return {c.LABEL_JOB_NAME: job.metadata.name, c.LABEL_MANAGED_BY: c.MANAGED_BY}


def owner_references(job: TPUJob) -> list[dict[str, Any]]:
    """Owned children are garbage-collected with the job; none when the job has no UID (a file)."""
    if not job.metadata.uid:
        return []
    return [
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "name": job.metadata.name,
            "uid": job.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def owned_metadata(job: TPUJob, name: str, labels: dict[str, str]) -> dict[str, Any]:
    """An object of the job's namespace, owned by the job (created in one request with its owner: a crash
    cannot leave it without one)."""
    meta: dict[str, Any] = {"name": name, "namespace": job.metadata.namespace, "labels": labels}
    owners = owner_references(job)
    if owners:
        meta["ownerReferences"] = owners
    return meta
