"""A job's Service, created after its pods and not waited for (issue #51: the race against the Job
controller). A worker needs its Service (the DNS names of its peers' hostnames) only once it runs, seconds
after its create at best (scheduling, the image pull, the runtime's start); the TPU runtime, JAX's and
TensorFlow's coordinators retry a peer that does not resolve yet. So a pass creates its pods, hands the
Service here, and ends: it holds no worker thread for it, and the Service takes its token after every pod
waiting for one (tpujob.ratelimit.Priority.STATUS), so the pods of the next jobs in a burst go first.

The pass marks the Service in flight before handing it over (JobMemory.created): a pass meanwhile does not
make it twice. A refused create is logged and forgotten (`forget`), so the job's next pass asks again."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Behind:
    def __init__(
        self,
        create: Callable[[str, dict[str, Any]], bool],
        forget: Callable[[str], None],
        threads: int,
    ) -> None:
        self._create = create
        self._forget = forget  # the job's UID: its Service is no longer in flight
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, "tpujob-behind")
        self._changed = threading.Condition()
        self._pending = 0

    def submit(self, uid: str, namespace: str, body: dict[str, Any]) -> None:
        with self._changed:
            self._pending += 1
        future = self._pool.submit(self._create, namespace, body)
        future.add_done_callback(lambda done: self._done(uid, namespace, body, done))

    def _done(
        self, uid: str, namespace: str, body: dict[str, Any], done: concurrent.futures.Future[bool]
    ) -> None:
        try:
            error = done.exception()
            if error is not None:
                self._forget(uid)
                log.warning(
                    "%s/%s: creating the job's Service failed (%s); the job's next pass asks again",
                    namespace,
                    body["metadata"]["name"],
                    error,
                )
        finally:
            with self._changed:
                self._pending -= 1
                self._changed.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until every Service handed over was created (or failed); False if `timeout` did not do."""
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
