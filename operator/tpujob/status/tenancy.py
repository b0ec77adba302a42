"""A namespace's chip limit (tenancy policy maxChips), pure: which jobs count against it, and a job that would
pass it waits, before any pool is asked for, with the reason ChipLimit.

A job counts from the pass that admits it (status.startTime set; what it will hold, every slice's chips) until
it ends or is suspended, and after that for the pools it still has (their deletes take minutes): quota held
from admission, as Kueue reserves a Workload's quota when it admits it. A job queued through Kueue is the
queue's to admit (its ClusterQueue's quota): it is not held here, and still counts once admitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tpujob.api.job import TPUJob
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.status.builder import Builder
from tpujob.status.cost import chips_held, job_chips
from tpujob.status.model import TERMINAL_PHASES, ChipBudget, ChipReservation, PodView
from tpujob.status.shape import as_admitted


def chips_counted(job: TPUJob) -> int:
    """The chips `job` counts against its namespace's limit (see the module's note): its admitted shape's,
    whatever an edit says (status/shape.py)."""
    job = as_admitted(job)[0]
    status = job.status or TPUJobStatus()
    if status.start_time is not None and status.phase not in (*TERMINAL_PHASES, Phase.SUSPENDED):
        return job_chips(job)
    return chips_held(job, status)


def needs_admission(job: TPUJob) -> bool:
    """Not admitted yet (or again, after a suspend), and able to run: the pass may admit it."""
    status = job.status or TPUJobStatus()
    return (
        status.start_time is None and status.phase not in TERMINAL_PHASES and not job.spec.run_policy.suspend
    )


def claims_admission(job: TPUJob) -> bool:
    """Its status says admitted and it may still run: what a status writer could set to pass the gate."""
    status = job.status or TPUJobStatus()
    return (
        status.start_time is not None
        and status.phase not in (*TERMINAL_PHASES, Phase.SUSPENDED)
        and not job.spec.run_policy.suspend
    )


@dataclass(frozen=True)
class ChipCounts:
    """A namespace's chip ledger as a pass read it (reconciler/tenancy.py, O(1)): the limit, what the
    namespace's other jobs count, and the startTime of the admission this process made or kept for the job
    (None: none)."""

    namespace: str
    limit: int
    others: int
    vouched: str | None = None


def chip_budget(job: TPUJob, pods: Sequence[PodView], counts: ChipCounts) -> ChipBudget | None:
    """The budget a job its namespace's limit must admit is judged by; None when there is nothing to judge.

    The gate does not trust a status it did not write: a job whose status says admitted is judged again
    unless this process left that admission there (`counts.vouched`) or the job runs pods already (after a
    restart, the record is gone and the pods vouch). A writer of tpujobs/status who sets startTime on a job
    over the limit gets it held, its startTime taken back."""
    budget = ChipBudget(counts.namespace, counts.limit, counts.others)
    if needs_admission(job):
        return budget
    start = (job.status or TPUJobStatus()).start_time
    if not claims_admission(job) or pods or (start is not None and counts.vouched == start):
        return None
    return dataclasses.replace(budget, recheck=True)


def over_limit(b: Builder) -> bool:
    """Hold a job its namespace's limit has no room for (True): nothing of it is created, the status says
    why, and the next pass looks again (the others' chips free up as they end). A job whose status claims
    an admission the operator cannot vouch for (budget.recheck) is judged as if it had none."""
    budget = b.observed.chips
    if budget is None or (b.status.start_time is not None and not budget.recheck):
        return False
    chips = job_chips(b.job)
    if budget.fits(chips):
        b.decision.chips = ChipReservation(budget.namespace, budget.limit, chips)  # act.py reserves them
        return False
    if budget.recheck:
        b.status.start_time = None  # not admitted by the operator: its clocks have not started
    b.set_phase(
        Phase.PENDING,
        Reason.CHIP_LIMIT,
        f"waiting for TPU chips: the job needs {chips}, and namespace {budget.namespace}'s TPUJobs hold "
        f"{budget.others} of the {budget.limit} its tenancy policy allows (maxChips); it starts when "
        f"{chips - (budget.limit - budget.others)} more are free",
    )
    b.decision.requeue(b.observed.poll_provisioning_seconds * 2)
    return True
