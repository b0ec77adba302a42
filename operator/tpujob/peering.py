"""Active and standby replicas through kopf's peering: every replica writes itself (priority, lifetime,
last seen) into one peering object; a replica pauses while a live peer has a higher priority, or the
same one (kopf/_core/engines/peering.py, process_peering_event). kopf pauses its own watches by that
rule; the operator's own loops and requeues ask `leads()` the same question. Pure: no I/O here."""

from __future__ import annotations

import datetime as dt
import os
import random
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GROUP = "kopf.dev"
VERSION = "v1"
CLUSTER_PLURAL = "clusterkopfpeerings"
NAMESPACED_PLURAL = "kopfpeerings"
# Every replica its own priority: kopf freezes all replicas of the same priority.
MAX_PRIORITY = 2**31 - 1


def own_identity() -> str:
    """This process's identity in the peering object, as kopf takes it (POD_ID): the pod's name, set
    by the chart; `ensure_identity` gives a process outside a pod one before kopf starts."""
    return os.environ["POD_ID"]


def ensure_identity() -> None:
    """kopf reads POD_ID when it starts, and the operator's own loops must know the same name."""
    if not os.environ.get("POD_ID"):
        os.environ["POD_ID"] = f"{socket.gethostname()}-{os.getpid()}"


def new_priority() -> int:
    """A priority no other replica holds (a collision, one in two billion, would pause both)."""
    return random.SystemRandom().randint(1, MAX_PRIORITY)


def leads(peers: Mapping[str, Any], identity: str, priority: int, now: dt.datetime) -> bool:
    """Whether this replica is the active one: no other live peer has its priority or a higher one."""
    return all(int(peer.get("priority", 0)) < priority for peer in live_peers(peers, identity, now).values())


def live_peers(peers: Mapping[str, Any], identity: str, now: dt.datetime) -> dict[str, Mapping[str, Any]]:
    """The other replicas whose records are live."""
    return {
        other: peer
        for other, peer in peers.items()
        if other != identity and isinstance(peer, Mapping) and is_live(peer, now)
    }


def is_live(peer: Mapping[str, Any], now: dt.datetime) -> bool:
    """A peer's record was written less than its lifetime ago."""
    lastseen = dt.datetime.fromisoformat(str(peer.get("lastseen", "")))
    return lastseen + dt.timedelta(seconds=int(peer.get("lifetime", 60))) > now


# Reads of the peering object in a row, its own record in it, that must say a standby leads before it acts
# (one read could be the last before a live peer's record lands).
READS_TO_LEAD = 2


class NotLeading(RuntimeError):
    """A write or a GKE call refused inside this process: this replica is not, or no longer, the active
    one."""


@dataclass(frozen=True)
class Lead:
    """What one replica knows of its lead between two reads of the peering object."""

    active: bool
    in_a_row: int = 0  # reads in a row that said it leads
    confirmed_at: float = 0.0  # monotonic time of the last read that said it leads
    not_before: float = 0.0  # monotonic time before which it does not take the lead (starting_lead)


def starting_lead(now: float, lifetime: float) -> Lead:
    """A replica just started, alone in the peering object, does not lead for one lifetime. A peer starting
    beside it may not have written its record yet (its imports and kopf's start slowed by a loaded node:
    seconds), and by kopf's own rule a peer silent for a lifetime is dead: once that long has passed, every
    peer that started with it is in the object or counts as dead, so two replicas starting together never
    both act. The hold ends as soon as it reads another live peer's record (kopf's rule then orders the
    two, and the other reads its record too): a replica joining running ones, as in a rolling update,
    takes the lead it outranks them for at once."""
    return Lead(active=False, not_before=now + lifetime)


def next_lead(
    lead: Lead, says_leads: bool | None, now: float, renew_deadline: float, sees_peers: bool = False
) -> Lead:
    """The lead after one more attempt to read the peering object (`says_leads` None: the read failed or
    timed out; `sees_peers`: it had another live peer's record). An active replica lets go at the first
    read that says another leads, and when it has not confirmed its lead for `renew_deadline` seconds
    (shorter than the lifetime after which the others may take over: it stops before they start, as
    client-go's leader election gives up at its renew deadline).
    A standby takes over after READS_TO_LEAD reads in a row say it leads, and not before `not_before`
    unless it sees a peer (starting_lead)."""
    if says_leads is None:
        active = lead.active and now - lead.confirmed_at <= renew_deadline
        return Lead(active, 0, lead.confirmed_at, lead.not_before)
    in_a_row = lead.in_a_row + 1 if says_leads else 0
    not_before = 0.0 if sees_peers else lead.not_before
    active = says_leads if lead.active else in_a_row >= READS_TO_LEAD and now >= not_before
    return Lead(active, in_a_row, now if says_leads else lead.confirmed_at, not_before)


# The shortest wait the lead loop takes at its renew deadline (a read given no time at all would spin).
LEAST_WAIT_SECONDS = 0.05


def wait_within_deadline(lead: Lead, now: float, renew_deadline: float, period: float) -> float:
    """How long the lead loop may wait (for a read, or between two reads) before it must judge its lead
    again. An active replica's renew deadline is a time, not a count of failed reads: no wait runs past it,
    so a replica cut off from the API server stands down at the deadline itself, however long a black-holed
    read would hang (client-go's leader election times its renewals the same way). A standby waits a
    period."""
    if not lead.active:
        return period
    return max(LEAST_WAIT_SECONDS, min(period, lead.confirmed_at + renew_deadline - now))


def priority_below(peers: Mapping[str, Any], identity: str, now: dt.datetime) -> int | None:
    """A priority under every other live peer's, for a replica that stood down at its renew deadline: it
    rejoins as a standby instead of taking the lead back from the one that took over. None: no live peer
    (or none it can go under)."""
    lowest = min(
        (int(peer.get("priority", 0)) for peer in live_peers(peers, identity, now).values()), default=0
    )
    return random.SystemRandom().randint(1, lowest - 1) if lowest > 1 else None


def rejoin(
    stood_down: bool, peers: Mapping[str, Any], identity: str, now: dt.datetime
) -> tuple[bool, int | None]:
    """For a replica that stood down at its renew deadline and reads the peering object again: whether it
    still has to rejoin, and the priority to rejoin with (None: keep its own). It keeps trying while no
    live peer is there to go under: the one that took over may look stale for a read (its own write late
    under load), and rejoining with its old priority would take the lead back at the next read."""
    if not stood_down:
        return False, None
    lower = priority_below(peers, identity, now)
    return lower is None, lower


def peering_object(name: str, namespace: str | None) -> dict[str, Any]:
    """The object the replicas meet in: ClusterKopfPeering for a cluster-wide operator, else a
    KopfPeering in the watched namespace."""
    if namespace is None:
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KopfPeering",
        "metadata": {"name": name, "namespace": namespace},
    }


def peering_crd(cluster_wide: bool) -> dict[str, Any]:
    """kopf's peering CRD (https://docs.kopf.dev/en/latest/peering/): its status holds each replica's
    record, free-form. The chart ships both kinds (make generate)."""
    kind = "ClusterKopfPeering" if cluster_wide else "KopfPeering"
    plural = CLUSTER_PLURAL if cluster_wide else NAMESPACED_PLURAL
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "scope": "Cluster" if cluster_wide else "Namespaced",
            "group": GROUP,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }
