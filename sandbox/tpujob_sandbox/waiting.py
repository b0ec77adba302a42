"""Wait on a condition with a deadline: the one way the test bed waits (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kubernetes.client.rest import ApiException

T = TypeVar("T")

# The API server's answers a client may simply ask again after. Kubernetes' own e2e framework polls through
# a timeout (504), an internal error or server-side timeout (500) and too many requests (429)
# (test/e2e/framework isRetryableAPIError); it takes a 503 only with a Retry-After header. This also takes a
# bare 503: what kube-apiserver answers while an aggregated API (the test bed's CRD server) is briefly
# unavailable. Anything else ends the wait at once.
TRANSIENT_STATUSES = frozenset({429, 500, 503, 504})


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
    """Return the first truthy result of `condition`, or raise Timeout naming `what` (and the last state).
    A transient API error (TRANSIENT_STATUSES) counts as "not yet"; the Timeout names the last one."""
    deadline = time.monotonic() + timeout
    transient: ApiException | None = None
    while True:
        try:
            result = condition()
        except ApiException as error:
            if error.status not in TRANSIENT_STATUSES:
                raise
            result, transient = None, error
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f"; last state: {last_state()}" if last_state else ""
            if transient is not None:
                detail += f"; last transient API error: {transient.status} {transient.reason}"
            raise Timeout(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)
