"""Status writes off the pass's thread, coalesced per job.

A pass that waited for its status write's token would hold one of the TPUJOB_WORKERS threads meanwhile,
and in a burst of new jobs the status tokens (Priority.STATUS) come after every waiting pod and Service
create: the threads fill up with waiting status writes, and no pass is left to create the next job's pods.
So the pass hands its write over and ends. From that moment the job's memory (memory.py) holds the new
status as the job's current one: the next pass decides on it, written or not.

A job has at most one write waiting: a newer status for it replaces the waiting one (coalesced, counted in
tpujob_status_writes_coalesced_total), and a write in flight is followed by the newest after it. Written:
the memory records its resourceVersion (the watch's echo needs no pass). 404: the job is gone and forgotten.
Refused because this replica stands by: dropped (the active replica writes). Any other error: tried again
after a growing delay, unless a newer status replaced it meanwhile. tpujob_status_write_lag_seconds runs
from the first status not yet written to its write answered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpujob import metrics, peering
from tpujob.reconciler.memory import JobMemory

log = logging.getLogger(__name__)

# Writes of different jobs at once: each waits for its token, so a few are enough to keep the bucket's pace.
WRITERS = 4
RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS = 1.0, 30.0

# (namespace, name, status, stored) -> the written resourceVersion, None if the job is gone.
Write = Callable[[str, str, dict[str, Any], list[dict[str, Any]]], str | None]


@dataclass
class _Pending:
    namespace: str
    name: str
    status: dict[str, Any]
    # The statuses the object may hold: what they have and `status` lacks is removed by the patch.
    stored: list[dict[str, Any]]
    since: float
    due: float = 0.0
    failures: int = 0


class StatusWriter:
    def __init__(
        self,
        write: Write,
        memory: JobMemory,
        on_gone: Callable[[str], None],
        writers: int = WRITERS,
        retry_first_seconds: float = RETRY_FIRST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write, self._memory, self._on_gone, self._clock = write, memory, on_gone, clock
        self._retry_first = retry_first_seconds
        self._changed = threading.Condition()
        self._pending: dict[str, _Pending] = {}  # by job uid, in the order first submitted
        self._in_flight: set[str] = set()
        self._stopped = False
        self._threads = [
            threading.Thread(target=self._run, name=f"tpujob-status-{i}", daemon=True) for i in range(writers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, uid: str, namespace: str, name: str, status: dict[str, Any], stored: list[dict[str, Any]]
    ) -> None:
        """The job's new status: its current one from now on, written as soon as a token allows."""
        with self._changed:
            self._memory.decided(uid, status)
            waiting = self._pending.pop(uid, None)
            if waiting is not None:
                metrics.STATUS_WRITES_COALESCED.inc()
                stored = [*waiting.stored, *stored]
            since = waiting.since if waiting is not None else self._clock()
            self._pending[uid] = _Pending(namespace, name, status, stored, since)
            self._changed.notify_all()

    def forget(self, uid: str) -> None:
        with self._changed:
            self._pending.pop(uid, None)

    def discard(self) -> None:
        """A replica standing by: the active one writes."""
        with self._changed:
            self._pending.clear()

    def drain(self, timeout: float) -> bool:
        """Wait until nothing is waiting or in flight; False if `timeout` seconds did not do."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._in_flight, timeout)

    def stop(self, timeout: float) -> None:
        """Write what is waiting for up to `timeout` seconds in all, then stop."""
        deadline = time.monotonic() + timeout
        self.drain(timeout)
        with self._changed:
            self._stopped = True
            self._pending.clear()
            self._changed.notify_all()
        for thread in self._threads:  # a write in flight ends within its request timeout; not waited for
            thread.join(max(0.0, deadline - time.monotonic()))

    def _next(self) -> tuple[str, _Pending] | None:
        """Under the lock: the first due write of a job with none in flight; None when stopped. The scan stops
        at the first due one (usually the first: only a retry waits), so taking a write costs the same with
        thousands waiting in a burst as with one (building lists of every waiting job at each take was 16%
        of the operator's samples in one profile of a burst of 3,000 jobs)."""
        while not self._stopped:
            now = self._clock()
            soonest: float | None = None
            for uid, pending in self._pending.items():
                if uid in self._in_flight:
                    continue
                if pending.due <= now:
                    self._in_flight.add(uid)
                    return uid, self._pending.pop(uid)
                soonest = pending.due if soonest is None else min(soonest, pending.due)
            self._changed.wait(None if soonest is None else soonest - now)
        return None

    def _run(self) -> None:
        while True:
            with self._changed:
                taken = self._next()
            if taken is None:
                return
            uid, pending = taken
            try:
                version = self._write(pending.namespace, pending.name, pending.status, pending.stored)
            except peering.NotLeading:
                self._done(uid)
            except Exception as error:
                log.warning(
                    "%s/%s: status not written, tried again: %s", pending.namespace, pending.name, error
                )
                self._retry(uid, pending)
            else:
                if version is None:
                    self._on_gone(uid)  # outside the lock: it forgets the job everywhere, here too
                    self._done(uid)
                else:
                    self._memory.written(uid, version)
                    metrics.STATUS_WRITE_LAG.observe(self._clock() - pending.since)
                    self._done(uid)

    def _done(self, uid: str) -> None:
        with self._changed:
            self._in_flight.discard(uid)
            self._changed.notify_all()

    def _retry(self, uid: str, pending: _Pending) -> None:
        with self._changed:
            self._in_flight.discard(uid)
            if uid not in self._pending and not self._stopped:  # else a newer status goes instead
                pending.failures += 1
                delay = min(self._retry_first * 2 ** (pending.failures - 1), RETRY_MAX_SECONDS)
                pending.due = self._clock() + delay
                self._pending[uid] = pending
            self._changed.notify_all()
