"""TPU nodes watched for the hardware conditions GKE's TPU device plugin sets from libtpu's signals
(MegascaleHangDetected, SliceErrorDetected: ai-on-gke/tpu-device-plugin pkg/metrics/metrics.go), so a hung
slice restarts within seconds rather than at the next resync or its progressDeadlineSeconds.

The watch is filtered by the API server to nodes with the TPU accelerator label, and keeps two small maps
(Reconciler.watched: each pass's snapshot holds them, reconciler/snapshot.py): node -> its hardware
conditions, and the nodes deleted lately, with when (a job stops avoiding a bad host whose VM was replaced
since: status/bad_nodes.py).
When a node's conditions change (a new heartbeat included), the jobs with a pod on that node get a pass.
Cluster-wide operators only: a Role cannot grant nodes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kopf._cogs.clients import watching
from kopf._cogs.structs import references

from tpujob import status as s
from tpujob.api import constants as c
from tpujob.handlers.workqueue import Runtime, request_pass
from tpujob.status.model import parse_timestamp, timestamp
from tpujob.status.recovery import HARDWARE_CONDITIONS

log = logging.getLogger(__name__)

NODE_RESOURCE = references.Resource(
    group="", version="v1", plural="nodes", kind="Node", namespaced=False, verbs=frozenset({"list", "watch"})
)
NODES = ("", "v1", "nodes")
RESTART_SECONDS = 5.0


# A node's status is written by its kubelet and the device plugin: a compromised node writes anything.
# What is read of it is bounded: the first MAX_CONDITIONS conditions (a node has about a dozen), one fault
# per hardware condition type, its message cut to MAX_FAULT_MESSAGE characters (it goes into the job's
# status and Events), and a heartbeat that is not an RFC 3339 time is no heartbeat (no restart from it).
MAX_CONDITIONS = 64
MAX_FAULT_MESSAGE = 1024
# Deleted nodes remembered (a name, a time: ~100 bytes each), enough for every node of a large cluster's
# pools recreated at once; a job compares the nodes it avoids against them.
MAX_DELETED_NODES = 8192
MAX_NODE_NAME = 253


def node_faults(body: Mapping[str, Any]) -> tuple[s.NodeFault, ...]:
    """The device plugin's conditions that are True on the node, with their heartbeat and message; what is
    not as Kubernetes writes a NodeCondition is left out, never raised into the watch."""
    node_status = body.get("status")
    conditions = node_status.get("conditions") if isinstance(node_status, Mapping) else None
    if not isinstance(conditions, list):
        return ()
    found: dict[str, s.NodeFault] = {}
    for cond in conditions[:MAX_CONDITIONS]:
        if not isinstance(cond, Mapping):
            continue
        kind = cond.get("type")
        if not isinstance(kind, str) or kind not in HARDWARE_CONDITIONS or kind in found:
            continue
        if cond.get("status") != "True":
            continue
        message = cond.get("message")
        found[kind] = s.NodeFault(
            kind,
            _heartbeat(cond.get("lastHeartbeatTime")),
            message[:MAX_FAULT_MESSAGE] if isinstance(message, str) else "",
        )
    return tuple(found.values())


def _heartbeat(value: object) -> str:
    if not isinstance(value, str) or len(value) != len("2026-01-01T00:00:00Z"):
        return ""
    try:
        parse_timestamp(value)
    except ValueError:
        return ""
    return value


def note_deleted(before: Mapping[str, str], name: str, when: str) -> dict[str, str]:
    """The deleted nodes with one more, its name and when (RFC 3339), the latest MAX_DELETED_NODES kept: a
    new map (a pass's snapshot holds the one before)."""
    deleted = dict(before)
    deleted.pop(name, None)
    deleted[name[:MAX_NODE_NAME]] = when
    while len(deleted) > MAX_DELETED_NODES:
        del deleted[next(iter(deleted))]
    return deleted


def jobs_on_node(runtime: Runtime, node: str) -> set[tuple[str, str]]:
    pods = runtime.indexes.pods
    return {job for job in list(pods) if any(view.node == node for view in pods[job])}


def watch_selector(settings: kopf.OperatorSettings) -> None:
    """The API server sends only TPU nodes."""
    settings.watching.label_selectors[NODES] = c.NODE_LABEL_ACCELERATOR  # the label exists


def node_changed(runtime: Runtime, event: Any) -> None:
    """One event of the nodes' watch: the node's faults kept, a deleted node's name and when (a node of that
    name seen later is a new VM, no longer a bad host), and a pass for the jobs on a node whose faults
    changed. Never raises: a failure is logged and the watch goes on with the next node."""
    try:
        if isinstance(event, watching.Bookmark) or event.get("type") == "BOOKMARK":
            return
        body = event["object"]
        name = body["metadata"]["name"]
        if event["type"] == "DELETED" and isinstance(name, str):
            runtime.reconciler.watched.set_nodes_deleted(
                note_deleted(
                    runtime.reconciler.watched.nodes_deleted(), name, timestamp(dt.datetime.now(dt.UTC))
                )
            )
        found = () if event["type"] == "DELETED" else node_faults(body)
        if not runtime.reconciler.watched.set_node_faults(name, found):
            return
        if event["type"] is not None:  # a change, not the first listing: the jobs there look now
            for job in jobs_on_node(runtime, name):
                request_pass(runtime, *job)
    except Exception:
        log.exception("a TPU node's watch event could not be handled; the watch goes on")


async def watch_node_faults(runtime: Runtime, settings: kopf.OperatorSettings) -> None:
    while True:
        try:
            async for event in watching.infinite_watch(
                settings=settings, resource=NODE_RESOURCE, namespace=None
            ):
                node_changed(runtime, event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watching TPU nodes failed; watching again in %.0f s", RESTART_SECONDS)
        await asyncio.sleep(RESTART_SECONDS)
