"""The client-side limit on the operator's Kubernetes API requests: one token bucket that every request of
tpujob.kube takes a token from, as client-go's does for Kubernetes' own controllers
(kube-controller-manager's `--kube-api-qps` / `--kube-api-burst`, 20 / 30 by default).

A full bucket lets `burst` requests through at once; after that, `qps` a second. `qps` 0 means no limit.
The bucket is pyrate-limiter's TokenBucket (GCRA). Passes run in worker threads: a request that finds the
bucket empty waits (its thread sleeps), and the wait is reported to `on_wait` (the operator's metric).

Waiting requests are served by priority, not by arrival: the pods a job runs on before its Service and
status write, and those before its Events (Priority). One budget, ordered, as the Job
controller's Events share its one client-go bucket but are posted after its pods. The order is kept by a
turn: one waiter at a time (the one `WaitQueue.next` names) may take the next token; it sleeps until the
bucket has one and then looks again, so a request of a higher class that arrived meanwhile goes first.

No class starves: a request that has waited `aging_seconds` is served before every class, in arrival
order. Waiters are the threads that call (passes, their creates, the Event poster), a bounded number, so
a request waits at most `aging_seconds` plus one token interval per thread that came before it.

The clock and the sleep are parameters, so a test drives it with a fake clock.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyrate_limiter import Rate, RateItem, StateBucket, TokenBucket

# Rates in pyrate-limiter are whole units per interval in milliseconds: tokens per 1000 s keeps a fractional
# qps (0.5 a second) exact to the millitoken.
_INTERVAL_MS = 1_000_000
# Long enough that a burst of pod creates is not interleaved with status writes, short enough that Events
# are never late by minutes (a request this old goes before any class).
AGING_SECONDS = 10.0


class Priority(enum.IntEnum):
    """Which waiting request gets the next token: the lowest value first (after the aged ones)."""

    WORKLOAD = (
        0  # pods created or deleted, the namespace's NetworkPolicy, and a pass' reads before it creates
    )
    STATUS = 1  # TPUJob status writes, jobs' Services (reconciler/behind.py), any request not named otherwise
    EVENT = 2  # Events: best effort, posted by one background poster


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(eq=False)
class Waiter:
    priority: Priority
    since_ms: int
    seq: int
    turn: threading.Event = field(default_factory=threading.Event)


class WaitQueue:
    """The requests waiting for a token, and which of them is served next. Pure: no lock, no clock."""

    def __init__(self, aging_ms: int) -> None:
        self.aging_ms = aging_ms
        self._waiters: list[Waiter] = []
        self._seq = itertools.count()
        self._holder: Waiter | None = None  # the one waiter whose turn is set

    def __len__(self) -> int:
        return len(self._waiters)

    def add(self, priority: Priority, now_ms: int) -> Waiter:
        waiter = Waiter(priority, now_ms, next(self._seq))
        self._waiters.append(waiter)
        return waiter

    def __contains__(self, waiter: Waiter) -> bool:
        return waiter in self._waiters

    def remove(self, waiter: Waiter) -> None:
        self._waiters.remove(waiter)
        if waiter is self._holder:
            self._holder = None

    def next(self, now_ms: int) -> Waiter | None:
        """The aged waiters first, oldest first; then the highest class, oldest first. A linear scan: there
        are as many waiters as calling threads, a few dozen."""

        def rank(w: Waiter) -> tuple[int, int]:
            aged = now_ms - w.since_ms >= self.aging_ms
            return (-1 if aged else w.priority, w.seq)

        return min(self._waiters, key=rank, default=None)

    def pass_turn(self, now_ms: int) -> None:
        """The turn to the waiter served next: only it may take a token. Only the holder's turn is ever set,
        so passing it touches two waiters, not every one (each Event.clear takes a lock, at every token,
        with dozens of threads waiting in a burst)."""
        following = self.next(now_ms)
        if following is self._holder:
            return
        if self._holder is not None:
            self._holder.turn.clear()
        self._holder = following
        if following is not None:
            following.turn.set()


class RequestLimiter:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        aging_seconds: float = AGING_SECONDS,
        clock_ms: Callable[[], int] = _monotonic_ms,
        sleep: Callable[[float], None] = time.sleep,
        on_wait: Callable[[Priority, float], None] | None = None,
    ) -> None:
        if qps < 0 or burst < 1:
            raise ValueError(f"qps must be >= 0 and burst >= 1, not {qps} / {burst}")
        self.qps, self.burst = qps, burst
        self._bucket = (
            StateBucket([Rate(round(qps * 1000), _INTERVAL_MS, burst=burst)], algorithm=TokenBucket())
            if qps > 0
            else None
        )
        self._clock_ms, self._sleep, self._on_wait = clock_ms, sleep, on_wait
        self._lock = threading.Lock()
        self._queue = WaitQueue(round(aging_seconds * 1000))

    def waiting(self) -> int:
        """Requests waiting for a token now."""
        with self._lock:
            return len(self._queue)

    def acquire(self, priority: Priority = Priority.STATUS) -> float:
        """Take a token, waiting for one if the bucket is empty; the seconds waited."""
        if self._bucket is None:
            return 0.0
        with self._lock:
            started = self._clock_ms()
            # Nobody waits: the bucket decides. Somebody waits: the bucket is empty, or about to be theirs.
            if not self._queue and self._take(started):
                return self._waited(priority, 0)
            me = self._queue.add(priority, started)
            self._queue.pass_turn(started)
        try:
            while True:
                me.turn.wait()
                with self._lock:
                    now = self._clock_ms()
                    if self._take(now):
                        self._queue.remove(me)
                        self._queue.pass_turn(now)
                        return self._waited(priority, now - started)
                    wait_ms = self._bucket.waiting(RateItem("kube", now, 1))
                # Outside the lock: newcomers queue meanwhile, and may be served before this one.
                self._sleep(max(int(wait_ms), 1) / 1000)  # type: ignore[arg-type]
                with self._lock:
                    self._queue.pass_turn(self._clock_ms())
        except BaseException:
            with self._lock:
                if me in self._queue:
                    self._queue.remove(me)
                    self._queue.pass_turn(self._clock_ms())
            raise

    def _take(self, now_ms: int) -> bool:
        assert self._bucket is not None
        return bool(self._bucket.put(RateItem("kube", now_ms, 1)))

    def _waited(self, priority: Priority, waited_ms: int) -> float:
        waited = waited_ms / 1000
        if self._on_wait is not None:
            self._on_wait(priority, waited)
        return waited
