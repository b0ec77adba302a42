"""TPU nodes watched for the hardware conditions GKE's TPU device plugin sets from libtpu's signals
(MegascaleHangDetected, SliceErrorDetected: ai-on-gke/tpu-device-plugin pkg/metrics/metrics.go), so a hung
slice restarts within seconds rather than at the next resync or its progressDeadlineSeconds.

The watch is filtered by the API server to nodes with the TPU accelerator label, and keeps one small map:
node -> its hardware conditions (Reconciler.observer.node_faults, read by each pass). When a node's
conditions change (a new heartbeat included), the jobs with a pod on that node get a pass. Cluster-wide
operators only: a Role cannot grant nodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kopf._cogs.clients import watching
from kopf._cogs.structs import references

from tpujob import status as s
from tpujob.api import constants as c
from tpujob.handlers.workqueue import Runtime, request_pass
from tpujob.status.recovery import HARDWARE_CONDITIONS

log = logging.getLogger(__name__)

NODE_RESOURCE = references.Resource(
    group="", version="v1", plural="nodes", kind="Node", namespaced=False, verbs=frozenset({"list", "watch"})
)
NODES = ("", "v1", "nodes")
RESTART_SECONDS = 5.0


# A condition's message as kept: the device plugin's are one line; a node's status is not the operator's.
MAX_FAULT_MESSAGE = 1024


def node_faults(body: Mapping[str, Any]) -> tuple[s.NodeFault, ...]:
    """The device plugin's conditions that are True on the node, with their heartbeat and message. A
    condition that is not what Kubernetes types (an object of strings) is not read."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return tuple(
        s.NodeFault(cond["type"], _text(cond.get("lastHeartbeatTime")), _text(cond.get("message")))
        for cond in (conditions if isinstance(conditions, list) else ())
        if isinstance(cond, dict) and cond.get("type") in HARDWARE_CONDITIONS and cond.get("status") == "True"
    )


def _text(value: object) -> str:
    return value[:MAX_FAULT_MESSAGE] if isinstance(value, str) else ""


def jobs_on_node(runtime: Runtime, node: str) -> set[tuple[str, str]]:
    pods = runtime.indexes.pods
    return {job for job in list(pods) if any(view.node == node for view in pods[job])}


def watch_selector(settings: kopf.OperatorSettings) -> None:
    """The API server sends only TPU nodes."""
    settings.watching.label_selectors[NODES] = c.NODE_LABEL_ACCELERATOR  # the label exists


def node_changed(runtime: Runtime, faults: dict[str, tuple[s.NodeFault, ...]], event: Any) -> None:
    """One event of the nodes' watch: the node's faults kept, and a pass for the jobs on a node whose faults
    changed. Never raises: a failure is logged and the watch goes on with the next node."""
    try:
        if isinstance(event, watching.Bookmark) or event.get("type") == "BOOKMARK":
            return
        body = event["object"]
        name = body["metadata"]["name"]
        found = () if event["type"] == "DELETED" else node_faults(body)
        if faults.get(name, ()) == found:
            return
        if found:
            faults[name] = found
        else:
            faults.pop(name, None)
        if event["type"] is not None:  # a change, not the first listing: the jobs there look now
            for job in jobs_on_node(runtime, name):
                request_pass(runtime, *job)
    except Exception:
        log.exception("a TPU node's watch event could not be handled; the watch goes on")


async def watch_node_faults(runtime: Runtime, settings: kopf.OperatorSettings) -> None:
    faults = runtime.reconciler.observer.node_faults
    while True:
        try:
            async for event in watching.infinite_watch(
                settings=settings, resource=NODE_RESOURCE, namespace=None
            ):
                node_changed(runtime, faults, event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watching TPU nodes failed; watching again in %.0f s", RESTART_SECONDS)
        await asyncio.sleep(RESTART_SECONDS)
