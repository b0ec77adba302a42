"""The resync round's batch of passes (handlers/workqueue.reconcile_batch): one worker thread's turn for
many jobs, each under its job's lock; a job whose pass runs now is left to it; a failed pass is retried
soon and the others go on. A real event loop and executor, a fake reconciler and indexes."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from tpujob import kube
from tpujob import status as s
from tpujob.config import from_environment
from tpujob.handlers.indexes import IndexedJob
from tpujob.handlers.workqueue import RETRY_SECONDS, Indexes, Runtime, reconcile_batch
from tpujob.reconciler import Outcome
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.snapshot import Snapshot, Watched


class Reconciler:
    def __init__(self, fail: set[str] = frozenset(), gone: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.fail, self.gone = fail, gone
        self.conflicts: set[str] = set()
        self.passed: list[tuple[str, int, bool]] = []
        self.threads: set[int] = set()
        self.forgotten: list[str] = []
        self.began: dict[str, float] = {}
        self.watched = Watched()
        self.memory = JobMemory()

    def passing(self, uid: str, now: float) -> None:
        self.began[uid] = now

    def reconcile(self, snapshot: Snapshot) -> Outcome:
        name = snapshot.body()["metadata"]["name"]
        pods, service_exists = snapshot.pods, snapshot.service_exists
        self.threads.add(threading.get_ident())
        if name in self.fail:
            raise RuntimeError("unreachable")
        if name in self.conflicts:
            raise kube.ApiError(409, "Conflict", b'{"message": "the object has been modified"}')
        self.passed.append((name, len(pods), service_exists))
        return Outcome(vanished=name in self.gone, requeue_after=None if name in self.gone else 60.0)

    def forget(self, uid: str) -> None:
        self.forgotten.append(uid)


def job(name: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    return {"metadata": meta}


def runtime_with(reconciler: Reconciler, jobs: dict[str, dict[str, Any]]) -> Runtime:
    runtime = Runtime(from_environment(), reconciler)  # type: ignore[arg-type]
    runtime.indexes = Indexes(
        {("ns", name): [IndexedJob.of(body)] for name, body in jobs.items()},  # type: ignore[arg-type]
        {("ns", "a"): [s.PodView(f"pod-a{w}", 0, w, 0, "Running") for w in (0, 1)]},
        {("ns", "a"): [True]},  # type: ignore[arg-type]
    )
    runtime.owned_listed.set()
    return runtime


def test_a_batch_passes_each_job_once_in_one_thread_and_schedules_what_they_ask() -> None:
    reconciler = Reconciler()
    jobs = {name: job(name) for name in ("a", "b", "c")} | {"d": job("d", deleting=True)}

    async def scenario() -> Runtime:
        runtime = runtime_with(reconciler, jobs)
        await reconcile_batch(runtime, [("ns", n) for n in ("a", "b", "c", "d", "not-indexed")])
        return runtime

    runtime = asyncio.run(scenario())
    assert reconciler.passed == [("a", 2, True), ("b", 0, False), ("c", 0, False)]  # d: being deleted
    assert len(reconciler.threads) == 1
    assert set(runtime.queue.timers) == {("ns", "a"), ("ns", "b"), ("ns", "c")}
    assert set(reconciler.began) == {"uid-a", "uid-b", "uid-c", "uid-d"}
    assert len(runtime.queue.locks) == 0, "every lock released, and none kept for a job no pass holds"
    for timer in runtime.queue.timers.values():
        timer.cancel()


def test_a_job_whose_pass_runs_now_is_left_to_it() -> None:
    reconciler = Reconciler()

    async def scenario() -> None:
        runtime = runtime_with(reconciler, {"a": job("a"), "b": job("b")})
        async with runtime.queue.locks.hold("uid-a"):  # a's event-driven pass holds its lock
            await reconcile_batch(runtime, [("ns", "a"), ("ns", "b")])

    asyncio.run(scenario())
    assert [name for name, _, _ in reconciler.passed] == ["b"]


def test_a_failed_pass_is_retried_soon_a_vanished_job_forgotten_and_the_others_go_on() -> None:
    reconciler = Reconciler(fail={"a"}, gone={"b"})

    async def scenario() -> tuple[Runtime, float]:
        runtime = runtime_with(reconciler, {"a": job("a"), "b": job("b"), "c": job("c")})
        await reconcile_batch(runtime, [("ns", "a"), ("ns", "b"), ("ns", "c")])
        retry_in = runtime.queue.timers[("ns", "a")].when() - asyncio.get_running_loop().time()
        for handle in runtime.queue.timers.values():
            handle.cancel()
        return runtime, retry_in

    runtime, retry_in = asyncio.run(scenario())
    assert 0 < retry_in <= RETRY_SECONDS
    assert runtime.queue.failures == {("ns", "a"): 1}, "the next failure waits twice as long"
    assert [name for name, _, _ in reconciler.passed] == ["b", "c"]
    # The vanished job leaves the index (no pass or resync sees it again) and is forgotten.
    assert ("ns", "b") not in runtime.indexes.jobs and reconciler.forgotten == ["uid-b"]
    assert set(runtime.queue.timers) == {("ns", "a"), ("ns", "c")}


def test_a_conflict_is_retried_like_any_failure_but_said_at_info_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 409 is optimistic concurrency doing its work (the job changed after the pass read it), not an
    error: log-based alerting on ERROR must not fire on it. Any other failure is still an ERROR."""
    reconciler = Reconciler(fail={"b"})
    reconciler.conflicts = {"a"}

    async def scenario() -> Runtime:
        runtime = runtime_with(reconciler, {"a": job("a"), "b": job("b")})
        await reconcile_batch(runtime, [("ns", "a"), ("ns", "b")])
        for handle in runtime.queue.timers.values():
            handle.cancel()
        return runtime

    with caplog.at_level(logging.INFO, logger="tpujob"):
        runtime = asyncio.run(scenario())
    assert runtime.queue.failures == {("ns", "a"): 1, ("ns", "b"): 1}
    said = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert ("INFO", "ns/a: changed during its pass (409 Conflict); passing again", False) in said
    assert [(level, message) for level, message, _ in said if level == "ERROR"] == [
        ("ERROR", "ns/b: reconcile failed; retrying")
    ]
