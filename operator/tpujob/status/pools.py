"""Create policy: one node pool per slice, in the job's zone, before any pod; what GKE says about them."""

from __future__ import annotations

import dataclasses

from tpujob import tpu
from tpujob.api.spec import CapacityMode, NodePoolPolicy
from tpujob.api.status import ConditionStatus, ConditionType, Phase, Reason, TransitionReason
from tpujob.render import naming
from tpujob.status.builder import Builder, known_pools, provisioning_timed_out, record_pools
from tpujob.status.capacity import fall_back_if_due
from tpujob.status.model import (
    POOL_DELETED,
    POOL_ERROR_GRACE,
    POOL_MISSING,
    POOL_READY_STATES,
    POOL_RELEASED_STATES,
    POOL_STOPPING,
    POOL_WAIT_STATES,
    GKEError,
    PoolView,
    parse_timestamp,
    timestamp,
)
from tpujob.status.placement import placement_problem
from tpujob.status.pool_conditions import capacity_shortage, pool_error_reason, quota_advice
from tpujob.status.recreation import describe as recreation
from tpujob.status.recreation import nodes_usable

# The Warning event of a pool asked for in a zone the TPU catalog does not list for the job's generation.
ZONE_NOT_LISTED = "ZoneNotListed"

# Why a job waits that needs someone to act (the spec, the cluster, a reservation): shown before the rest.
_NEEDS_SOMEONE = frozenset(
    {Reason.POOL_REJECTED, Reason.GKE_CONFIG, Reason.RESERVATION_EXHAUSTED, Reason.RESERVATION_NOT_FOUND}
)


def pools_ready(b: Builder) -> bool:
    """Create policy: one RUNNING pool per slice before any pod. Returns True when pods may run."""
    job = b.job
    if job.spec.node_pool.policy != NodePoolPolicy.create:
        b.condition(
            ConditionType.NODE_POOLS_READY,
            True,
            TransitionReason.EXISTING_NODE_POOLS,
            "policy existing: pods use pools made elsewhere",
        )
        return True
    pools = {p.slice: p for p in known_pools(b)}
    placement = placement_problem(job, b.observed.cluster_version, b.observed.workload_policy)
    views: list[PoolView] = []
    problems: list[tuple[str, str]] = []
    for slice_index in range(job.spec.tpu.slices):
        name = naming.node_pool_name(job, slice_index)
        pool = pools.get(slice_index, PoolView(slice_index, name, POOL_MISSING))
        pool, problem = _slice_pool(b, pool, b.observed.gke_errors.get(slice_index), placement)
        if problem is not None:
            problems.append(problem)
        views.append(pool)
    if b.observed.pools is not None or b.decision.create_pools:
        record_pools(b, views)
    zone = b.status.zone
    if b.decision.create_pools and zone and (unlisted := tpu.zone_warning(job.spec.tpu.type, zone)):
        b.event("Warning", ZONE_NOT_LISTED, unlisted)  # asked of GKE anyway: its answer decides
    # A pool GKE updates (RECONCILING: UPGRADE_NODES "includes most forms of updates to node pools ... The
    # nodes are generally still usable") serves the job, unless GKE's work is why it restarted.
    usable = POOL_READY_STATES | ({"RECONCILING"} if nodes_usable(b) else set())
    ready = all(v.state in usable for v in views)
    # An operation read GKE refused (403): the pass went on without it, the status names the permission.
    denied = next((v.denied for v in views if v.denied), "")
    if ready:
        if job.spec.capacity.mode != CapacityMode.flex_start:  # flex-start waits on, for its VMs
            b.status.provisioning_since = None
        b.condition(
            ConditionType.NODE_POOLS_READY,
            True,
            TransitionReason.NODE_POOLS_RUNNING,
            _with_denied(f"{len(views)} node pool(s) running", denied),
        )
        return True
    # Permanent refusals first: they need someone to act, the rest only time.
    problems.sort(key=lambda problem: problem[0] not in _NEEDS_SOMEONE)
    reason, message = problems[0] if problems else (Reason.PROVISIONING, _pools_message(views))
    message = _with_denied(message, denied)
    if reason == Reason.QUOTA:
        # Which quota to raise, and where: no zone move can help (capacity.fall_back_if_due).
        message = quota_advice(message, b.status.zone or "")
    elif (
        reason == Reason.POOL_REJECTED
        and b.status.zone
        and (unlisted := tpu.zone_warning(job.spec.tpu.type, b.status.zone))
        and unlisted not in message
    ):
        message = f"{message} ({unlisted})"  # GKE's words first: they decide
    if b.status.provisioning_since is None:
        b.status.provisioning_since = timestamp(b.now)  # the wait shows (and alerts) as any other
    if reason in (Reason.NODE_UPGRADE, Reason.NODE_REPAIR):
        # GKE brings the slice back itself, however long it takes: no provisioning timeout, no zone fallback.
        b.condition(ConditionType.NODE_POOLS_READY, False, reason, message)
        b.set_phase(Phase.PROVISIONING, reason, message)
        b.decision.requeue(b.observed.poll_provisioning_seconds)
        return False
    if provisioning_timed_out(b, reason, message):
        return False
    if moved := fall_back_if_due(b, reason):
        reason, message = Reason.ZONE_FALLBACK, moved
    b.condition(ConditionType.NODE_POOLS_READY, False, reason, message)
    b.set_phase(Phase.PROVISIONING, reason, message)
    b.decision.requeue(b.observed.poll_provisioning_seconds)
    return False


def place(b: Builder) -> None:
    """The zone the job's pools are in, or go to: the first of its zones until a fallback moves on."""
    zones = b.observed.zones
    if zones and b.status.zone not in zones:
        b.status.zone, b.status.zone_since = zones[0], timestamp(b.now)


def _slice_pool(
    b: Builder, pool: PoolView, error: GKEError | None, placement: GKEError | None
) -> tuple[PoolView, tuple[str, str] | None]:
    """One slice's pool: what to do about it, and why the job waits for it (None: no problem to show).
    `placement`: why no pool may be asked for now; a create it withholds is a refusal, backed off as one."""
    gone = pool.state in POOL_RELEASED_STATES
    if not gone and pool.zone and b.status.zone and pool.zone != b.status.zone:
        # In a zone the job has left (a fallback): deleted, again until GKE accepts it.
        b.decision.delete_pools.append(pool.name)
        return pool, (Reason.ZONE_FALLBACK, f"moving to {b.status.zone}: deleting {pool.name} in {pool.zone}")
    if pool.state in (POOL_MISSING, POOL_DELETED):
        if error is None and placement is not None:
            error = b.decision.refused[pool.slice] = placement
        if error is None:
            b.decision.create_pools.append(pool.slice)
            fresh = dataclasses.replace(
                pool, state="PROVISIONING", message="", condition="", operation="", zone=b.status.zone or ""
            )
            return fresh, None
        return dataclasses.replace(pool, state=POOL_MISSING, message=error.message), (
            error.reason,
            error.message,
        )
    capacity = capacity_shortage(pool.condition)
    if capacity is not None and pool.retrying is not False and pool.state in ("ERROR", "PROVISIONING"):
        # GKE retries a stockout or a quota shortfall itself while the create operation runs: wait for it
        # (deleting would throw its place away, and GKE refuses the delete anyway).
        return pool, (capacity, pool.message)
    if pool.state == "ERROR":
        reason = pool_error_reason(pool.condition)
        if capacity is not None or _error_outlived_grace(b, pool):
            b.decision.delete_pools.append(pool.name)  # recreated once GKE has removed it
        if capacity == Reason.QUOTA:
            # GKE ended the create on a quota shortfall: asked again on the refusals' backoff (someone must
            # raise the quota), not at the next poll.
            b.decision.refused[pool.slice] = GKEError(Reason.QUOTA, pool.message, permanent=True)
        return pool, (reason, pool.message)
    if pool.state == "RECONCILING" and (doing := recreation(pool)) is not None:
        return pool, doing  # the job waits for GKE to bring the slice's hosts back
    if pool.state == POOL_STOPPING and (cause := _pool_removal_cause(b)) is not None:
        return pool, cause  # still why the job waits, until the pool is recreated
    if pool.state not in POOL_READY_STATES | POOL_WAIT_STATES:
        return pool, (Reason.GKE_UNAVAILABLE, f"unexpected node pool state {pool.state}")
    return pool, None


def _pool_removal_cause(b: Builder) -> tuple[str, str] | None:
    """A pool deleted because of a stockout or a lasting ERROR: that reason, while GKE removes it."""
    condition = next((c for c in b.status.conditions if c.type == ConditionType.NODE_POOLS_READY), None)
    if condition is None or condition.status != ConditionStatus.false:
        return None
    if condition.reason not in (Reason.STOCKOUT, Reason.QUOTA, Reason.POOL_LOST):
        return None
    return condition.reason, condition.message


def _with_denied(message: str, denied: str) -> str:
    return f"{message}; {denied}" if denied and denied not in message else message


def _pools_message(views: list[PoolView]) -> str:
    return ", ".join(f"{v.name}: {v.state}" for v in views)


def _error_outlived_grace(b: Builder, pool: PoolView) -> bool:
    """ERROR seen in the previous status too, for longer than the grace period."""
    before = next((p for p in b.status.node_pools if p.slice == pool.slice), None)
    condition = next((c for c in b.status.conditions if c.type == ConditionType.NODE_POOLS_READY), None)
    if before is None or before.state != "ERROR" or condition is None or not condition.last_transition_time:
        return False
    return b.now - parse_timestamp(condition.last_transition_time) >= POOL_ERROR_GRACE
