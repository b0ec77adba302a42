"""settle(): a decision, and what carrying it out met (GKE's and the API server's answers), folded into the
status the pass writes. Pure, like decide()."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tpujob.render import naming
from tpujob.status.invalid import InvalidObserved
from tpujob.status.lifecycle import decide
from tpujob.status.model import POOL_STOPPING, ChipBudget, Decision, Event, GKEError, Observed, PoolView

# First look at a pool just requested: fast provisioning (or a create refused asynchronously) shows up at
# once; later polls are every TPUJOB_POLL_PROVISIONING_SECONDS.
FIRST_POLL_SECONDS = 0.25
# The Warning event of a pool GKE took only without its upgrade exclusion.
SHIELD_REFUSED_EVENT = "UpgradeShieldRefused"


@dataclass
class Applied:
    """What happened when a decision was carried out."""

    # Pool creates GKE accepted: slice -> the create operation it started.
    operations: dict[int, str] = field(default_factory=dict)
    # Pool creates GKE refused: slice -> its refusal, classified.
    refused: dict[int, GKEError] = field(default_factory=dict)
    # Pools whose delete GKE accepted (it is removing them), and whether any delete was not accepted.
    stopping: set[str] = field(default_factory=set)
    delete_refused: bool = False
    # The API server's words when it refused the worker pods ("" when it took them, or none were asked).
    pods_refused: str = ""
    # When refused pods may be asked again (a PriorityClass that does not exist, an admission webhook or
    # quota saying no: someone may fix it meanwhile, and the startup timeout ends the wait): the operator's
    # backoff for the job, from TPUJOB_REFUSED_BACKOFF_SECONDS doubling with refusals in a row, capped.
    retry_pods_after: float = 0.0
    # Pools GKE refused with their upgrade exclusion and accepted without it: slice -> GKE's refusal.
    unshielded: dict[int, str] = field(default_factory=dict)
    # When the refused pool creates (GKE's, or the decision's own: placement) may be asked again: the
    # operator's backoff for this job, which counts refusals in a row across passes.
    retry_refused_after: float | None = None
    # Kueue wrote the Workload between the pass' read and its write (409): the next pass reads it again.
    workload_conflict: bool = False
    # The chips the decision admitted the job with no longer fit (a pass side by side took them since the
    # counts were read): nothing was done, and the namespace's budget as the reservation found it.
    chips_taken: ChipBudget | None = None


def settle(observed: Observed | InvalidObserved, decision: Decision, applied: Applied) -> Decision:
    """The decision as the pass ends it. A refusal changes what the job waits for (its phase, reason,
    condition, a zone fallback or timeout), by the same rules decide() applies to a refusal a later pass
    would see: so those rules decide it, on the observation with the refusal in it, not a second copy."""
    settled = decision
    if isinstance(observed, Observed) and applied.chips_taken is not None:
        # Held by the limit after all, by the same gate (status/tenancy.py), on the budget as it is now (an
        # admission its status claims is still judged again: it was not vouched for).
        recheck = observed.chips is not None and observed.chips.recheck
        taken = dataclasses.replace(applied.chips_taken, recheck=recheck)
        return decide(dataclasses.replace(observed, chips=taken))
    if isinstance(observed, Observed) and (applied.refused or applied.pods_refused):
        settled = decide(_with_answers(observed, decision, applied))
    for pool in settled.status.node_pools:
        if pool.name in applied.stopping:
            pool.state = POOL_STOPPING  # the next passes wait for GKE instead of asking again
        if pool.slice in applied.operations and pool.state == "PROVISIONING":
            pool.operation = applied.operations[pool.slice] or None
    for slice_index, refusal in sorted(applied.unshielded.items()):
        name = naming.node_pool_name(observed.job, slice_index) if isinstance(observed, Observed) else ""
        settled.events.append(
            Event(
                "Warning",
                SHIELD_REFUSED_EVENT,
                f"GKE refused node pool {name} with its own exclusion from node auto-upgrades "
                f"(maintenancePolicy.exclusionUntilEndOfSupport): {refusal}; created it without, so GKE may "
                "upgrade its nodes while the job runs (the job then restarts as NodeUpgrade, uncounted). "
                "The operator's TPUJOB_GKE_UPGRADE_SHIELD=false (chart value gke.upgradeShield) stops asking",
            )
        )
    if applied.delete_refused:
        settled.requeue(observed.poll_provisioning_seconds if isinstance(observed, Observed) else 0.0)
    if (decision.refused or applied.refused) and applied.retry_refused_after is not None:
        settled.requeue(applied.retry_refused_after)
    elif applied.operations:
        settled.requeue(FIRST_POLL_SECONDS)
    if applied.pods_refused:
        settled.requeue(applied.retry_pods_after)
    if applied.workload_conflict:
        settled.requeue(FIRST_POLL_SECONDS)
    return settled


def _with_answers(observed: Observed, decision: Decision, applied: Applied) -> Observed:
    """The observation with the pass' own answers in it: pools GKE accepted are PROVISIONING as GKE will
    report them (no status message yet: the first poll that finds them so writes no status), refusals are
    GKE errors, and refused pods are known refused."""
    pools = observed.pools
    if applied.operations or applied.refused:
        views = {p.slice: p for p in observed.pools or ()}
        for slice_index, operation in applied.operations.items():
            views[slice_index] = PoolView(
                slice_index,
                naming.node_pool_name(observed.job, slice_index),
                "PROVISIONING",
                operation=operation,
                zone=decision.status.zone or "",
            )
        pools = tuple(views[k] for k in sorted(views))
    return dataclasses.replace(
        observed,
        pools=pools,
        gke_errors={**observed.gke_errors, **applied.refused},
        pods_refused=applied.pods_refused or observed.pods_refused,
    )
