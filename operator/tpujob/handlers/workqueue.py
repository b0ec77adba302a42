"""The work queue, as client-go's: the jobs waiting for a reconcile pass, each queued once however many
events ask; one pass at a time per job, read from kopf's watch-fed indexes; requeues, and forgetting a
deleted job. No kopf handler lives here; the pass itself is reconciler.Reconciler."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import math
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from tpujob import kube
from tpujob.config import OperatorConfig
from tpujob.handlers.indexes import JobIndex
from tpujob.peering import NotLeading
from tpujob.reconciler import Outcome, Reconciler

log = logging.getLogger(__name__)

RETRY_SECONDS = 2.0
# Passes begun at once, per worker thread: enough that a thread finishing a pass finds the next one
# already waiting for it (with one per thread, threads idled while the busy event loop came back to
# begin the next pass: 70.8 jobs/s against 89.1 at 10,000 jobs), few enough that a burst waits as keys.
PASSES_PER_THREAD = 4


@dataclass(frozen=True)
class Indexes:
    """The watch-fed state a pass reads: jobs (indexes.IndexedJob) by (namespace, name) (handlers/indexes.py's
    map), their pods and Services by (namespace, job name) (handlers/owned.py's maps: a view of each pod,
    True for a Service)."""

    jobs: JobIndex
    pods: Mapping[tuple[str, str], list[Any]]
    services: Mapping[tuple[str, str], list[Any]]
    # Kueue's Workloads by job (status.WorkloadView), with TPUJOB_KUEUE; None without.
    workloads: Any = None


class KeyedLocks:
    """One asyncio.Lock per job UID, kept only while a pass (or the finalizer) holds it or waits for it:
    thousands of jobs at rest hold no lock each."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # uid -> (its lock, holders and waiters)

    def __len__(self) -> int:
        return len(self._locks)

    def busy(self, uid: str) -> bool:
        """Whether a pass holds the job's lock or waits for it."""
        return uid in self._locks

    @contextlib.asynccontextmanager
    async def hold(self, uid: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(uid) or (asyncio.Lock(), 0)
        self._locks[uid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[uid]
            if users == 1:
                del self._locks[uid]
            else:
                self._locks[uid] = (lock, users - 1)


class Runtime:
    """Per-process state shared by the handlers (kopf's memo)."""

    def __init__(
        self,
        config: OperatorConfig,
        reconciler: Reconciler,
        identity: str = "",
        priority: int = 0,
        api: kube.Kube | None = None,
    ) -> None:
        self.config = config
        self.reconciler = reconciler
        self.api = api
        # Peering: this replica's identity and priority; whether it is the active one (a standalone
        # operator always is; a replica waits for its first look at the peering object).
        self.identity = identity
        self.priority = priority
        self.active = config.peering is None
        self.locks = KeyedLocks()
        # Jobs with a pass requested but not yet begun: more events for them need no pass of their own.
        self.queued: set[tuple[str, str]] = set()
        # The same keys in the order asked, for the consumers in `passes` (PASSES_PER_THREAD per thread).
        self.backlog: collections.deque[tuple[str, str]] = collections.deque()
        self.passes: set[asyncio.Task[None]] = set()
        self.requeues: dict[str, asyncio.TimerHandle] = {}
        # When each job's last pass began (the loop's clock), by UID: the resync skips a job looked at since.
        self.passed: dict[str, float] = {}
        # Jobs the watch's cache still holds but the API server no longer has (deleted while this replica
        # stood by with its watches paused): no pass acts on them again.
        self.vanished: set[str] = set()
        # Set to sweep orphaned pools now rather than at the next sweep interval (a takeover).
        self.sweep_requested = asyncio.Event()
        # Set once the operator's pods and Services have been listed whole (handlers/owned.py): no pass
        # reads them before.
        self.owned_listed = asyncio.Event()
        # kopf's settings, whose peering priority a replica lowers when it stood down (set_priority).
        self.kopf_settings: kopf.OperatorSettings | None = None
        self.tasks: list[asyncio.Task[None]] = []  # the loops startup.start_loops runs, stopped at cleanup
        self.indexes: Indexes  # set by startup.start_loops, before the watches deliver any event

    def set_priority(self, priority: int) -> None:
        """This replica's priority in the peering, for its own loops and for kopf's (read at each write of
        its record and each look at the others')."""
        self.priority = priority
        if self.kopf_settings is not None:
            self.kopf_settings.peering.priority = priority


def _values(index: Mapping[Any, Any], key: Any) -> Iterator[Any]:
    try:
        yield from index[key]
    except KeyError:
        return


# What a pass reads, under its job's lock: the job as indexed (indexes.IndexedJob), its pods, whether its
# Service exists, its Workloads (None: not listed, or no Workload watch).
PassState = tuple[Any, list[Any], bool, list[Any] | None]


def _job_uid(runtime: Runtime, key: tuple[str, str]) -> str | None:
    """The UID of the job at `key` if this replica should pass it: it is indexed, not vanished, and this
    replica is the active one (a standby leaves every job to the active one)."""
    indexed = list(_values(runtime.indexes.jobs, key))
    if not indexed or not runtime.active:
        return None
    uid: str = indexed[0].uid
    return None if uid in runtime.vanished else uid


def _begin(runtime: Runtime, key: tuple[str, str], uid: str) -> PassState | None:
    """Under the job's lock: the pass reads the state from here (a newer event needs a new pass), the
    newest the indexes have; None for a job being deleted (the finalizer's handler has it)."""
    runtime.queued.discard(key)
    runtime.passed[uid] = asyncio.get_running_loop().time()
    indexed = list(_values(runtime.indexes.jobs, key))
    if not indexed or indexed[0].deleting:
        return None
    workloads = runtime.indexes.workloads
    listed = list(_values(workloads, key)) if workloads is not None and workloads.listed else None
    return (
        indexed[0],
        list(_values(runtime.indexes.pods, key)),
        any(_values(runtime.indexes.services, key)),
        listed,
    )


def _run_pass(reconciler: Reconciler, key: tuple[str, str], state: PassState) -> Outcome | None:
    """One pass, in a worker thread. None: this replica stood down mid-pass (the one that leads now
    takes it from here). The job's body is decoded here, not while the pass waits for a thread (in a
    burst, thousands wait)."""
    indexed, pods, service_exists, workloads = state
    try:
        return reconciler.reconcile(indexed.body(), pods, service_exists, workloads)
    except NotLeading:
        return None
    except Exception:
        # A conflict or an unreachable API: the pass is idempotent, so simply run it again soon.
        log.exception("%s/%s: reconcile failed; retrying", *key)
        return Outcome(requeue_after=RETRY_SECONDS)


def _run_passes(reconciler: Reconciler, begun: list[tuple[tuple[str, str], str, PassState]]) -> list[Any]:
    return [_run_pass(reconciler, key, state) for key, _, state in begun]


def _finish(runtime: Runtime, key: tuple[str, str], uid: str, outcome: Outcome | None) -> None:
    if outcome is None:
        return
    if outcome.vanished:
        runtime.vanished.add(uid)
        forget(runtime, uid)
        return
    schedule(runtime, uid, outcome.requeue_after, *key)


async def reconcile(runtime: Runtime, namespace: str, name: str) -> None:
    key = (namespace, name)
    await runtime.owned_listed.wait()
    uid = _job_uid(runtime, key)
    if uid is None:
        runtime.queued.discard(key)
        return
    async with runtime.locks.hold(uid):
        state = _begin(runtime, key, uid)
        if state is None:
            return
        loop = asyncio.get_running_loop()
        outcome = await loop.run_in_executor(None, _run_pass, runtime.reconciler, key, state)
    _finish(runtime, key, uid, outcome)


async def reconcile_batch(runtime: Runtime, keys: list[tuple[str, str]]) -> None:
    """Passes for `keys`, one after another in one worker thread: the resync round's, most of which find
    nothing to do, and a hand-off to a thread and back costs more than such a pass (at 3,000 idle jobs
    the hand-offs took half the operator's CPU: bench/profile.md). A job whose pass runs now, or waits
    for its lock, is left to that pass."""
    begun: list[tuple[tuple[str, str], str, PassState]] = []
    await runtime.owned_listed.wait()
    async with contextlib.AsyncExitStack() as held:
        for key in keys:
            uid = _job_uid(runtime, key)
            if uid is None or runtime.locks.busy(uid):
                continue
            await held.enter_async_context(runtime.locks.hold(uid))  # free: taken without waiting
            if (state := _begin(runtime, key, uid)) is not None:
                begun.append((key, uid, state))
        loop = asyncio.get_running_loop()
        outcomes = await loop.run_in_executor(None, _run_passes, runtime.reconciler, begun) if begun else []
    for (key, uid, _), outcome in zip(begun, outcomes, strict=True):
        _finish(runtime, key, uid, outcome)


def schedule(runtime: Runtime, uid: str, delay: float | None, namespace: str, name: str) -> None:
    """One pending requeue per job: the soonest asked for. A pass that needs no look, or a later one,
    leaves an earlier pass' request standing (the first poll of a pool just requested, a backoff's end).
    When it is due, the job joins the queue as an event's job does."""
    if delay is None:
        return
    loop = asyncio.get_running_loop()
    when = loop.time() + max(delay, 0.1)
    pending = runtime.requeues.get(uid)
    if pending is not None and loop.time() < pending.when() <= when:
        return
    if pending is not None:
        pending.cancel()
    # The timer's own arguments, not a closure: a job at rest holds its pending requeue.
    runtime.requeues[uid] = loop.call_at(when, request_pass, runtime, namespace, name)


def request_pass(runtime: Runtime, namespace: str, name: str) -> None:
    """A pass for the job soon, as client-go's work queue would: however many events arrive before it
    begins (a job's pods come in a burst), the job is queued once, and at most PASSES_PER_THREAD passes
    per worker thread run or wait for a thread at once: a burst of thousands of new jobs waits as keys,
    not as thousands of tasks each holding its state and its thread's work item (the 10,000-job burst
    peaked at 281 MiB that way, 181 this way). The kopf handler returns at once, so kopf drops the
    event's body instead of holding it while the pass waits."""
    key = (namespace, name)
    if key in runtime.queued:
        return
    runtime.queued.add(key)
    runtime.backlog.append(key)
    if len(runtime.passes) < runtime.config.workers * PASSES_PER_THREAD:
        runtime.passes.add(_start(_work(runtime)))


async def _work(runtime: Runtime) -> None:
    """One consumer of the backlog: a pass a job, oldest first, until no job waits. It leaves `passes`
    in the same step as it finds the backlog empty (not in a done callback, a loop turn later), so a job
    asked for meanwhile always finds a consumer or room for a new one."""
    try:
        while runtime.backlog:
            namespace, name = runtime.backlog.popleft()
            try:
                await reconcile(runtime, namespace, name)
            except Exception:  # a bug in the pass' bookkeeping must not stop the queue
                log.exception("%s/%s: pass failed", namespace, name)
                runtime.queued.discard((namespace, name))
    finally:
        runtime.passes.discard(asyncio.current_task())


def _start(coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A pass runs in an empty context, not a copy of the kopf handler's that asked for it: kopf's context
    variables hold the event's cause (its body, patch and logger), and each requeue's timer would copy them
    on, so every job with a requeue pending would keep its first event alive."""
    return asyncio.get_running_loop().create_task(coroutine, context=contextvars.Context())


def passed_since(runtime: Runtime, key: tuple[str, str], since: float) -> bool:
    """Whether the job at `key` had a pass begin at or after `since` (the loop's clock)."""
    indexed = list(_values(runtime.indexes.jobs, key))
    return bool(indexed) and runtime.passed.get(indexed[0].uid, -math.inf) >= since


def forget(runtime: Runtime, uid: str) -> None:
    handle = runtime.requeues.pop(uid, None)
    if handle:
        handle.cancel()
    runtime.passed.pop(uid, None)
    runtime.reconciler.forget(uid)
