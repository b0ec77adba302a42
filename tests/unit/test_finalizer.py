"""Our finalizer (handlers/deletion.py): a job deleted while it holds it gets one task that starts its pools'
deletes, waits for GKE, and removes the finalizer with a patch conditional on the job's resourceVersion,
keeping other finalizers; a conflict waits for the job's next watch event; a standby does nothing; the job's
DELETED event ends the task. A real event loop; the API and the pools are fakes that record calls."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any
from unittest import mock

from tpujob import kube
from tpujob.api import constants as c
from tpujob.config import OperatorConfig
from tpujob.handlers import events
from tpujob.handlers.indexes import IndexedJob
from tpujob.handlers.workqueue import Indexes, Runtime

KEY = ("team-a", "train")
OTHER_FINALIZER = "example.com/keep"


def deleted_job(resource_version: str, finalizers: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {
            "name": KEY[1],
            "namespace": KEY[0],
            "uid": "u-1",
            "resourceVersion": resource_version,
            "finalizers": finalizers,
            "deletionTimestamp": "2026-11-29T12:00:00Z",
        },
        "spec": {},
    }


class Fakes:
    """The pools GKE still has after each release (one list per call), and the patches sent (the first
    `conflicts` answered 409)."""

    def __init__(self, remaining: list[list[str]], conflicts: int = 0) -> None:
        self.remaining = iter(itertools.chain(remaining, itertools.repeat([])))
        self.conflicts = conflicts
        self.released: list[str] = []
        self.patches: list[dict[str, Any]] = []
        self.patched = asyncio.Event()

    def release_pools(self, body: dict[str, Any]) -> list[str]:
        self.released.append(body["metadata"]["resourceVersion"])
        return next(self.remaining)

    def patch_tpujob(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(patch)
        if len(self.patches) <= self.conflicts:
            raise kube.ApiError(409, "Conflict")
        self.patched.set()
        return {}


def runtime_with(fakes: Fakes, active: bool = True) -> Runtime:
    config = OperatorConfig(poll_provisioning_seconds=0.05)
    reconciler = mock.Mock(release_pools=fakes.release_pools)
    api = mock.Mock(patch_tpujob=fakes.patch_tpujob)
    runtime = Runtime(config, reconciler=reconciler, api=api)  # type: ignore[arg-type]
    runtime.active = active
    runtime.indexes = Indexes({}, {}, {})
    return runtime


def watch_event(runtime: Runtime, event_type: str, body: dict[str, Any]) -> None:
    events.JobFeed(runtime)({"type": event_type, "object": body})


def test_the_finalizer_goes_once_gke_has_no_pool_left_and_other_finalizers_stay() -> None:
    fakes = Fakes(remaining=[["tj-train-0"], ["tj-train-0"]])

    async def scenario() -> None:
        runtime = runtime_with(fakes)
        watch_event(runtime, "MODIFIED", deleted_job("7", [OTHER_FINALIZER, c.FINALIZER]))
        watch_event(runtime, "MODIFIED", deleted_job("7", [OTHER_FINALIZER, c.FINALIZER]))  # one task still
        await asyncio.wait_for(fakes.patched.wait(), 10)
        runtime.reconciler.forget.assert_called_with("u-1")  # type: ignore[attr-defined]

    asyncio.run(scenario())
    assert fakes.released == ["7", "7", "7"]  # released, waited twice for GKE, then let go
    assert fakes.patches == [{"metadata": {"finalizers": [OTHER_FINALIZER], "resourceVersion": "7"}}]


def test_a_conflict_waits_for_the_jobs_next_event_and_patches_what_it_shows() -> None:
    fakes = Fakes(remaining=[], conflicts=1)

    async def scenario() -> None:
        runtime = runtime_with(fakes)
        watch_event(runtime, "MODIFIED", deleted_job("7", [c.FINALIZER]))
        await asyncio.wait_for(_until(lambda: len(fakes.patches) == 1), 10)
        # The status writer wrote meanwhile: its event wakes the task at once, with the new resourceVersion.
        watch_event(runtime, "MODIFIED", deleted_job("8", [c.FINALIZER]))
        await asyncio.wait_for(fakes.patched.wait(), 10)

    asyncio.run(scenario())
    assert [p["metadata"]["resourceVersion"] for p in fakes.patches] == ["7", "8"]


def test_a_standby_releases_nothing_and_the_deleted_event_ends_the_task() -> None:
    fakes = Fakes(remaining=[])

    async def scenario() -> None:
        runtime = runtime_with(fakes, active=False)
        body = deleted_job("7", [c.FINALIZER])
        watch_event(runtime, "MODIFIED", body)
        assert "u-1" in runtime.finalizers
        watch_event(runtime, "DELETED", body)
        await asyncio.wait_for(_until(lambda: "u-1" not in runtime.finalizers), 10)

    asyncio.run(scenario())
    assert fakes.released == [] and fakes.patches == []


def test_a_job_deleted_while_the_watch_was_down_leaves_the_map_at_the_relist() -> None:
    fakes = Fakes(remaining=[])

    async def scenario() -> Runtime:
        runtime = runtime_with(fakes, active=False)
        feed = events.JobFeed(runtime)
        kept, gone = (dict(deleted_job("1", []), spec={"n": n}) for n in (1, 2))
        gone["metadata"] = {**gone["metadata"], "name": "gone", "uid": "u-2"}
        for body in (kept, gone):
            feed({"type": None, "object": body})
        feed(events.watching.Bookmark.LISTED)
        feed({"type": None, "object": kept})  # the relist (410 Gone): only `kept` is there
        feed(events.watching.Bookmark.LISTED)
        return runtime

    runtime = asyncio.run(scenario())
    assert set(runtime.indexes.jobs) == {KEY}
    assert isinstance(runtime.indexes.jobs[KEY][0], IndexedJob)
    runtime.reconciler.forget.assert_called_with("u-2")  # type: ignore[attr-defined]


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.01)
