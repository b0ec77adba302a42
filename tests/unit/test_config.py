"""Operator settings from TPUJOB_* variables (pydantic-settings): defaults, empty means default, and a bad
value stops the start naming its variable."""

from __future__ import annotations

import pytest

from tpujob.config import ENVIRONMENT, InvalidSettings, from_environment


def test_defaults_and_an_empty_variable_means_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TPUJOB_WORKERS", "")  # the chart renders an unset value as ""
    monkeypatch.setenv("TPUJOB_GKE_LOCATION", "europe-west4-a")
    config = from_environment()
    assert (config.workers, config.metrics_port, config.namespace, config.gke_endpoint) == (
        16,
        8000,
        None,
        None,
    )
    assert config.cluster.zone == "europe-west4-a"  # a zonal cluster's pools go to its zone
    assert not config.gke_configured


def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUJOB_RESYNC_SECONDS", "soon")
    with pytest.raises(InvalidSettings, match="TPUJOB_RESYNC_SECONDS='soon': Input should be a valid number"):
        from_environment()


def test_every_setting_has_a_variable_and_a_description() -> None:
    assert "TPUJOB_UNSCHEDULABLE_GRACE_SECONDS" in ENVIRONMENT
    assert all(description for description in ENVIRONMENT.values())


def test_a_renew_deadline_not_shorter_than_the_peering_lifetime_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TPUJOB_PEERING_LIFETIME_SECONDS", "10")
    monkeypatch.setenv("TPUJOB_PEERING_RENEW_DEADLINE_SECONDS", "10")
    with pytest.raises(
        InvalidSettings, match=r"RENEW_DEADLINE_SECONDS=10 must be shorter than .*LIFETIME_SECONDS=10"
    ):
        from_environment()
