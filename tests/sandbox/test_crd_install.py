"""How the test bed installs a CRD (or a ClusterRole) when the answer to its create is lost on the way."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes import client as k8s

from tpujob_sandbox.operators import CREATE_ATTEMPTS, _create_or_keep


def test_a_create_whose_answer_was_cut_is_sent_again_and_its_409_taken_as_there():
    """The aggregator may cut a proxied answer mid-body; the create may have landed: its resend says so."""
    sent: list[dict] = []

    def create(body: dict) -> None:
        sent.append(body)
        if len(sent) == 1:
            raise urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(3349 bytes read)")
        raise k8s.ApiException(status=409, reason="AlreadyExists")

    _create_or_keep(create, {"metadata": {"name": "workloads.kueue.x-k8s.io"}})
    assert len(sent) == 2


def test_a_create_cut_every_time_fails_after_its_attempts():
    sent: list[dict] = []

    def always_cut(body: dict) -> None:
        sent.append(body)
        raise urllib3.exceptions.ProtocolError("Connection broken")

    with pytest.raises(urllib3.exceptions.ProtocolError):
        _create_or_keep(always_cut, {"metadata": {"name": "x"}})
    assert len(sent) == CREATE_ATTEMPTS
