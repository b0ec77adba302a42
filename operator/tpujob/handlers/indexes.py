"""The watched state every pass reads without API calls: kopf indexes of jobs, owned pods and Services.

The index functions are coroutines although they do no I/O: kopf runs a plain function in a worker
thread and awaits it there and back, for every watch event (kopf/_core/actions/invocation.py), which
costs more than the indexing itself."""

from __future__ import annotations

from typing import Any

import kopf

from tpujob.api import constants as c
from tpujob.handlers.events import JOBS, PODS, SERVICES
from tpujob.reconciler import pod_view

# The metadata a pass, the finalizer patch and the Events read; managedFields and annotations (kubectl's
# last-applied copy of the spec) would only be held in memory, once per job.
INDEXED_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "labels",
    "finalizers",
    "deletionTimestamp",
)


@kopf.index(*JOBS)
async def tpujob_index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): indexed_job(body)}


def indexed_job(body: Any) -> dict[str, Any]:
    meta = body["metadata"]
    indexed = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: meta[key] for key in INDEXED_METADATA if key in meta},
        "spec": body.get("spec"),
    }
    if body.get("status") is not None:
        indexed["status"] = body["status"]
    return indexed


@kopf.index(*PODS)
async def pod_index(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, labels.get(c.LABEL_JOB_NAME, "")): pod_view(body)}


@kopf.index(*SERVICES)
async def service_index(namespace: str | None, name: str, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): True}
