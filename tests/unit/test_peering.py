"""Which replica works: kopf's peering rule, as the operator's own loops apply it."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from unittest import mock

from tpujob import peering
from tpujob.config import OperatorConfig
from tpujob.handlers import loops
from tpujob.handlers.workqueue import Runtime

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


def test_a_replica_just_started_alone_in_the_object_waits_a_lifetime_unless_it_sees_a_peer() -> None:
    # Lifetime 6 s, a read every 1.2 s from t=0. Alone, it says "leads" at every read: active only once 6 s
    # have passed, so a peer whose record lands within a lifetime of its start is read first.
    reads = [peering.starting_lead(0.0, 6.0)]
    for tick in range(7):
        reads.append(peering.next_lead(reads[-1], True, tick * 1.2, 4.0))
    assert [lead.active for lead in reads[1:]] == [False, False, False, False, False, True, True]
    # A peer starting beside it, late by 3 s: its record outranks, so the first never leads.
    late, lead = [True, True, False, False, False, False, False], peering.starting_lead(0.0, 6.0)
    for tick, says_leads in enumerate(late):
        lead = peering.next_lead(lead, says_leads, tick * 1.2, 4.0, sees_peers=tick >= 2)
        assert not lead.active
    # Joining running replicas (a rolling update) and outranking them: the lead at the second read.
    lead = peering.starting_lead(0.0, 6.0)
    lead = peering.next_lead(lead, True, 0.0, 4.0, sees_peers=True)
    assert not lead.active and peering.next_lead(lead, True, 1.2, 4.0, sees_peers=True).active


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


def test_an_active_replica_waits_no_longer_than_its_renew_deadline() -> None:
    confirmed = peering.Lead(active=True, in_a_row=3, confirmed_at=100.0)
    assert peering.wait_within_deadline(confirmed, 100.0, 4.0, 1.2) == 1.2  # a period while there is time
    assert peering.wait_within_deadline(confirmed, 103.5, 4.0, 1.2) == 0.5  # then only what is left
    assert peering.wait_within_deadline(confirmed, 104.5, 4.0, 1.2) == peering.LEAST_WAIT_SECONDS  # past it
    assert peering.wait_within_deadline(peering.Lead(active=False), 104.5, 4.0, 1.2) == 1.2  # a standby


class BlackHoledPeering:
    """The peering object read through a connection that goes silent after `answered` reads, and then
    hangs past any timeout it is given (a black-holed TCP connection whose thread the kernel holds)."""

    def __init__(self, identity: str, answered: int) -> None:
        self.identity, self.answered = identity, answered
        self.sent: list[float] = []
        self.released = threading.Event()

    def get_peering(self, name: str, namespace: str | None, timeout: object = None) -> dict[str, object]:
        self.sent.append(time.monotonic())
        if len(self.sent) > self.answered:
            self.released.wait(30)
        now = dt.datetime.now(dt.UTC).isoformat()
        # Its own record, and a standby it outranks (seen, so the start-up hold ends at once).
        records = {self.identity: {"priority": 2, "lifetime": 10, "lastseen": now}}
        return {"status": records | {"standby": {"priority": 1, "lifetime": 10, "lastseen": now}}}


def test_a_replica_cut_off_from_the_api_server_stands_down_at_its_renew_deadline_not_a_read_later() -> None:
    """The stand-down is timed from the last read that confirmed the lead, not from when a hanging read
    gives up: a read that hangs (the partition e2e test's black hole) cannot carry the replica past its
    deadline into the window where a standby may take over. Judged before this was so, a replica with a
    2 s deadline and a 2 s period stood down 5 s after its last confirmation (a period's sleep, then a read
    waited for a period and a second)."""
    config = OperatorConfig(peering="p", peering_lifetime_seconds=10, peering_renew_deadline_seconds=2)
    api = BlackHoledPeering("me", answered=3)
    runtime = Runtime(config, reconciler=mock.Mock(), api=api, identity="me", priority=2)  # type: ignore[arg-type]
    runtime.indexes = mock.Mock(jobs={})
    api_list = mock.Mock(return_value=set())
    api.list_tpujob_uids = api_list  # type: ignore[attr-defined]
    stood_down: list[float] = []
    led = False

    async def scenario() -> None:
        nonlocal led
        loop = asyncio.create_task(loops.lead_forever(runtime))
        try:
            while not stood_down:
                await asyncio.sleep(0.02)
                led = led or runtime.active
                if led and len(api.sent) > api.answered and not runtime.active:
                    stood_down.append(time.monotonic())
                if len(api.sent) > 20:
                    raise AssertionError(f"never stood down: {api.sent}")
        finally:
            loop.cancel()
            api.released.set()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    last_confirmation = api.sent[api.answered - 1]
    assert stood_down[0] - last_confirmation <= 2 + 1.5, (api.sent, stood_down)
