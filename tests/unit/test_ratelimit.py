"""The operator's client-side request limit, on a fake clock: a burst goes through at once, then the rate."""

from __future__ import annotations

import pytest

from tpujob.ratelimit import RequestLimiter


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
        qps, burst, clock_ms=clock.now, sleep=clock.sleep, on_wait=None if waits is None else waits.append
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
