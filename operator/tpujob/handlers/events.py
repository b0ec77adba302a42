"""Watch events that ask for a pass: a TPUJob changed (not our own status write) or one of its pods did."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from tpujob.api import constants as c
from tpujob.handlers.deletion import release_when_gone
from tpujob.handlers.indexes import JOBS, index_job
from tpujob.handlers.workqueue import Runtime, forget, request_pass

PODS = ("", "v1", "pods")
SERVICES = ("", "v1", "services")
NETWORK_POLICIES = ("networking.k8s.io", "v1", "networkpolicies")
WORKLOADS = (c.KUEUE_GROUP, "workloads")  # in whichever version Kueue serves (reconciler/kueue.py)
# The pods and Services the operator made. The API server filters the watches by it (kopf's
# settings.watching.label_selectors, set in startup.configure), so other pods in the cluster reach the
# operator not at all: no watch event to decode, index or filter, and none held in memory.
OWNED_SELECTOR = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"


@kopf.on.event(*JOBS)
async def on_tpujob_event(
    type: str,
    body: kopf.Body,
    uid: str,
    namespace: str | None,
    name: str,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    runtime: Runtime = memo.runtime
    assert namespace is not None  # TPUJobs are namespaced
    index_job(runtime.indexes.jobs, type, (namespace, name), body)  # every event, our own writes too
    if type == "DELETED":
        forget(runtime, (namespace, name), uid)
        await release_when_gone(runtime, namespace, name, uid, dict(body))
        return
    runtime.reconciler.chips.seen(body)  # its namespace's chip count, before any pass reads it
    if runtime.reconciler.is_own_write(body):
        return  # the echo of the last pass' status write: that pass saw all the rest
    request_pass(runtime, namespace, name)


def pod_changed(runtime: Runtime, event_type: str, body: Mapping[str, Any], job: tuple[str, str]) -> None:
    """A watch event of one of the operator's pods (handlers/owned.py feeds them): a pass for its job."""
    indexed = runtime.indexes.jobs.get(job)
    if indexed:
        runtime.reconciler.saw_pod(body, indexed[0].uid)
    if event_type == "ADDED" and runtime.reconciler.is_own_create(body):
        return  # the echo of the pass' own create: that pass saw it coming
    request_pass(runtime, *job)
