"""The operator's client-side request limit, on a fake clock: a burst goes through at once, then the rate;
waiting requests are served by priority, and an old one before any."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tpujob.ratelimit import Priority, RequestLimiter, WaitQueue


class FakeClock:
    """Milliseconds that move only when the limiter sleeps."""

    def __init__(self) -> None:
        self.ms = 1_000_000
        self.sleeps: list[float] = []

    def now(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ms += round(seconds * 1000)


def limiter(qps: float, burst: int, clock: FakeClock, waits: list[float] | None = None) -> RequestLimiter:
    return RequestLimiter(
        qps,
        burst,
        clock_ms=clock.now,
        sleep=clock.sleep,
        on_wait=None if waits is None else lambda _, seconds: waits.append(seconds),
    )


def test_a_full_bucket_lets_the_burst_through_at_once_then_the_rate():
    clock, waits = FakeClock(), []
    limit = limiter(50, 100, clock, waits)
    start = clock.ms
    for _ in range(100):
        limit.acquire()
    assert clock.ms == start and clock.sleeps == [], "the burst must not wait"
    for _ in range(50):
        limit.acquire()
    # 50 more at 50 a second: one every 20 ms, the last one a second after the burst.
    assert clock.ms - start == 1000
    assert waits[:100] == [0.0] * 100
    assert waits[100:] == pytest.approx([0.02] * 50)


def test_an_idle_bucket_fills_up_again_but_not_past_its_burst():
    clock = FakeClock()
    limit = limiter(10, 5, clock)
    for _ in range(5):
        limit.acquire()
    clock.ms += 60_000  # a minute idle: 600 tokens' worth, capped at 5
    start = clock.ms
    for _ in range(5):
        limit.acquire()
    assert clock.ms == start
    assert limit.acquire() == pytest.approx(0.1)


def test_a_fractional_rate_is_kept():
    clock = FakeClock()
    limit = limiter(0.5, 1, clock)
    limit.acquire()
    assert limit.acquire() == pytest.approx(2.0)
    assert limit.acquire() == pytest.approx(2.0)


def test_qps_zero_means_no_limit():
    clock, waits = FakeClock(), []
    limit = limiter(0, 1, clock, waits)
    for _ in range(10_000):
        limit.acquire()
    assert clock.sleeps == [] and len(waits) == 0


@pytest.mark.parametrize(("qps", "burst"), [(-1, 10), (10, 0)])
def test_a_bad_setting_is_refused(qps, burst):
    with pytest.raises(ValueError, match="qps must be >= 0 and burst >= 1"):
        RequestLimiter(qps, burst)


# --- priority ------------------------------------------------------------------------------------------


def test_the_next_token_goes_to_the_highest_class_then_the_oldest():
    queue = WaitQueue(aging_ms=10_000)
    event = queue.add(Priority.EVENT, 0)
    status = queue.add(Priority.STATUS, 1)
    first_pod, second_pod = queue.add(Priority.WORKLOAD, 2), queue.add(Priority.WORKLOAD, 3)
    served = []
    while len(queue):
        waiter = queue.next(now_ms=5)
        assert waiter is not None
        served.append(waiter)
        queue.remove(waiter)
    assert served == [first_pod, second_pod, status, event]
    assert queue.next(now_ms=5) is None


def test_a_request_that_waited_its_aging_time_goes_before_every_class():
    queue = WaitQueue(aging_ms=10_000)
    event = queue.add(Priority.EVENT, 0)
    pod = queue.add(Priority.WORKLOAD, 9_000)
    assert queue.next(now_ms=9_999) is pod
    assert queue.next(now_ms=10_000) is event, "an Event no longer waits behind pods once it is 10 s old"
    status = queue.add(Priority.STATUS, 10_000)
    assert queue.next(now_ms=20_000) is event, "aged ones in the order they came"
    queue.remove(event)
    assert queue.next(now_ms=20_000) is pod
    queue.remove(pod)
    assert queue.next(now_ms=20_000) is status


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.001)


class GatedClock(FakeClock):
    """A fake clock whose sleeps block until the test lets one through (then the clock moves)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Semaphore(0)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        assert self.gate.acquire(timeout=10), "the test never let this sleep end"
        self.ms += round(seconds * 1000)


def test_waiting_requests_are_served_by_priority_not_arrival():
    clock = GatedClock()
    limit = RequestLimiter(10, 1, clock_ms=clock.now, sleep=clock.sleep)
    limit.acquire()  # the bucket is empty now
    served: list[str] = []

    def request(name: str, priority: Priority) -> threading.Thread:
        waiting = limit.waiting()
        thread = threading.Thread(target=lambda: (limit.acquire(priority), served.append(name)))
        thread.start()
        wait_until(lambda: limit.waiting() == waiting + 1, f"{name} waits")
        return thread

    threads = [request("event", Priority.EVENT)]
    wait_until(lambda: len(clock.sleeps) == 1, "the event, first in, sleeps for the next token")
    threads += [
        request("status", Priority.STATUS),
        request("pod", Priority.WORKLOAD),
        request("service", Priority.WORKLOAD),
    ]
    # Time passes, a token at a time (a sleep may end a millisecond short of one): at each token the turn
    # goes to the first of the highest class waiting.
    clock.gate.release(20)
    for thread in threads:
        thread.join(timeout=10)
    assert served == ["pod", "service", "status", "event"]
