"""Capacity that ends or waits: flex-start queues and run durations, host maintenance, zone fallback."""

from __future__ import annotations

import datetime as dt

from tpujob.api.spec import FLEX_START_MAX_RUN_SECONDS, CapacityMode
from tpujob.api.status import ConditionType, Phase, Reason
from tpujob.status.builder import Builder, begin_restart, known_pools, limit_reached, provisioning_timed_out
from tpujob.status.model import (
    POOL_RELEASED_STATES,
    PodView,
    is_current,
    parse_timestamp,
    timestamp,
)
from tpujob.status.pool_conditions import region_of_zone


def fall_back_if_due(b: Builder, reason: str) -> str | None:
    """Waiting for capacity in one zone past spec.capacity.zoneFallbackSeconds: try the next zone. The
    pools in the zone left are deleted (and recreated in the next one once GKE has removed them). Returns
    the message for the status (its phase event, a Warning, says it), or None when not due.

    QuotaExceeded moves only to a zone of another region: TPU quota is regional ("Insufficient regional
    quota", "Limit: ... in region ..."), so a zone of the same region meets the same shortfall, and every
    zone a job may use is in the cluster's region (the cluster check refuses others). The rule is kept for
    the day the design allows another region's zone (a second cluster), where the quota really differs.
    A flex-start request queued in a zone keeps its place unless the operator's setting
    TPUJOB_GKE_FLEX_START_ZONE_FALLBACK allows the move (Observed.flex_start_zone_fallback)."""
    zones, current = b.observed.zones, b.status.zone
    if reason not in (Reason.STOCKOUT, Reason.QUOTA, Reason.WAITING_FOR_CAPACITY) or len(zones) < 2:
        return None
    if reason == Reason.WAITING_FOR_CAPACITY and not b.observed.flex_start_zone_fallback:
        return None
    fallback = b.job.spec.capacity.zone_fallback_seconds
    if current is None or current not in zones:
        return None
    following = zones[(zones.index(current) + 1) % len(zones)]
    if reason == Reason.QUOTA and region_of_zone(following) == region_of_zone(current):
        return None
    if not limit_reached(b, b.status.zone_since, fallback):
        return None
    b.status.zone, b.status.zone_since = following, timestamp(b.now)
    for pool in known_pools(b):
        leaving = pool.state not in POOL_RELEASED_STATES
        if leaving and pool.name not in b.decision.delete_pools:
            b.decision.delete_pools.append(pool.name)
    b.decision.create_pools.clear()
    return f"{reason} in {current} for {fallback} s or more: trying {following}"


def start_run_clock(b: Builder) -> str:
    """Flex-start: GKE deletes the slice's VMs maxRunDurationSeconds after they were created ("About
    flex-start provisioning mode"), so the clock runs from the slice's nodes' creation, however long its
    workers took to start (an image pull, a missing Secret); a Node is registered a little after its VM
    boots, which maintenanceLeadSeconds covers. Without the nodes' times (a namespace-scoped operator
    cannot list nodes) it runs from now: when the workers all ran."""
    if b.status.run_deadline is None:
        seconds = b.job.spec.capacity.max_run_duration_seconds or FLEX_START_MAX_RUN_SECONDS
        since = b.observed.slice_created or b.now
        b.status.run_deadline = timestamp(since + dt.timedelta(seconds=seconds))
        lead = b.job.spec.stop_lead_seconds
        act_at = since + dt.timedelta(seconds=seconds - lead)
        b.decision.requeue(max((act_at - b.now).total_seconds(), 0))
    return b.status.run_deadline


def run_duration_ends(b: Builder) -> bool:
    """Flex-start: before the VMs go, the workers checkpoint (SIGTERM) and the job restarts on a new slice,
    queued again (its pool is deleted and asked for anew). Not the application's fault: not counted."""
    deadline = b.status.run_deadline
    if deadline is None:
        return False
    lead = b.job.spec.stop_lead_seconds
    act_at = parse_timestamp(deadline) - dt.timedelta(seconds=lead)
    if b.now < act_at:
        b.decision.requeue((act_at - b.now).total_seconds())
        return False
    detail = (
        f"the flex-start slice's VMs end at {deadline} (maxRunDurationSeconds); checkpointing {lead} s ahead"
    )
    begin_restart(b, Reason.RUN_DURATION, detail, infrastructure=True)
    b.status.run_deadline = None
    for pool in known_pools(b):
        if pool.state not in POOL_RELEASED_STATES:
            b.decision.delete_pools.append(pool.name)
    return True


def maintenance_due(b: Builder) -> bool:
    """GKE announced maintenance for a host of the slice (one host's maintenance stops the whole slice):
    shown in the status with an event, and maintenanceLeadSeconds (at least the workers' grace period) before
    it the workers checkpoint (SIGTERM)
    and the job restarts. New pods avoid nodes under notice (render.pod), so they wait for the hosts to come
    back. Not the application's fault: not counted."""
    times = [
        b.observed.maintenance[p.node]
        for p in b.observed.pods
        if is_current(b.status, p) and not p.deleting and p.node in b.observed.maintenance
    ]
    if not times:
        b.status.maintenance_time = None
        return False
    when = dt.datetime.fromtimestamp(min(times), dt.UTC)
    if b.status.maintenance_time != timestamp(when):
        b.status.maintenance_time = timestamp(when)
        b.event(
            "Warning",
            Reason.MAINTENANCE_SCHEDULED,
            f"GKE host maintenance for the slice at {timestamp(when)}",
        )
    act_at = when - dt.timedelta(seconds=b.job.spec.stop_lead_seconds)
    if b.now < act_at:
        b.decision.requeue((act_at - b.now).total_seconds())
        return False
    begin_restart(
        b, Reason.MAINTENANCE, f"GKE host maintenance at {timestamp(when)}; checkpointing ahead", True
    )
    b.status.maintenance_time = None
    return True


def waiting_for_flex_capacity(b: Builder, pods: list[PodView]) -> bool:
    """Flex-start: pods pending unschedulable on the empty pool is the queue for capacity, not a fault."""
    if b.job.spec.capacity.mode != CapacityMode.flex_start:
        return False
    if not any(p.phase == "Pending" and p.unschedulable for p in pods):
        return False
    if b.status.provisioning_since is None:
        b.status.provisioning_since = timestamp(b.now)
    if provisioning_timed_out(b, Reason.WAITING_FOR_CAPACITY, "the flex-start slice was still queued"):
        return True
    if moved := fall_back_if_due(b, Reason.WAITING_FOR_CAPACITY):
        for pod in pods:
            if not pod.deleting and pod.name not in b.decision.delete_pods:
                b.decision.delete_pods.append(pod.name)
        b.set_phase(Phase.PROVISIONING, Reason.ZONE_FALLBACK, moved)
        b.decision.requeue(b.observed.poll_provisioning_seconds)
        return True
    # The time queued follows from `since` (and status.provisioningSince): a message that changed every
    # pass would rewrite the status every poll for as long as the queue lasts.
    message = f"queued for flex-start capacity since {b.status.provisioning_since}"
    if len(b.observed.zones) > 1 and not b.observed.flex_start_zone_fallback:
        message += (
            f" in {b.status.zone}; kept there past zoneFallbackSeconds: moving would delete the request and "
            "its place in the queue (the operator's TPUJOB_GKE_FLEX_START_ZONE_FALLBACK allows it)"
        )
    b.set_phase(Phase.PROVISIONING, Reason.WAITING_FOR_CAPACITY, message)
    b.condition(ConditionType.RUNNING, False, Reason.WAITING_FOR_CAPACITY, message)
    b.decision.requeue(b.observed.poll_provisioning_seconds)
    return True
