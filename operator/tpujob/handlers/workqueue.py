"""The work queue, as client-go's: the jobs waiting for a reconcile pass, each queued once however many
events ask; one pass at a time per job, read from kopf's watch-fed indexes; requeues, and forgetting a
deleted job. No kopf handler lives here; the pass itself is reconciler.Reconciler."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from tpujob import kube
from tpujob.config import OperatorConfig
from tpujob.handlers.indexes import JobIndex, JobKey
from tpujob.peering import NotLeading
from tpujob.reconciler import Outcome, Reconciler
from tpujob.reconciler.snapshot import Snapshot

log = logging.getLogger(__name__)

RETRY_SECONDS = 2.0  # a failed pass' first retry; doubled per failure in a row, up to RETRY_MAX_SECONDS
RETRY_MAX_SECONDS = 60.0
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
    # The namespaces' workers' NetworkPolicies, by (namespace, ""), with TPUJOB_NETWORK_POLICY; None without.
    network_policies: Any = None


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


class KeyedTasks:
    """One task per job UID (the finalizer's, or the release after a job's DELETED event: deletion.py), each
    with an event that wakes it, kept only while it runs (and referenced meanwhile: the event loop keeps
    only weak references to tasks)."""

    def __init__(self) -> None:
        self._running: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._running

    def start(self, uid: str, run: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
        """`run(wake)` as the UID's task, unless one runs already: that one is woken instead."""
        if uid in self._running:
            self.poke(uid)
            return
        wake = asyncio.Event()
        task = start_task(run(wake))
        self._running[uid] = (task, wake)
        task.add_done_callback(lambda finished: self._ended(uid, finished))

    def poke(self, uid: str) -> None:
        if (running := self._running.get(uid)) is not None:
            running[1].set()

    def cancel(self, uid: str) -> None:
        if (running := self._running.pop(uid, None)) is not None:
            running[0].cancel()

    def cancel_all(self) -> list[asyncio.Task[None]]:
        tasks = [task for task, _ in self._running.values()]
        for uid in list(self._running):
            self.cancel(uid)
        return tasks

    def _ended(self, uid: str, finished: asyncio.Task[None]) -> None:
        running = self._running.get(uid)
        if running is not None and running[0] is finished:
            del self._running[uid]


class WorkQueue:
    """The jobs waiting for a pass, in client-go's work queue shape (k8s.io/client-go/util/workqueue):

    - `add`: a key queued once however many events ask before its pass begins (deduplication);
    - `add_after`: one timer per key, the soonest asked for (a delaying queue);
    - `add_rate_limited` / `forget`: a retry after a delay that doubles per failure in a row, until the key
      is forgotten (ItemExponentialFailureRateLimiter); `drop`: a gone job's timer and failures;
    - `pause` / `resume`: a replica standing by drops its queue and timers and takes no key;
    - `shut_down`: consumers and timers cancelled;
    - the in-flight set (`processing`) and the per-job locks (`locks`), held by a pass or the finalizer.

    Consumers take keys namespace by namespace in turn (one FIFO per namespace, round robin over the
    namespaces with work, as Kueue's fair sharing or the API server's priority and fairness queue), so a
    namespace with a thousand queued jobs delays another namespace's one job by one pass per namespace,
    not by its backlog. At most `consumers` passes run or wait for a thread at once; the rest wait as keys.
    The queue keeps a key only while it is queued, timed or in flight: nothing per job at rest."""

    def __init__(
        self,
        process: Callable[[JobKey], Awaitable[None]],
        consumers: int,
        retry_base_seconds: float = RETRY_SECONDS,
        retry_max_seconds: float = RETRY_MAX_SECONDS,
    ) -> None:
        self._process, self._max_consumers = process, consumers
        self._retry_base, self._retry_max = retry_base_seconds, retry_max_seconds
        self.queued: set[JobKey] = set()  # asked for, not begun: more events for them need no pass
        self._fifos: dict[str, collections.deque[JobKey]] = {}  # the queued keys, by namespace
        self._turns: collections.deque[str] = collections.deque()  # namespaces with work, in turn
        self.processing: set[JobKey] = set()
        self.timers: dict[JobKey, asyncio.TimerHandle] = {}
        self.failures: dict[JobKey, int] = {}
        self.consumers: set[asyncio.Task[None]] = set()
        self.locks = KeyedLocks()
        self.paused = False
        self._shut_down = False

    def __len__(self) -> int:
        return len(self.queued)

    def add(self, key: JobKey) -> None:
        if key in self.queued or self.paused or self._shut_down:
            return
        self.queued.add(key)
        namespace = key[0]
        if namespace not in self._fifos:
            self._fifos[namespace] = collections.deque()
            self._turns.append(namespace)
        self._fifos[namespace].append(key)
        if len(self.consumers) < self._max_consumers:
            self.consumers.add(start_task(self._consume()))

    def add_after(self, key: JobKey, delay: float | None) -> None:
        """One pending timer per key: the soonest asked for. A pass that needs no look, or a later one,
        leaves an earlier request standing (the first poll of a pool just requested, a backoff's end)."""
        if delay is None or self.paused or self._shut_down:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + max(delay, 0.1)
        pending = self.timers.get(key)
        if pending is not None and loop.time() < pending.when() <= when:
            return
        if pending is not None:
            pending.cancel()
        self.timers[key] = loop.call_at(when, self._due, key)

    def add_rate_limited(self, key: JobKey) -> None:
        """Again after a delay that doubles with each failure in a row (until `forget`)."""
        failures = self.failures.get(key, 0)
        self.failures[key] = failures + 1
        self.add_after(key, min(self._retry_base * 2**failures, self._retry_max))

    def forget(self, key: JobKey) -> None:
        """The key's pass went through: its failures start over (its timer stands)."""
        self.failures.pop(key, None)

    def drop(self, key: JobKey) -> None:
        """The key's job is gone: its failures and its timer too."""
        self.forget(key)
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def begun(self, key: JobKey) -> None:
        """A pass for the key begins, with the newest state: an event from now on needs a pass of its own."""
        self.queued.discard(key)

    def pause(self) -> None:
        """Stand by: nothing queued or timed survives, and nothing is taken until `resume`."""
        self.paused = True
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        self.failures.clear()
        self.queued.clear()
        self._fifos.clear()
        self._turns.clear()

    def resume(self) -> None:
        self.paused = False

    def shut_down(self) -> list[asyncio.Task[None]]:
        """No key taken from now on; the consumers cancelled (returned, to be awaited if wanted)."""
        self._shut_down = True
        self.pause()
        consumers = list(self.consumers)
        for task in consumers:
            task.cancel()
        return consumers

    def _due(self, key: JobKey) -> None:
        self.timers.pop(key, None)
        self.add(key)

    def _take(self) -> JobKey | None:
        """The next key: the first of the namespace whose turn it is."""
        if not self._turns:
            return None
        namespace = self._turns.popleft()
        fifo = self._fifos[namespace]
        key = fifo.popleft()
        if fifo:
            self._turns.append(namespace)
        else:
            del self._fifos[namespace]
        return key

    async def _consume(self) -> None:
        """One consumer: a pass a key until none waits. It leaves `consumers` in the same step as it finds
        the queue empty (not in a done callback, a loop turn later), so a key added meanwhile always finds a
        consumer or room for a new one."""
        try:
            while (key := self._take()) is not None:
                self.processing.add(key)
                try:
                    await self._process(key)
                except Exception:  # a bug in the pass' bookkeeping must not stop the queue
                    log.exception("%s/%s: pass failed", *key)
                    self.queued.discard(key)
                finally:
                    self.processing.discard(key)
        finally:
            self.consumers.discard(asyncio.current_task())


class Runtime:
    """Per-process state shared by the handlers (kopf's memo). Nothing per job: the queue holds a job only
    while it waits or runs, and everything kept about a job lives in its record (reconciler.records)."""

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
        self.queue = WorkQueue(
            lambda key: reconcile(self, *key), consumers=config.workers * PASSES_PER_THREAD
        )
        # Set to sweep orphaned pools now rather than at the next sweep interval (a takeover).
        self.sweep_requested = asyncio.Event()
        # Set once the operator's pods and Services have been listed whole (handlers/owned.py): no pass
        # reads them before.
        self.owned_listed = asyncio.Event()
        # kopf's settings, whose peering priority a replica lowers when it stood down (set_priority).
        self.kopf_settings: kopf.OperatorSettings | None = None
        self.tasks: list[asyncio.Task[None]] = []  # the loops startup.start_loops runs, stopped at cleanup
        self.finalizers = KeyedTasks()  # the finalizer's task of each job deleted with our finalizer
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


def _job_uid(runtime: Runtime, key: JobKey) -> str | None:
    """The UID of the job at `key` if this replica should pass it: it is indexed, and this replica is the
    active one (a standby leaves every job to the active one)."""
    indexed = list(_values(runtime.indexes.jobs, key))
    if not indexed or not runtime.active:
        return None
    uid: str = indexed[0].uid
    return uid


def _begin(runtime: Runtime, key: JobKey, uid: str) -> Snapshot | None:
    """Under the job's lock: the pass's one snapshot of the indexes and the cluster's facts (a newer event
    needs a new pass), the newest they have; None for a job being deleted (the finalizer's handler has
    it)."""
    runtime.queue.begun(key)
    runtime.reconciler.passing(uid, asyncio.get_running_loop().time())
    indexed = list(_values(runtime.indexes.jobs, key))
    if not indexed or indexed[0].deleting:
        return None
    workloads = runtime.indexes.workloads
    policies = runtime.indexes.network_policies
    pods = tuple(_values(runtime.indexes.pods, key))
    return runtime.reconciler.watched.take(
        indexed[0].wire,
        pods=pods,
        departed=runtime.reconciler.memory.departed(uid, pods),
        service_exists=any(_values(runtime.indexes.services, key)),
        workloads=tuple(_values(workloads, key)) if workloads is not None and workloads.listed else None,
        # The namespace's workers' policy (one for all its jobs).
        network_policy_seen=policies is not None and (key[0], "") in policies,
    )


def _run_pass(reconciler: Reconciler, key: JobKey, snapshot: Snapshot) -> Outcome | None:
    """One pass, in a worker thread. None: this replica stood down mid-pass (the one that leads now
    takes it from here). The job's body is decoded in the pass, not while it waits for a thread (in a
    burst, thousands wait)."""
    try:
        return reconciler.reconcile(snapshot)
    except NotLeading:
        return None
    except Exception as error:
        # The pass is idempotent: run it again soon. A conflict (the job changed after the read this pass
        # wrote against) is no problem to alert on; an unreachable API or a bug is.
        if isinstance(error, kube.ApiError) and error.status == 409:
            log.info("%s/%s: changed during its pass (409 Conflict); passing again", *key)
        else:
            log.exception("%s/%s: reconcile failed; retrying", *key)
        return Outcome(failed=True)


def _run_passes(reconciler: Reconciler, begun: list[tuple[JobKey, str, Snapshot]]) -> list[Any]:
    return [_run_pass(reconciler, key, snapshot) for key, _, snapshot in begun]


def _finish(runtime: Runtime, key: JobKey, uid: str, outcome: Outcome | None) -> None:
    if outcome is None:
        return
    if outcome.vanished:
        vanished(runtime, key, uid)
        return
    if outcome.failed:
        runtime.queue.add_rate_limited(key)
        return
    runtime.queue.forget(key)
    runtime.queue.add_after(key, outcome.requeue_after)


async def reconcile(runtime: Runtime, namespace: str, name: str) -> None:
    key = (namespace, name)
    await runtime.owned_listed.wait()
    uid = _job_uid(runtime, key)
    if uid is None:
        runtime.queue.begun(key)
        if key not in runtime.indexes.jobs:  # gone: a retry or timer that outlived its job ends here
            runtime.queue.drop(key)
        return
    async with runtime.queue.locks.hold(uid):
        snapshot = _begin(runtime, key, uid)
        if snapshot is None:
            return
        loop = asyncio.get_running_loop()
        outcome = await loop.run_in_executor(None, _run_pass, runtime.reconciler, key, snapshot)
    _finish(runtime, key, uid, outcome)


async def reconcile_batch(runtime: Runtime, keys: list[JobKey]) -> None:
    """Passes for `keys`, one after another in one worker thread: the resync round's, most of which find
    nothing to do, and a hand-off to a thread and back costs more than such a pass (at 3,000 idle jobs
    the hand-offs took half the operator's CPU: bench/profile.md). A job whose pass runs now, or waits
    for its lock, is left to that pass."""
    begun: list[tuple[JobKey, str, Snapshot]] = []
    await runtime.owned_listed.wait()
    async with contextlib.AsyncExitStack() as held:
        for key in keys:
            uid = _job_uid(runtime, key)
            if uid is None or runtime.queue.locks.busy(uid):
                continue
            await held.enter_async_context(runtime.queue.locks.hold(uid))  # free: taken without waiting
            if (snapshot := _begin(runtime, key, uid)) is not None:
                begun.append((key, uid, snapshot))
        loop = asyncio.get_running_loop()
        outcomes = await loop.run_in_executor(None, _run_passes, runtime.reconciler, begun) if begun else []
    for (key, uid, _), outcome in zip(begun, outcomes, strict=True):
        _finish(runtime, key, uid, outcome)


def request_pass(runtime: Runtime, namespace: str, name: str) -> None:
    """A pass for the job soon (WorkQueue.add): however many events arrive before it begins (a job's pods
    come in a burst), the job is queued once, and at most PASSES_PER_THREAD passes per worker thread run or
    wait for a thread at once: a burst of thousands of new jobs waits as keys, not as thousands of tasks
    each holding its state and its thread's work item (the 10,000-job burst peaked at 281 MiB that way,
    181 this way). The kopf handler returns at once, so kopf drops the event's body instead of holding it
    while the pass waits."""
    runtime.queue.add((namespace, name))


def start_task(coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A pass (or a finalizer) runs in an empty context, not a copy of the code's that asked for it: a
    watch's context may hold what it was handling, and each requeue's timer would copy it on, so every job
    with a requeue pending would keep its first event alive."""
    return asyncio.get_running_loop().create_task(coroutine, context=contextvars.Context())


def passed_since(runtime: Runtime, key: JobKey, since: float) -> bool:
    """Whether the job at `key` had a pass begin at or after `since` (the loop's clock)."""
    indexed = list(_values(runtime.indexes.jobs, key))
    return bool(indexed) and runtime.reconciler.last_pass(indexed[0].uid) >= since


def forget(runtime: Runtime, key: JobKey, uid: str) -> None:
    """The job is gone: its place in the queue, and its record (one pop, plus a status write waiting)."""
    runtime.queue.drop(key)
    runtime.reconciler.forget(uid)


def vanished(runtime: Runtime, key: JobKey, uid: str) -> None:
    """The watch's cache holds a job the API server no longer has (deleted while this replica stood by with
    its watches paused, and a relist deletes nothing): it leaves the index, so no pass or resync sees it,
    and is forgotten."""
    indexed = list(_values(runtime.indexes.jobs, key))
    if indexed and indexed[0].uid == uid:
        runtime.indexes.jobs.pop(key, None)
    forget(runtime, key, uid)
