"""The Event poster: one thread posts what passes queue, drops what a full queue cannot hold and counts it,
measures each Event's lag, and goes on after a failed post."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tpujob import kube, kubehttp, metrics, peering
from tpujob.ratelimit import Priority
from tpujob.reconciler.poster import EventPoster


def event(reason: str) -> dict[str, Any]:
    return {"reason": reason, "involvedObject": {"name": "j"}}


class HeldPost:
    """Records the posts; each one waits until the test lets it through (a post waiting for its token)."""

    def __init__(self) -> None:
        self.posted: list[str] = []
        self.release = threading.Semaphore(0)
        self.fail: dict[str, Exception] = {}

    def __call__(self, namespace: str, body: dict[str, Any]) -> None:
        assert self.release.acquire(timeout=10), "the test never let this post through"
        if body["reason"] in self.fail:
            raise self.fail[body["reason"]]
        self.posted.append(body["reason"])


def posting(poster: EventPoster) -> None:
    """Wait until the poster has taken an Event off its queue and is posting it."""
    with poster._changed:
        assert poster._changed.wait_for(lambda: poster._posting, timeout=10)


def dropped() -> float:
    return metrics.EVENTS_DROPPED._value.get()


def test_a_full_queue_drops_and_counts_what_it_cannot_hold_and_the_rest_is_posted_in_order():
    post = HeldPost()
    poster = EventPoster(post, capacity=2)
    before = dropped()
    # The first one is taken off the queue at once and waits in its post; two more fill the queue.
    assert poster.enqueue("ns", event("A"))
    posting(poster)
    assert poster.enqueue("ns", event("B")) and poster.enqueue("ns", event("C"))
    assert not poster.enqueue("ns", event("D")), "the queue holds 2"
    assert dropped() == before + 1
    post.release.release(3)
    assert poster.drain(timeout=10)
    assert post.posted == ["A", "B", "C"]
    poster.stop(timeout=10)


def test_a_failed_post_is_not_retried_and_the_poster_goes_on():
    post = HeldPost()
    post.fail["A"] = kube.ApiError(500, "InternalError")
    post.fail["B"] = peering.NotLeading("standing by")
    poster = EventPoster(post)
    lags_before = metrics.EVENT_LAG._sum.get()
    for reason in "ABC":
        poster.enqueue("ns", event(reason))
    post.release.release(3)
    assert poster.drain(timeout=10)
    assert post.posted == ["C"]
    assert metrics.EVENT_LAG._sum.get() > lags_before, "the posted one's lag is measured"
    poster.stop(timeout=10)


def test_a_replica_standing_by_discards_what_it_queued_and_a_stopped_poster_takes_nothing():
    post = HeldPost()
    poster = EventPoster(post)
    for reason in "ABC":
        poster.enqueue("ns", event(reason))
    posting(poster)
    assert poster.discard() == 2, "A is being posted, B and C go"
    post.release.release(1)
    assert poster.drain(timeout=10)
    poster.stop(timeout=10)
    assert not poster.enqueue("ns", event("D"))
    assert post.posted == ["A"]


class Refused(Exception):
    pass


class RecordingLimiter:
    def __init__(self) -> None:
        self.priorities: list[Priority] = []

    def acquire(self, priority: Priority = Priority.STATUS) -> float:
        self.priorities.append(priority)
        raise Refused  # the request goes no further than its token


def test_each_kube_call_takes_its_token_at_the_priority_it_names():
    limiter = RecordingLimiter()
    api = kube.Kube(kubehttp.Connections("http://unused.invalid", None, lambda _: None), limiter)
    calls = [
        lambda: api.create_pod("ns", {}),
        lambda: api.create_service("ns", {}),
        lambda: api.delete_pod("ns", "p"),
        lambda: api.get_tpujob("ns", "j"),
        lambda: api.patch_tpujob_status("ns", "j", {}),
        lambda: api.list_tpujob_uids("ns"),
        lambda: api.create_event("ns", {}),
    ]
    for call in calls:
        with pytest.raises(Refused):
            call()
    w, s, e = Priority.WORKLOAD, Priority.STATUS, Priority.EVENT
    assert limiter.priorities == [w, s, w, w, s, s, e]  # a Service after every waiting pod
