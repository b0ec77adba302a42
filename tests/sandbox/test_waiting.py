"""wait_for: the test bed's one way to wait. A transient API error is "not yet"; any other error ends it."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from tpujob_sandbox.waiting import Timeout, wait_for


def answers(*outcomes):
    """A condition that gives each outcome in turn (raising the exceptions), then keeps the last."""
    queue = list(outcomes)

    def condition():
        outcome = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return condition


@pytest.mark.parametrize("status", [429, 500, 503, 504])
def test_a_transient_api_error_is_waited_through(status):
    condition = answers(ApiException(status=status, reason="busy"), None, "ready")
    assert wait_for(condition, timeout=5, interval=0.001, what="ready") == "ready"


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_an_api_error_that_asking_again_cannot_fix_ends_the_wait_at_once(status):
    condition = answers(ApiException(status=status, reason="no"), "ready")
    with pytest.raises(ApiException) as raised:
        wait_for(condition, timeout=5, interval=0.001, what="ready")
    assert raised.value.status == status


def test_any_other_error_ends_the_wait_at_once():
    with pytest.raises(KeyError):
        wait_for(answers(KeyError("status"), "ready"), timeout=5, interval=0.001, what="ready")


def test_a_wait_that_only_met_transient_errors_times_out_naming_the_last_one():
    condition = answers(ApiException(status=503, reason="Service Unavailable"))
    said = r"waiting for the job; last transient API error: 503 Service Unavailable"
    with pytest.raises(Timeout, match=said):
        wait_for(condition, timeout=0.05, interval=0.001, what="the job")


def test_a_plain_timeout_names_what_and_the_last_state():
    with pytest.raises(Timeout, match=r"^timed out after 0 s waiting for the job; last state: pending$"):
        wait_for(answers(None), timeout=0.01, interval=0.001, what="the job", last_state=lambda: "pending")
