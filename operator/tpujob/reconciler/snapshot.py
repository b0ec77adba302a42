"""One snapshot per pass: what the watches and the loops show the pass, taken once at its start (in the event
loop, under the job's lock, handlers/workqueue.py) and passed as one argument. Facts reach a pass only
through it: a watch event that lands mid-pass changes what the next pass sees, never this one's.

A snapshot holds references, not copies: the job as the index keeps it (its compact JSON text, decoded by the
pass in its worker thread), a tuple of its pods' and Workloads' views (the watches' own frozen objects), and
the cluster's facts, `Watched`'s maps and values, which are replaced whole when they change, never changed in
place, so a map a snapshot took stays as it was (copy on write: the node watch copies its small map of
faulty nodes at a change of one; the maintenance notices are read whole at each resync)."""

from __future__ import annotations

import json
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpujob import status as s
from tpujob.gke_cluster import ClusterCheck
from tpujob.render.workload import KueueApi

EMPTY: Mapping[str, Any] = types.MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one pass knows of the world beyond its own memory (reconciler/memory.py, what it did itself)."""

    wire: str  # the job's body as the watch indexed it (handlers/indexes.IndexedJob), compact JSON
    pods: tuple[s.PodView, ...] = ()
    # Deleted workers' last state as the pods' watch showed it, gone from its map now (kept in the job's
    # record by Reconciler.saw_pod, reconciler/memory.py): their last words.
    departed: tuple[s.PodView, ...] = ()
    service_exists: bool = False
    # Kueue's Workloads for the job's name (None: the Workload watch has not listed them, or does not run).
    workloads: tuple[s.WorkloadView, ...] | None = None
    network_policy_seen: bool = False  # the NetworkPolicy watch shows the namespace's workers' policy
    # GKE's host maintenance notices (node -> Unix seconds) and the TPU device plugin's faults, by node.
    maintenance: Mapping[str, int] = field(default_factory=lambda: EMPTY)
    node_faults: Mapping[str, tuple[s.NodeFault, ...]] = field(default_factory=lambda: EMPTY)
    # TPU nodes deleted lately, node -> when (RFC 3339): a bad host's VM replaced since (status/bad_nodes.py).
    nodes_deleted: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    cluster_check: ClusterCheck | None = None  # what the last GetCluster said (None: not yet)
    kueue: KueueApi | None = None  # the Workload API Kueue serves (None: not found)
    kueue_problem: str = ""  # why Kueue's Workloads cannot be read now ("" none)

    def body(self) -> dict[str, Any]:
        """A fresh copy of the job's body: the pass may keep or change it."""
        decoded: dict[str, Any] = json.loads(self.wire)
        return decoded


class Watched:
    """The cluster's facts the loops and watches keep between passes, each replaced whole when it changes
    (never changed in place: a snapshot holds them by reference). Written by their loop or watch through
    the setters; read only by `take`."""

    def __init__(self) -> None:
        self._maintenance: Mapping[str, int] = EMPTY
        self._node_faults: Mapping[str, tuple[s.NodeFault, ...]] = EMPTY
        self._nodes_deleted: Mapping[str, str] = EMPTY
        self._cluster_check: ClusterCheck | None = None
        self._kueue: KueueApi | None = None
        self._kueue_problem = ""
        self._kueue_served_problem = ""

    def set_maintenance(self, notices: Mapping[str, int]) -> None:
        """The resync's list of notices (Observer.refresh_maintenance), whole."""
        self._maintenance = types.MappingProxyType(dict(notices))

    def set_node_faults(self, node: str, faults: tuple[s.NodeFault, ...]) -> bool:
        """A node's faults as its watch event shows them (handlers/nodes.py); whether they changed. The map
        holds only faulty nodes (a few), copied at each change."""
        if self._node_faults.get(node, ()) == faults:
            return False
        changed = dict(self._node_faults)
        if faults:
            changed[node] = faults
        else:
            changed.pop(node, None)
        self._node_faults = types.MappingProxyType(changed)
        return True

    def nodes_deleted(self) -> Mapping[str, str]:
        """The deleted nodes as kept now: for their one writer (handlers/nodes.py), which replaces them
        whole."""
        return self._nodes_deleted

    def set_nodes_deleted(self, deleted: Mapping[str, str]) -> None:
        """The node watch's deleted nodes (a new map at each deletion: handlers/nodes.note_deleted)."""
        self._nodes_deleted = types.MappingProxyType(dict(deleted))

    def set_cluster_check(self, check: ClusterCheck) -> ClusterCheck | None:
        """GetCluster's answer (Observer.check_cluster); the one before it."""
        previous, self._cluster_check = self._cluster_check, check
        return previous

    def set_kueue(self, served: KueueApi | None, problem: str) -> None:
        """What the Workload watch's discovery found served, or why none (reconciler/kueue.KueueServed)."""
        self._kueue, self._kueue_served_problem = served, problem

    def set_kueue_problem(self, problem: str) -> None:
        """Why the Workload watch does not run ("" while it does: handlers/owned.py)."""
        self._kueue_problem = problem

    def take(
        self,
        wire: str,
        pods: Sequence[s.PodView] = (),
        service_exists: bool = False,
        workloads: Sequence[s.WorkloadView] | None = None,
        network_policy_seen: bool = False,
        departed: Sequence[s.PodView] = (),
    ) -> Snapshot:
        """The snapshot of one pass: the job's own objects as its caller read them from the watches, and the
        cluster's facts as they are now."""
        return Snapshot(
            wire=wire,
            pods=tuple(pods),
            departed=tuple(departed),
            service_exists=service_exists,
            workloads=None if workloads is None else tuple(workloads),
            network_policy_seen=network_policy_seen,
            maintenance=self._maintenance,
            node_faults=self._node_faults,
            nodes_deleted=self._nodes_deleted,
            cluster_check=self._cluster_check,
            kueue=self._kueue,
            kueue_problem=self._kueue_problem or self._kueue_served_problem,
        )
