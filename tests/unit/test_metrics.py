"""Metric updates from one reconcile pass (the default registry, read back by sample value)."""

import datetime as dt
import itertools

from prometheus_client import REGISTRY

from tests.manifests import base_job
from tpujob import metrics
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.status import NodePoolStatus, Phase, Reason, TPUJobStatus

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


def sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def job(uid, **spec):
    manifest = base_job("m", **spec)
    manifest["metadata"]["uid"] = uid
    return parse_tpujob(manifest)


def test_transitions_restarts_and_time_to_running():
    recorder = metrics.PassRecorder()
    j = job("metrics-1")
    before = TPUJobStatus(phase=Phase.STARTING, start_time="2026-11-21T11:58:00Z")
    after = TPUJobStatus(
        phase=Phase.RUNNING,
        start_time="2026-11-21T11:58:00Z",
        running_time="2026-11-21T12:00:00Z",
        restarts_by_reason={Reason.PREEMPTED: 1},
    )
    transitions = sample("tpujob_phase_transitions_total", phase="Running")
    restarts = sample("tpujob_restarts_total", reason="Preempted")
    observed = sample("tpujob_time_to_running_seconds_sum")
    recorder.record(j, before, after, NOW)
    assert sample("tpujob_phase_transitions_total", phase="Running") == transitions + 1
    assert sample("tpujob_restarts_total", reason="Preempted") == restarts + 1
    assert sample("tpujob_time_to_running_seconds_sum") == observed + 120


def test_chip_seconds_accrue_while_pools_are_alive():
    recorder = metrics.PassRecorder()
    j = job("metrics-2", tpu={"type": "v5p", "topology": "2x2x4"}, capacity={"mode": "spot"})
    alive = TPUJobStatus(phase=Phase.RUNNING, node_pools=[NodePoolStatus(name="p", slice=0, state="RUNNING")])
    start = sample("tpujob_tpu_chip_seconds_total", tpu_type="v5p", capacity_mode="spot")
    recorder.record(j, alive, alive, NOW)
    recorder.record(j, alive, alive, NOW + dt.timedelta(seconds=10))
    assert sample("tpujob_tpu_chip_seconds_total", tpu_type="v5p", capacity_mode="spot") == start + 16 * 10


def test_provisioning_time_is_measured_from_create_to_running():
    recorder = metrics.PassRecorder()
    j = job("metrics-3")
    none = TPUJobStatus()
    creating = TPUJobStatus(node_pools=[NodePoolStatus(name="pool-x", slice=0, state="PROVISIONING")])
    running = TPUJobStatus(node_pools=[NodePoolStatus(name="pool-x", slice=0, state="RUNNING")])
    count = sample("tpujob_node_pool_provisioning_seconds_count")
    total = sample("tpujob_node_pool_provisioning_seconds_sum")
    recorder.record(j, none, creating, NOW)
    recorder.record(j, creating, running, NOW + dt.timedelta(seconds=95))
    assert sample("tpujob_node_pool_provisioning_seconds_count") == count + 1
    assert sample("tpujob_node_pool_provisioning_seconds_sum") == total + 95


def test_pool_calls_and_gke_errors_are_counted_by_reason():
    before = sample("tpujob_gke_errors_total", reason="Stockout")
    errors = sample("tpujob_node_pool_operations_total", operation="create", result="error")
    metrics.record_pool_call("create", s.GKEError(Reason.STOCKOUT, "lack of capacity"))
    assert sample("tpujob_gke_errors_total", reason="Stockout") == before + 1
    assert sample("tpujob_node_pool_operations_total", operation="create", result="error") == errors + 1


def test_a_pool_ending_in_error_for_lack_of_capacity_counts_as_a_stockout():
    recorder = metrics.PassRecorder()
    j = job("metrics-4")
    creating = TPUJobStatus(node_pools=[NodePoolStatus(name="pool-y", slice=0, state="PROVISIONING")])
    stockout = TPUJobStatus(
        node_pools=[
            NodePoolStatus(name="pool-y", slice=0, state="ERROR", message="...", condition="GCE_STOCKOUT")
        ]
    )
    before = sample("tpujob_gke_errors_total", reason="Stockout")
    recorder.record(j, creating, stockout, NOW)
    recorder.record(j, stockout, stockout, NOW + dt.timedelta(seconds=5))  # still ERROR: counted once
    assert sample("tpujob_gke_errors_total", reason="Stockout") == before + 1


def test_a_start_problem_counts_once_per_problem_and_its_timeout_once_more():
    recorder = metrics.PassRecorder()
    j = job("metrics-start")
    pulls, timeouts = (
        sample("tpujob_worker_start_problems_total", reason=r) for r in ("ErrImagePull", "StartupTimeout")
    )
    statuses = [
        TPUJobStatus(phase=Phase.STARTING, reason="Starting"),
        TPUJobStatus(phase=Phase.STARTING, reason="ErrImagePull"),
        TPUJobStatus(
            phase=Phase.STARTING, reason="ImagePullBackOff"
        ),  # the kubelet's retry: the same problem
        TPUJobStatus(phase=Phase.STARTING, reason="ErrImagePull"),
        TPUJobStatus(phase=Phase.FAILED, reason=Reason.STARTUP_TIMEOUT),
    ]
    for before, after in itertools.pairwise(statuses):
        recorder.record(j, before, after, NOW)
    assert sample("tpujob_worker_start_problems_total", reason="ErrImagePull") == pulls + 1
    assert sample("tpujob_worker_start_problems_total", reason="StartupTimeout") == timeouts + 1
    assert sample("tpujob_worker_start_problems_total", reason="ImagePullBackOff") == 0.0


def collected(collector, name, **labels):
    """A custom collector's sample (they are registered at the operator's start, not in these tests)."""
    for family in collector.collect():
        for item in family.samples:
            if item.name == name and item.labels == labels:
                return item.value
    return 0.0


def test_a_replica_standing_by_stops_exporting_the_job_gauges_it_set():
    """The active replica exports the jobs' gauges; one that stood down must not double them on a dashboard
    summing over replicas (Reconciler.forget_all forgets every recorded job)."""
    recorder = metrics.PassRecorder()
    held = TPUJobStatus(phase=Phase.RUNNING, node_pools=[NodePoolStatus(name="p", slice=0, state="RUNNING")])

    def chips():
        return collected(recorder.chips_held, "tpujob_tpu_chips", tpu_type="v6e", capacity_mode="onDemand")

    def running():
        return collected(recorder.jobs_by_phase, "tpujob_jobs", phase="Running")

    chips_before, running_before = chips(), running()
    for uid in ("gauge-1", "gauge-2"):
        recorder.record(job(uid, tpu={"type": "v6e", "topology": "4x4"}), held, held, NOW)
    assert (chips(), running()) == (chips_before + 32, running_before + 2)
    assert recorder.uids() == {"gauge-1", "gauge-2"}

    for uid in recorder.uids():
        recorder.forget(uid)

    assert (chips(), running()) == (chips_before, running_before)
    assert recorder.uids() == set()


def test_every_phase_has_its_jobs_series_from_phase_itself():
    """The phase gauges iterate api.status.Phase: a new phase gets its series (0) with no second list."""
    collector = metrics.JobsByPhase()
    phases = {item.labels["phase"] for family in collector.collect() for item in family.samples}
    assert phases == {phase.value for phase in Phase}


def test_time_queued_is_observed_once_per_admission():
    from tpujob.api.status import QueueStatus, TPUJobStatus
    from tpujob.metrics import queued_seconds

    waiting = TPUJobStatus(queue=QueueStatus(name="q", queued_since="2026-11-27T10:00:00Z"))
    admitted = TPUJobStatus(
        queue=QueueStatus(name="q", cluster_queue="cq", admitted_time="2026-11-27T10:05:00Z")
    )
    assert queued_seconds(waiting, admitted) == 300.0
    assert queued_seconds(admitted, admitted) is None  # the same admission, seen again
    assert queued_seconds(TPUJobStatus(), admitted) is None  # no wait recorded before


def test_time_to_recover_is_observed_once_per_recovered_restart_by_cause():
    from tpujob.api.status import RestartRecord

    recorder = metrics.PassRecorder()
    j = job("metrics-recovery")
    waiting = RestartRecord(attempt=1, reason=Reason.NODE_LOST, fault_time="2026-11-21T11:58:00Z")
    recovered = waiting.model_copy(
        update={"recovered_time": "2026-11-21T12:00:00Z", "recovery_seconds": 120.0}
    )
    before = TPUJobStatus(phase=Phase.RUNNING, restart_history=[waiting])
    after = TPUJobStatus(phase=Phase.RUNNING, restart_history=[recovered])
    count = sample("tpujob_recovery_seconds_count", cause="NodeLost")
    total = sample("tpujob_recovery_seconds_sum", cause="NodeLost")
    recorder.record(j, before, after, NOW)
    recorder.record(j, after, after, NOW)  # the same recovery, seen again
    assert sample("tpujob_recovery_seconds_count", cause="NodeLost") == count + 1
    assert sample("tpujob_recovery_seconds_sum", cause="NodeLost") == total + 120


def test_queued_start_estimates_are_exported_per_cluster_queue_and_go_with_their_jobs():
    """Per ClusterQueue, not per job: the soonest and latest estimated start of its waiting jobs (seconds
    from the scrape) and how many have none; a job admitted, or forgotten, leaves them."""
    import time

    from tpujob.api.status import QueueStatus, StartEstimate

    recorder = metrics.PassRecorder()
    soon = dt.datetime.fromtimestamp(time.time() + 600, dt.UTC)
    later = dt.datetime.fromtimestamp(time.time() + 1800, dt.UTC)

    def waiting(when, cq="cq-a"):
        estimate = StartEstimate(
            time=s.timestamp(when) if when else None,
            reason=None if when else "no ETA",
            computed_time=s.timestamp(NOW),
        )
        return TPUJobStatus(
            phase=Phase.QUEUED, queue=QueueStatus(name="q", cluster_queue=cq, estimated_start=estimate)
        )

    statuses = {
        "w-1": waiting(soon),
        "w-2": waiting(later),
        "w-3": waiting(None),
        "w-4": waiting(soon, "cq-b"),
    }
    for uid, status in statuses.items():
        recorder.record(job(uid), status, status, NOW)

    def gauges():
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in recorder.queued_starts.collect()
            for sample in family.samples
        }

    found = gauges()
    next_a = found[("tpujob_queued_start_estimate_seconds", (("cluster_queue", "cq-a"), ("which", "next")))]
    last_a = found[("tpujob_queued_start_estimate_seconds", (("cluster_queue", "cq-a"), ("which", "last")))]
    assert 590 < next_a <= 600 and 1790 < last_a <= 1800
    assert found[("tpujob_queued_start_unknown_jobs", (("cluster_queue", "cq-a"),))] == 1
    assert found[("tpujob_queued_start_unknown_jobs", (("cluster_queue", "cq-b"),))] == 0
    # w-2 admitted (no estimate any more), w-4 deleted: cq-b's series go, cq-a's latest is w-1's.
    admitted = TPUJobStatus(phase=Phase.RUNNING, queue=QueueStatus(name="q", cluster_queue="cq-a"))
    recorder.record(job("w-2"), statuses["w-2"], admitted, NOW)
    recorder.forget("w-4")
    found = gauges()
    assert not [key for key in found if ("cluster_queue", "cq-b") in key[1]]
    last_a = found[("tpujob_queued_start_estimate_seconds", (("cluster_queue", "cq-a"), ("which", "last")))]
    assert 590 < last_a <= 600
