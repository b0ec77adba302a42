"""When a queued job should start, pure: Kueue admits a Workload when its ClusterQueue has the quota for it,
so the start of a waiting job is when enough of the queue's google.com/tpu quota frees up for it, after
the jobs ahead of it in Kueue's order have taken theirs.

The facts (reconciler/start_estimates.py gathers them): the ClusterQueue's nominal quota per flavor
(spec.resourceGroups[].flavors[].resources[].nominalQuota) and what its status says is reserved
(status.flavorsReservation); the TPUJobs that hold quota in it, each with when it gives it back (its
trainer's ETA, status.progress.eta, capped by its activeDeadlineSeconds); the TPUJobs waiting in it, each
with its priority and the time Kueue orders it by. Quota reserved by workloads the operator does not run
holds, as far as it knows, for ever; so does a job whose end it cannot tell (no ETA yet, stalled,
restarting, and no deadline).

The estimate replays Kueue's scheduler over that future (pkg/scheduler/scheduler.go schedule, one cycle per
release of quota): the waiting jobs in Kueue's order (pkg/cache/queue/cluster_queue.go baseCompareFunc: higher
priority first, then the earlier queue-order timestamp, which is the Workload's creation or its last
eviction, pkg/workload GetQueueOrderTimestamp), each admitted into the first of its flavors that has room
(flavorassigner: flavors are tried in the queue's order); under StrictFIFO the first that does not fit
blocks the rest, under BestEffortFIFO the others go ahead of it (cluster_queue.go: an inadmissible head is
set aside). A job ahead that is admitted in the replay holds its quota until it ends: only its deadline
says when, for a job that has not run yet; without one, what follows it is unknown.

Not modelled, so the estimate can be off: borrowing from a cohort (the job may start earlier) and lending;
preemption, and higher-priority jobs that arrive later (it may start later); admission checks (a
ProvisioningRequest's wait comes after the quota); fair sharing. Docs: docs/concepts/kueue.md.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
from dataclasses import dataclass, field

from tpujob.api.status import QueueStatus, StartEstimate
from tpujob.status.model import parse_timestamp, timestamp

# A new estimate replaces the one in the status only when it moved by more than this share of the wait, or
# by ESTIMATE_SLACK_SECONDS: a trainer's pace wobbles from read to read, and every change is a status write.
ESTIMATE_SLACK_SHARE = 0.02
ESTIMATE_SLACK_SECONDS = 2.0


@dataclass(frozen=True)
class Holder:
    """A TPUJob holding quota in the ClusterQueue: its chips per flavor (Kueue's assignment), and when it
    gives them back (None: unknown, `unknown` says why). `bound`: that time is a deadline it ends by at the
    latest, not an estimate of its end."""

    what: str
    chips: dict[str, int]
    ends: dt.datetime | None
    bound: bool = False
    unknown: str = ""


@dataclass(frozen=True)
class Waiter:
    """A TPUJob waiting in the ClusterQueue. `runs_for`: seconds it holds its quota once admitted, when known;
    `deadline`: when its activeDeadlineSeconds ends it, whatever it runs for (once its clock runs)."""

    key: str  # the job's UID
    what: str
    chips: int
    flavors: tuple[str, ...]  # the queue's flavors it may take, in the queue's order
    priority: int
    since: dt.datetime  # Kueue's queue-order timestamp
    runs_for: float | None = None
    deadline: dt.datetime | None = None
    # activeDeadlineSeconds of a job whose clock has not started (it counts from the admission): it runs
    # at most this long once admitted.
    runs_at_most: float | None = None
    tie: str = ""  # its Workload's UID: Kueue's order among equal priority and time


@dataclass(frozen=True)
class QueueFacts:
    """One ClusterQueue, as the operator could read it (`problem`: why it could not)."""

    name: str
    quota: dict[str, int] = field(default_factory=dict)  # nominal google.com/tpu per flavor, in order
    reserved: dict[str, int] | None = None  # status.flavorsReservation's google.com/tpu per flavor
    pending: int | None = None  # status.pendingWorkloads: every waiting Workload, the operator's or not
    strict_fifo: bool = False  # queueingStrategy StrictFIFO (else BestEffortFIFO)
    holders: tuple[Holder, ...] = ()
    waiters: tuple[Waiter, ...] = ()
    problem: str = ""


@dataclass(frozen=True)
class Estimate:
    """When the job should be admitted (None: unknown, `why` says why), and how many of the operator's jobs
    are ahead of it in Kueue's order. `bound`: a latest start, not an estimate: the time rests on a
    deadline, or quota whose release the operator cannot foresee (a job with no ETA, workloads it does not
    run) may come back sooner."""

    time: dt.datetime | None
    why: str = ""
    ahead: int | None = None
    bound: bool = False


def kueue_order(waiters: tuple[Waiter, ...]) -> list[Waiter]:
    """Kueue's order of a ClusterQueue's waiting Workloads: priority, then queue-order timestamp, then the
    Workload's UID (pkg/cache/queue/cluster_queue.go baseCompareFunc)."""
    return sorted(waiters, key=lambda w: (-w.priority, w.since, w.tie, w.key))


def foreign_chips(facts: QueueFacts) -> dict[str, int]:
    """Chips reserved per flavor by workloads the operator does not run: what the ClusterQueue's status
    says is reserved, less the operator's own holders'."""
    assert facts.reserved is not None
    own: dict[str, int] = {}
    for holder in facts.holders:
        for flavor, chips in holder.chips.items():
            own[flavor] = own.get(flavor, 0) + chips
    return {f: max(reserved - own.get(f, 0), 0) for f, reserved in facts.reserved.items()}


def _release_of(waiter: Waiter, admitted: dt.datetime) -> tuple[dt.datetime | None, bool]:
    """When a job admitted at `admitted` gives its quota back, and whether that is only a deadline."""
    deadline = max(waiter.deadline, admitted) if waiter.deadline is not None else None
    if waiter.runs_at_most is not None:
        most = admitted + dt.timedelta(seconds=waiter.runs_at_most)
        deadline = min(deadline, most) if deadline is not None else most
    if waiter.runs_for is not None:
        ends = admitted + dt.timedelta(seconds=waiter.runs_for)
        return (min(ends, deadline) if deadline is not None else ends), False
    return deadline, deadline is not None


def estimate(facts: QueueFacts, key: str, now: dt.datetime) -> Estimate:
    """When the waiting job `key` should be admitted by its ClusterQueue (see the module's note)."""
    if facts.problem:
        return Estimate(None, facts.problem)
    order = kueue_order(facts.waiters)
    me = next((w for w in order if w.key == key), None)
    if me is None:
        return Estimate(None, f"not yet seen waiting in ClusterQueue {facts.name}")
    ahead = order.index(me)
    if facts.reserved is None:
        return Estimate(None, f"ClusterQueue {facts.name} shows no quota reservation yet", ahead)
    if facts.pending is not None and facts.pending > len(order):
        return Estimate(
            None,
            f"{facts.pending - len(order)} workload(s) the operator does not run wait in ClusterQueue "
            f"{facts.name}, maybe ahead of it",
            ahead,
        )
    if not any(facts.quota.get(f, 0) >= me.chips for f in me.flavors):
        return Estimate(
            None,
            f"it needs {me.chips} chips and no flavor of ClusterQueue {facts.name} it may use has that much "
            "nominal quota (only borrowing from a cohort could admit it)",
            ahead,
        )
    foreign = foreign_chips(facts)
    free = {f: quota - foreign.get(f, 0) for f, quota in facts.quota.items()}
    # Releases to come: (time, order, chips per flavor, a deadline bound). What never comes (`stuck`: its
    # flavors, why) is why it may wait for ever, and the first such reason is said; or, if it is admitted
    # without it, it may come sooner: the time found is then a latest start.
    tie = itertools.count()
    releases: list[tuple[dt.datetime, int, dict[str, int], bool]] = []
    stuck = [({f}, f"{chips} chips of flavor {f} are held by workloads the operator does not run")
             for f, chips in foreign.items() if chips]  # fmt: skip
    for holder in facts.holders:
        for name, held in holder.chips.items():
            free[name] = free.get(name, 0) - held
        if holder.ends is None:
            stuck.append((set(holder.chips), holder.unknown or f"{holder.what} has no known end"))
        else:
            heapq.heappush(releases, (max(holder.ends, now), next(tie), holder.chips, holder.bound))
    waiting, at, bound = list(order), now, False
    while True:
        for waiter in list(waiting):
            room = next((f for f in waiter.flavors if free.get(f, 0) >= waiter.chips), None)
            if room is None:
                if facts.strict_fifo:
                    break
                continue
            waiting.remove(waiter)
            if waiter is me:
                unforeseen = at > now and any(flavors & set(me.flavors) for flavors, _ in stuck)
                return Estimate(at, "", ahead, bound or unforeseen)
            free[room] -= waiter.chips
            ends, is_bound = _release_of(waiter, at)
            if ends is None:
                why = f"{waiter.what}, ahead of it, has no known run time (no activeDeadlineSeconds)"
                stuck.append(({room}, why))
            else:
                heapq.heappush(releases, (ends, next(tie), {room: waiter.chips}, is_bound))
        if not releases:
            why = stuck[0][1] if stuck else f"ClusterQueue {facts.name} never has room for it"
            return Estimate(None, why, ahead)
        at, _, freed, is_bound = heapq.heappop(releases)
        bound = bound or is_bound
        for name, count in freed.items():
            free[name] = free.get(name, 0) + count


def holder_end(
    what: str,
    eta: dt.datetime | None,
    deadline: dt.datetime | None,
    now: dt.datetime,
    running: bool,
    stalled: bool = False,
    finished: bool = False,
) -> tuple[dt.datetime | None, bool, str]:
    """When a TPUJob holding quota gives it back: (time or None, whether only a deadline bounds it, why it is
    unknown). Its trainer's ETA while it runs and is not stalled (an ETA passed means any moment now), never
    later than its deadline; a job that finished gives its quota back now (Kueue frees it once the
    Workload is Finished)."""
    if finished:
        return now, False, ""
    cap = max(deadline, now) if deadline is not None else None
    if running and not stalled and eta is not None:
        ends = max(eta, now)
        return (min(ends, cap) if cap is not None else ends), False, ""
    if cap is not None:
        return cap, True, ""
    if stalled:
        return None, False, f"{what} is stalled (its trainer's step does not move) and has no deadline"
    if running:
        return None, False, f"{what} runs with no ETA yet (its trainer's step and target not read twice)"
    return None, False, f"{what} is not yet training (starting or restarting) and has no deadline"


def moved(before: dt.datetime | None, after: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether a new estimate differs enough from the one in the status to be written."""
    if before is None or after is None:
        return before != after
    slack = max(ESTIMATE_SLACK_SECONDS, ESTIMATE_SLACK_SHARE * max((after - now).total_seconds(), 0.0))
    return abs((after - before).total_seconds()) > slack


def summary(start: dt.datetime | None, bound: bool, now: dt.datetime, position: int | None = None) -> str:
    """What `kubectl get tj` shows for a queued job (status.queue.summary): its position in its ClusterQueue
    when known (Kueue's visibility API), then its start: "Queued #3, ~14:20Z", "Queued, by 14:20Z" (a
    latest start, from deadlines), "Queued, start unknown". A start more than a day away carries its date."""
    head = f"Queued #{position}" if position is not None else "Queued"
    if start is None:
        return f"{head}, start unknown"
    start = start.astimezone(dt.UTC)
    shown = (
        start.strftime("%H:%MZ") if start - now < dt.timedelta(hours=20) else start.strftime("%m-%d %H:%MZ")
    )
    return f"{head}, {'by ' if bound else '~'}{shown}"


def record(
    queue: QueueStatus, previous: StartEstimate | None, facts: QueueFacts | None, key: str, now: dt.datetime
) -> None:
    """A waiting job's status.queue: its estimated start and the summary `kubectl get` shows. The previous
    estimate stands while the new one is within its slack (no status write for a wobble of the pace)."""
    if facts is None:
        queue.estimated_start = None
        queue.summary = f"Queued #{queue.position}" if queue.position is not None else None
        return
    found = estimate(facts, key, now)
    before = parse_timestamp(previous.time) if previous is not None and previous.time else None
    kept = (
        previous is not None
        and not moved(before, found.time, now)
        and previous.bound == found.bound
        and previous.jobs_ahead == found.ahead
        and (previous.reason or "") == found.why
    )
    if kept:
        assert previous is not None
        queue.estimated_start = previous
    else:
        queue.estimated_start = StartEstimate(
            time=timestamp(found.time) if found.time is not None else None,
            bound=found.bound,
            jobs_ahead=found.ahead,
            reason=found.why[:1024] or None,
            computed_time=timestamp(now),
        )
    shown = queue.estimated_start
    queue.summary = summary(
        parse_timestamp(shown.time) if shown.time else None, shown.bound, now, queue.position
    )
