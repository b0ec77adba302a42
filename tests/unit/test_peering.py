"""Which replica works: kopf's peering rule, as the operator's own loops apply it."""

from __future__ import annotations

import datetime as dt

from tpujob import peering

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)


def peer(priority: int, seconds_ago: float, lifetime: int = 15) -> dict[str, object]:
    return {
        "priority": priority,
        "lifetime": lifetime,
        "lastseen": (NOW - dt.timedelta(seconds=seconds_ago)).isoformat(),
    }


def test_the_highest_live_priority_works_and_the_others_stand_by() -> None:
    peers = {"a": peer(100, 1), "b": peer(200, 2)}
    assert not peering.leads(peers, "a", 100, NOW)
    assert peering.leads(peers, "b", 200, NOW)


def test_a_silent_peer_is_dead_after_its_lifetime_and_the_standby_takes_over() -> None:
    peers = {"a": peer(100, 1), "b": peer(200, 16)}  # b was SIGKILLed 16 s ago, lifetime 15 s
    assert peering.leads(peers, "a", 100, NOW)
    assert not peering.leads({"a": peer(100, 1), "b": peer(200, 14)}, "a", 100, NOW)


def test_the_same_priority_pauses_both_as_kopf_does() -> None:
    peers = {"a": peer(100, 1), "b": peer(100, 1)}
    assert not peering.leads(peers, "a", 100, NOW)
    assert not peering.leads(peers, "b", 100, NOW)


def test_an_empty_object_or_only_itself_means_active() -> None:
    assert peering.leads({}, "a", 1, NOW)
    assert peering.leads({"a": peer(1, 0)}, "a", 1, NOW)
    assert peering.leads({"gone": None}, "a", 1, NOW)  # kopf removes a peer by writing null


def test_each_replica_draws_its_own_priority() -> None:
    drawn = {peering.new_priority() for _ in range(100)}
    assert len(drawn) == 100 and all(1 <= p <= peering.MAX_PRIORITY for p in drawn)


def leads_over(reads: list[bool | None], renew_deadline: float = 10.0, period: float = 3.0) -> list[bool]:
    """Whether the replica is active after each read (one every `period` seconds; None: a failed read)."""
    lead, seen = peering.Lead(active=False), []
    for tick, says_leads in enumerate(reads):
        lead = peering.next_lead(lead, says_leads, tick * period, renew_deadline)
        seen.append(lead.active)
    return seen


def test_a_standby_takes_the_lead_after_two_reads_in_a_row_and_lets_go_at_once() -> None:
    # At start a lone record says "leads": not yet (a peer starting beside it may not have written its own);
    # a read that says another leads resets the count; an active one stands by at the first such read.
    assert leads_over([True, False, True, True, True, False, True]) == [
        False, False, False, True, True, False, False,
    ]  # fmt: skip


def test_an_active_replica_that_cannot_read_stands_by_at_its_renew_deadline() -> None:
    # Confirmed at t=3 s; reads fail from t=6 s: still active at 9 and 12 s (within 10 s), not at 15 s.
    assert leads_over([True, True, None, None, None, None]) == [False, True, True, True, True, False]
    # A standby that cannot read stays one.
    assert leads_over([None, None, None]) == [False, False, False]
    # One failed read within the deadline changes nothing.
    reads = [True, True, None, True, None, None, True]
    assert leads_over(reads) == [False, True, True, True, True, True, True]


def test_a_replica_that_stood_down_rejoins_under_every_live_peer() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    live = {"lastseen": now.isoformat(), "lifetime": 15}
    dead = {"lastseen": (now - dt.timedelta(seconds=60)).isoformat(), "lifetime": 15}
    peers = {
        "me": {**live, "priority": 900},
        "took-over": {**live, "priority": 500},
        "gone": {**dead, "priority": 7},
    }
    for _ in range(50):
        assert 1 <= peering.priority_below(peers, "me", now) < 500  # the dead one does not count
    assert peering.priority_below({"me": peers["me"], "gone": peers["gone"]}, "me", now) is None
    assert peering.priority_below({**peers, "lowest": {**live, "priority": 1}}, "me", now) is None


def test_a_replica_that_stood_down_keeps_trying_to_rejoin_until_a_live_peer_is_there_to_go_under() -> None:
    now = dt.datetime(2026, 11, 25, 1, 24, 52, tzinfo=dt.UTC)
    me = {"priority": 200, "lifetime": 6, "lastseen": now.isoformat()}
    taker = {"priority": 100, "lifetime": 6}
    late = {"me": me, "taker": {**taker, "lastseen": (now - dt.timedelta(seconds=7)).isoformat()}}
    live = {"me": me, "taker": {**taker, "lastseen": now.isoformat()}}
    # The one that took over looks stale for a read (its write late under load): still to rejoin.
    assert peering.rejoin(True, late, "me", now) == (True, None)
    stood_down, lower = peering.rejoin(True, live, "me", now)
    assert not stood_down and lower is not None and 1 <= lower < 100
    assert peering.rejoin(False, live, "me", now) == (False, None)  # never stood down: keeps its priority
