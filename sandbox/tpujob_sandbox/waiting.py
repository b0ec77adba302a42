"""Wait on a condition with a deadline: the one way the test bed waits (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Timeout(AssertionError):
    """A condition did not hold before its deadline (an AssertionError so pytest reports it as a failure)."""


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    last_state: Callable[[], object] | None = None,
) -> T:
    """Return the first truthy result of `condition`, or raise Timeout naming `what` (and the last state)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f"; last state: {last_state()}" if last_state else ""
            raise Timeout(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)
