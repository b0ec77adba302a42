"""The client-side limit on the operator's Kubernetes API requests: one token bucket that every request of
tpujob.kube takes a token from, as client-go's does for Kubernetes' own controllers
(kube-controller-manager's `--kube-api-qps` / `--kube-api-burst`, 20 / 30 by default).

A full bucket lets `burst` requests through at once; after that, `qps` a second. A request that finds the
bucket empty waits for its token (the caller's thread sleeps), and the wait is reported to `on_wait` (the
operator's metric). `qps` 0 means no limit. The bucket is pyrate-limiter's TokenBucket (GCRA), one shared
state behind a lock: passes run in worker threads. The clock and the sleep are parameters, so a test drives
it with a fake clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pyrate_limiter import Rate, RateItem, StateBucket, TokenBucket

# Rates in pyrate-limiter are whole units per interval in milliseconds: tokens per 1000 s keeps a fractional
# qps (0.5 a second) exact to the millitoken.
_INTERVAL_MS = 1_000_000


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class RequestLimiter:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock_ms: Callable[[], int] = _monotonic_ms,
        sleep: Callable[[float], None] = time.sleep,
        on_wait: Callable[[float], None] | None = None,
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

    def acquire(self) -> float:
        """Take a token, waiting for one if the bucket is empty; the seconds waited."""
        if self._bucket is None:
            return 0.0
        started = None
        while True:
            with self._lock:
                now = self._clock_ms()
                started = now if started is None else started
                item = RateItem("kube", now, 1)
                if self._bucket.put(item):
                    break
                wait_ms = self._bucket.waiting(item)
            # Outside the lock: the other threads queue on the bucket, not behind a sleeping thread.
            self._sleep(max(int(wait_ms), 1) / 1000)  # type: ignore[arg-type]
        waited = (now - started) / 1000
        if self._on_wait is not None:
            self._on_wait(waited)
        return waited
