"""The metric the chart's dashboard and TPUJobStuckProvisioning read: since when the longest-waiting job has
been in a waiting phase, from the jobs' statuses (a restarted operator exports the same)."""

from __future__ import annotations

import datetime as dt

from prometheus_client import CollectorRegistry

from tpujob import metrics
from tpujob.api.status import Phase, TPUJobStatus


def unix(hhmm: str) -> float:
    return dt.datetime.fromisoformat(f"2026-11-21T{hhmm}:00+00:00").timestamp()


def waiting(since: str) -> TPUJobStatus:
    return TPUJobStatus(phase=Phase.PROVISIONING, provisioning_since=f"2026-11-21T{since}:00Z")


def exporter() -> tuple[metrics.JobsByPhase, CollectorRegistry]:
    jobs = metrics.JobsByPhase()
    registry = CollectorRegistry()
    registry.register(jobs)
    return jobs, registry


def oldest(registry: CollectorRegistry, phase: str) -> float | None:
    return registry.get_sample_value("tpujob_phase_oldest_since_timestamp_seconds", {"phase": phase})


def test_phase_oldest_since_is_the_oldest_status_time_and_zero_for_empty_phases():
    jobs, registry = exporter()
    jobs.set("a", waiting("12:00"))
    jobs.set("b", waiting("12:10"))
    jobs.set("c", TPUJobStatus(phase=Phase.STARTING, starting_since="2026-11-21T12:20:00Z"))
    jobs.set("d", TPUJobStatus(phase=Phase.RUNNING, running_time="2026-11-21T11:00:00Z"))
    assert oldest(registry, "Provisioning") == unix("12:00")
    assert oldest(registry, "Starting") == unix("12:20")
    assert oldest(registry, "Pending") == 0.0 and oldest(registry, "Restarting") == 0.0
    assert oldest(registry, "Running") is None  # waiting phases only: Running is no wait
    assert registry.get_sample_value("tpujob_jobs", {"phase": "Provisioning"}) == 2
    jobs.set("a", TPUJobStatus(phase=Phase.STARTING, starting_since="2026-11-21T12:30:00Z"))
    assert (oldest(registry, "Provisioning"), oldest(registry, "Starting")) == (unix("12:10"), unix("12:20"))
    jobs.set("b", None)
    assert oldest(registry, "Provisioning") == 0.0


def test_a_restarted_operator_exports_the_same_wait():
    """A new process (a restart, a rollout, a failover) reads the same statuses: the same value, where a
    gauge counted from when the process first saw the phase would start over at 0."""
    before, before_registry = exporter()
    before.set("a", waiting("12:00"))
    after, after_registry = exporter()
    after.set("a", waiting("12:00"))
    assert oldest(after_registry, "Provisioning") == oldest(before_registry, "Provisioning") == unix("12:00")
