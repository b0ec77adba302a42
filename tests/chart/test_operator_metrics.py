"""The metric the chart's dashboard adds for on-call: how long the longest-waiting job has been in a phase."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tpujob import metrics


def test_phase_oldest_seconds_counts_from_the_phase_change_and_is_zero_for_empty_phases():
    now = [100.0]
    jobs = metrics.JobsByPhase(clock=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(jobs)
    jobs.set("a", "Provisioning")
    now[0] = 130.0
    jobs.set("b", "Provisioning")
    jobs.set("a", "Provisioning")  # the same phase again: still waiting since 100
    now[0] = 160.0

    def oldest(phase):
        return registry.get_sample_value("tpujob_phase_oldest_seconds", {"phase": phase})

    assert oldest("Provisioning") == 60.0
    assert registry.get_sample_value("tpujob_jobs", {"phase": "Provisioning"}) == 2
    assert oldest("Running") == 0.0 and oldest("Failed") == 0.0  # every phase has a series
    jobs.set("a", "Running")
    assert (oldest("Provisioning"), oldest("Running")) == (30.0, 0.0)
    jobs.set("b", None)
    assert oldest("Provisioning") == 0.0
