"""A queued job's start estimate, pure (status/start_estimate.py): Kueue's order and flavors replayed over
the releases of quota the operator can foresee; unknown where it cannot."""

import datetime as dt

import pytest

from tpujob.api.status import QueueStatus, StartEstimate
from tpujob.status import start_estimate as se

T0 = dt.datetime(2026, 11, 24, 12, 0, 0, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def holder(name, chips, ends_min=None, flavor="a", bound=False, unknown=""):
    ends = at(ends_min) if ends_min is not None else None
    return se.Holder(f"TPUJob {name}", {flavor: chips}, ends, bound, unknown or f"TPUJob {name} has no ETA")


def waiter(
    key, chips, since_min=0.0, priority=0, runs_min=None, deadline_min=None, flavors=("a",), most_min=None
):
    return se.Waiter(
        key,
        f"TPUJob {key}",
        chips,
        flavors,
        priority,
        at(since_min),
        runs_for=runs_min * 60 if runs_min is not None else None,
        deadline=at(deadline_min) if deadline_min is not None else None,
        runs_at_most=most_min * 60 if most_min is not None else None,
    )


def facts(holders=(), waiters=(), quota=16, reserved=None, pending=None, strict=False, **more):
    held = sum(c for h in holders for c in h.chips.values())
    return se.QueueFacts(
        "cq",
        quota=more.pop("quotas", {"a": quota}),
        reserved=more.pop("reserveds", {"a": held if reserved is None else reserved}),
        pending=len(waiters) if pending is None else pending,
        strict_fifo=strict,
        holders=tuple(holders),
        waiters=tuple(waiters),
        **more,
    )


# (case, facts, job, expected start in minutes from T0 or None, bound, jobs ahead, words in the reason)
CASES = [
    ("room now", facts([holder("r", 8, 30)], [waiter("me", 8)]), "me", 0, False, 0, ""),
    ("waits for the first ETA", facts([holder("r1", 8, 30), holder("r2", 8, 50)], [waiter("me", 8)]),
     "me", 30, False, 0, ""),
    ("needs two releases", facts([holder("r1", 8, 30), holder("r2", 8, 50)], [waiter("me", 16)]),
     "me", 50, False, 0, ""),
    ("an ETA passed: any moment", facts([holder("r1", 16, -5)], [waiter("me", 8)]), "me", 0, False, 0, ""),
    # A job ahead takes the first release and may give it back sooner than the second: a latest start.
    ("a job ahead takes the first release; its run time unknown",
     facts([holder("r1", 8, 30), holder("r2", 8, 50)], [waiter("first", 8, 0), waiter("me", 8, 1)]),
     "me", 50, True, 1, ""),
    ("a job ahead with a deadline ends by then: a bound",
     facts([holder("r1", 16, 30)], [waiter("first", 16, 0, deadline_min=100), waiter("me", 16, 1)]),
     "me", 100, True, 1, ""),
    ("a job ahead whose deadline counts from its admission",
     facts([holder("r1", 16, 30)], [waiter("first", 16, 0, most_min=45), waiter("me", 16, 1)]),
     "me", 75, True, 1, ""),
    ("a job ahead with a known run time",
     facts([holder("r1", 16, 30)], [waiter("first", 16, 0, runs_min=20), waiter("me", 16, 1)]),
     "me", 50, False, 1, ""),
    ("a job ahead with no run time blocks",
     facts([holder("r1", 16, 30)], [waiter("first", 16, 0), waiter("me", 16, 1)]),
     "me", None, False, 1, "TPUJob first, ahead of it, has no known run time"),
    ("higher priority goes first though later",
     facts([holder("r1", 16, 30)], [waiter("me", 16, 0), waiter("vip", 16, 5, priority=10)]),
     "me", None, False, 1, "TPUJob vip, ahead of it"),
    ("the earlier of equal priority goes first",
     facts([holder("r1", 16, 30)], [waiter("me", 16, 0), waiter("later", 16, 5)]),
     "me", 30, False, 0, ""),
    ("a holder with no ETA and no deadline", facts([holder("r1", 16)], [waiter("me", 8)]),
     "me", None, False, 0, "TPUJob r1 has no ETA"),
    ("a holder with no ETA but room elsewhere",
     facts([holder("r1", 8), holder("r2", 8, 10)], [waiter("me", 8)]),
     "me", 10, True, 0, ""),
    ("a holder bounded by its deadline", facts([holder("r1", 16, 90, bound=True)], [waiter("me", 8)]),
     "me", 90, True, 0, ""),
    ("quota held by workloads the operator does not run",
     facts([holder("r1", 8, 10)], [waiter("me", 16)], reserved=16),
     "me", None, False, 0, "8 chips of flavor a are held by workloads the operator does not run"),
    ("foreign quota that still leaves room",
     facts([holder("r1", 8, 10)], [waiter("me", 8)], quota=24, reserved=24),
     "me", 10, True, 0, ""),
    ("room now whatever the foreign quota does",
     facts([holder("r1", 8, 10)], [waiter("me", 8)], quota=32, reserved=24),
     "me", 0, False, 0, ""),
    ("a holder with no ETA on a flavor it may not use",
     facts([se.Holder("b1", {"b": 8}, None), se.Holder("a1", {"a": 8}, at(20))], [waiter("me", 8)],
           quotas={"a": 8, "b": 8}, reserveds={"a": 8, "b": 8}),
     "me", 20, False, 0, ""),
    ("workloads waiting that the operator does not run",
     facts([holder("r1", 16, 10)], [waiter("me", 8)], pending=3),
     "me", None, False, 0, "2 workload(s) the operator does not run"),
    ("bigger than the quota", facts([], [waiter("me", 32)]), "me", None, False, 0, "nominal quota"),
    ("no reservation in the status yet", facts([holder("r1", 16, 10)], [waiter("me", 8)], reserveds=None),
     "me", None, False, 0, "no quota reservation"),
    ("not among the waiters", facts([holder("r1", 16, 10)], [waiter("other", 8)]), "me", None, False, None,
     "not yet seen waiting"),
    ("the queue cannot be read", se.QueueFacts("cq", problem="ClusterQueue cq cannot be read"), "me", None,
     False, None, "cannot be read"),
    # BestEffortFIFO: a small job behind a big head that does not fit goes first; StrictFIFO: it waits.
    ("best effort: around a blocked head",
     facts([holder("r1", 8, 30), holder("r2", 4, 60)], [waiter("big", 16, 0), waiter("me", 4, 1)]),
     "me", 0, False, 1, ""),
    ("strict FIFO: behind a blocked head",
     facts([holder("r1", 8, 30), holder("r2", 4, 60)],
           [waiter("big", 16, 0, runs_min=10), waiter("me", 4, 1)], strict=True),
     "me", 70, False, 1, ""),
    # Flavors: a job may take the first of its flavors with room, in the queue's order.
    ("the second flavor frees first",
     facts([se.Holder("a1", {"a": 8}, at(60)), se.Holder("b1", {"b": 8}, at(20))],
           [waiter("me", 8, flavors=("a", "b"))], quotas={"a": 8, "b": 8}, reserveds={"a": 8, "b": 8}),
     "me", 20, False, 0, ""),
    ("a flavor it may not use does not count",
     facts([se.Holder("a1", {"a": 8}, at(60)), se.Holder("b1", {"b": 8}, at(20))],
           [waiter("me", 8, flavors=("a",))], quotas={"a": 8, "b": 8}, reserveds={"a": 8, "b": 8}),
     "me", 60, False, 0, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("facts_", "key", "minutes", "bound", "ahead", "why"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_estimate(facts_, key, minutes, bound, ahead, why):
    found = se.estimate(facts_, key, T0)
    assert found.time == (at(minutes) if minutes is not None else None), found
    assert (found.bound, found.ahead) == (bound, ahead), found
    assert why in found.why if why else found.why == "", found


END_CASES = [
    # (case, eta, deadline, running, stalled, finished, expected end in minutes or None, bound, words)
    ("its ETA", 30, None, True, False, False, 30, False, ""),
    ("capped by its deadline", 30, 20, True, False, False, 20, False, ""),
    ("an ETA passed", -3, None, True, False, False, 0, False, ""),
    ("stalled, no deadline", 30, None, True, True, False, None, False, "stalled"),
    ("stalled, a deadline", 30, 45, True, True, False, 45, True, ""),
    ("no ETA yet", None, None, True, False, False, None, False, "no ETA yet"),
    ("restarting", 30, None, False, False, False, None, False, "not yet training"),
    ("restarting, a deadline", 30, 50, False, False, False, 50, True, ""),
    ("a deadline passed", None, -1, False, False, False, 0, True, ""),
    ("finished, quota not yet freed", 30, None, False, False, True, 0, False, ""),
]


@pytest.mark.parametrize(
    ("eta", "deadline", "running", "stalled", "finished", "minutes", "bound", "why"),
    [c[1:] for c in END_CASES],
    ids=[c[0] for c in END_CASES],
)
def test_holder_end(eta, deadline, running, stalled, finished, minutes, bound, why):
    ends, is_bound, unknown = se.holder_end(
        "TPUJob r",
        at(eta) if eta is not None else None,
        at(deadline) if deadline is not None else None,
        T0,
        running=running,
        stalled=stalled,
        finished=finished,
    )
    assert (ends, is_bound) == ((at(minutes) if minutes is not None else None), bound)
    assert why in unknown if why else unknown == ""


@pytest.mark.parametrize(
    ("start", "bound", "position", "text"),
    [
        (at(140), False, None, "Queued, ~14:20Z"),
        (at(140), False, 3, "Queued #3, ~14:20Z"),
        (at(140), True, None, "Queued, by 14:20Z"),
        (None, False, None, "Queued, start unknown"),
        (None, False, 2, "Queued #2, start unknown"),
        (at(60 * 30), False, None, "Queued, ~11-25 18:00Z"),
    ],
)
def test_summary(start, bound, position, text):
    assert se.summary(start, bound, T0, position) == text


def test_the_estimate_in_the_status_moves_only_beyond_its_slack():
    """A wobble of a running trainer's pace is no status write: the estimate stands within 2 % of the wait
    (at least 2 s); beyond it, or when it becomes unknown, it is replaced."""
    base = facts([holder("r1", 16, 100)], [waiter("me", 8)])
    queue = QueueStatus(name="q")
    se.record(queue, None, base, "me", T0)
    first = queue.estimated_start
    assert first is not None and first.time == "2026-11-24T13:40:00Z" and first.jobs_ahead == 0
    assert queue.summary == "Queued, ~13:40Z"
    wobble = facts([holder("r1", 16, 101)], [waiter("me", 8)])  # 60 s of a 100-minute wait
    se.record(queue, first, wobble, "me", T0)
    assert queue.estimated_start is first
    later = facts([holder("r1", 16, 110)], [waiter("me", 8)])
    se.record(queue, first, later, "me", T0)
    assert queue.estimated_start.time == "2026-11-24T13:50:00Z"
    unknown = facts([holder("r1", 16)], [waiter("me", 8)])
    se.record(queue, first, unknown, "me", T0)
    assert queue.estimated_start.time is None and "no ETA" in queue.estimated_start.reason
    assert queue.summary == "Queued, start unknown"
    se.record(queue, first, None, "me", T0)  # nothing gathered: no estimate, no summary
    assert queue.estimated_start is None and queue.summary is None


def test_the_estimate_round_trips_the_wire():
    estimate = StartEstimate(time="2026-11-24T13:40:00Z", jobs_ahead=2, computed_time="2026-11-24T12:00:00Z")
    wire = QueueStatus(name="q", estimated_start=estimate, summary="Queued, ~13:40Z").to_wire()
    assert wire["estimatedStart"] == {
        "time": "2026-11-24T13:40:00Z",
        "bound": False,
        "jobsAhead": 2,
        "computedTime": "2026-11-24T12:00:00Z",
    }
    assert QueueStatus.model_validate(wire).estimated_start == estimate
