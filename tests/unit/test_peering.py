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


def test_a_standby_takes_the_lead_after_two_reads_in_a_row_and_lets_go_at_once() -> None:
    reads = [True, False, True, True, True, False, True]
    active, in_a_row, seen = False, 0, []
    for says_leads in reads:
        active, in_a_row = peering.next_lead(active, says_leads, in_a_row)
        seen.append(active)
    # At start a lone record says "leads": not yet (a peer starting beside it may not have written its own);
    # a read that says another leads resets the count; an active one stands by at the first such read.
    assert seen == [False, False, False, True, True, False, False]
