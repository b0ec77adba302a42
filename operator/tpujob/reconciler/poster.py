"""The operator's Events, posted by one background thread from a bounded queue, as client-go's event
broadcaster posts a controller's (k8s.io/client-go tools/record: a queue of 1,000 per broadcaster,
`maxQueuedEvents`, that drops what comes when it is full). A pass enqueues its Events and goes on: they
wait for their token at the lowest priority (tpujob.ratelimit.Priority.EVENT), after the pods, Services
and status writes of every pass, and a burst of jobs is not slowed by its own Events. Dropped Events are
counted (tpujob_events_dropped_total), the wait from enqueue to posted measured (tpujob_event_lag_seconds).

Best effort, as Events are: a post that fails is logged, not retried. A replica that stands by drops what
it has queued (the active one posts its own); its client refuses writes meanwhile anyway.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpujob import metrics, peering

log = logging.getLogger(__name__)

# client-go's maxQueuedEvents (tools/record/event.go).
EVENT_QUEUE_CAPACITY = 1000


@dataclass(frozen=True)
class _Queued:
    namespace: str
    body: dict[str, Any]
    since: float


class EventPoster:
    def __init__(
        self,
        post: Callable[[str, dict[str, Any]], object],
        capacity: int = EVENT_QUEUE_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._post, self._capacity, self._clock = post, capacity, clock
        self._changed = threading.Condition()
        self._queue: collections.deque[_Queued] = collections.deque()
        self._posting = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="tpujob-events", daemon=True)
        self._thread.start()

    def enqueue(self, namespace: str, body: dict[str, Any]) -> bool:
        """False: the queue is full (or the poster stopped), and the Event is dropped."""
        with self._changed:
            if self._stopped or len(self._queue) >= self._capacity:
                metrics.EVENTS_DROPPED.inc()
                log.warning(
                    "%s/%s: event %s dropped: the queue is full", namespace, _about(body), body["reason"]
                )
                return False
            self._queue.append(_Queued(namespace, body, self._clock()))
            self._changed.notify_all()
        return True

    def drain(self, timeout: float) -> bool:
        """Wait until every queued Event was posted (or failed); False if `timeout` seconds did not do."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._posting, timeout)

    def discard(self) -> int:
        """Drop what is queued (a replica standing by); how many."""
        with self._changed:
            dropped = len(self._queue)
            self._queue.clear()
            self._changed.notify_all()
        return dropped

    def stop(self, timeout: float) -> None:
        """Post what is queued for up to `timeout` seconds in all, then stop; the rest is dropped."""
        deadline = time.monotonic() + timeout
        self.drain(timeout)
        with self._changed:
            self._stopped = True
            self._queue.clear()
            self._changed.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._stopped)
                if self._stopped:
                    return
                queued = self._queue.popleft()
                self._posting = True
                self._changed.notify_all()
            try:
                self._post(queued.namespace, queued.body)
            except peering.NotLeading:
                pass  # standing by: the active replica posts
            except Exception as error:
                log.warning(
                    "%s/%s: event %s not posted: %s",
                    queued.namespace,
                    _about(queued.body),
                    queued.body["reason"],
                    error,
                )
            else:
                metrics.EVENT_LAG.observe(self._clock() - queued.since)
            finally:
                with self._changed:
                    self._posting = False
                    self._changed.notify_all()


def _about(body: dict[str, Any]) -> str:
    return str(body.get("involvedObject", {}).get("name", "?"))
