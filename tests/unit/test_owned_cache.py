"""The maps of the operator's own pods and Services (handlers/owned.py's OwnedCache), fed watch events as
kopf's watch stream gives them: listed objects (type None) until the listing's end, then ADDED, MODIFIED,
DELETED. Pure: no API server."""

from __future__ import annotations

from typing import Any

import pytest

from tpujob.api import constants as c
from tpujob.handlers.owned import OwnedCache, job_key


def pod(name: str, job: str | None, phase: str = "Pending", namespace: str = "ns") -> dict[str, Any]:
    labels = {c.LABEL_JOB_NAME: job} if job else {}
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels},
        "status": {"phase": phase},
    }


def view(body: Any, _warn: Any = None) -> tuple[str, str]:
    return body["metadata"]["name"], body["status"]["phase"]


def listed(cache: OwnedCache, *bodies: dict[str, Any]) -> set[tuple[str, str]]:
    for body in bodies:
        cache.listed_object(body)
    return cache.listing_ended()


def test_a_listing_is_swapped_in_whole_at_its_end_and_reads_as_kopfs_index_did():
    cache = OwnedCache(view)
    cache.listed_object(pod("a-0", "a"))
    assert not cache.listed and ("ns", "a") not in cache  # half a listing is never read
    changed = listed(cache, pod("a-1", "a", "Running"), pod("b-0", "b"), pod("stray", None))
    assert cache.listed and changed == {("ns", "a"), ("ns", "b")}
    assert sorted(cache[("ns", "a")]) == [("a-0", "Pending"), ("a-1", "Running")]
    with pytest.raises(KeyError):
        cache[("ns", "unknown")]
    assert len(cache) == 2 and set(cache) == {("ns", "a"), ("ns", "b")}


def test_watch_events_add_change_and_remove_and_name_their_job():
    cache = OwnedCache(view)
    listed(cache, pod("a-0", "a"))
    assert cache.changed("ADDED", pod("a-1", "a")) == ("ns", "a")
    assert cache.changed("MODIFIED", pod("a-0", "a", "Running")) == ("ns", "a")
    assert sorted(cache[("ns", "a")]) == [("a-0", "Running"), ("a-1", "Pending")]
    assert cache.changed("DELETED", pod("a-0", "a", "Running")) == ("ns", "a")
    assert cache.changed("DELETED", pod("a-1", "a")) == ("ns", "a")
    assert ("ns", "a") not in cache  # no empty entry left behind
    assert cache.changed("ADDED", pod("stray", None)) is None


def test_a_relist_drops_what_was_deleted_while_the_watch_was_down_and_names_only_the_jobs_that_changed():
    cache = OwnedCache(view)
    listed(cache, pod("a-0", "a"), pod("b-0", "b"), pod("c-0", "c"))
    # The watch broke (410 Gone): meanwhile b-0 was deleted, c-0 started running, d-0 was created.
    changed = listed(cache, pod("a-0", "a"), pod("c-0", "c", "Running"), pod("d-0", "d"))
    assert changed == {("ns", "b"), ("ns", "c"), ("ns", "d")}
    assert ("ns", "b") not in cache and cache[("ns", "c")] == [("c-0", "Running")]
    # A pod whose job label changed (it cannot, but a watch event says so) moves.
    assert cache.changed("MODIFIED", pod("d-0", "e")) == ("ns", "e")
    assert ("ns", "d") not in cache and cache[("ns", "e")] == [("d-0", "Pending")]


def test_the_job_key_needs_a_namespace_and_a_job_label():
    assert job_key(pod("p", "j", namespace="team")) == ("team", "j")
    assert job_key(pod("p", None)) is None
    assert job_key({"metadata": {"labels": {c.LABEL_JOB_NAME: "j"}}}) is None
