"""Narrow recovery (restartStrategy RecreateSlice) and the TPU device plugin's hardware signals, decided
purely: snapshot in, actions and status out."""

import dataclasses
import datetime as dt

import pytest

from tests.unit.test_status import NOW, advance, make_job, pods, ready_pools, step
from tpujob import status as s
from tpujob.api.status import Phase, Reason
from tpujob.render import Cluster, naming
from tpujob.render import plan as render

MULTISLICE = {"type": "v5p", "topology": "2x2x2", "slices": 2}  # 2 slices x 2 hosts
NARROW = {"restartStrategy": "RecreateSlice"}


def running(job):
    """The job advanced to Running with every pod of attempt 0 running on node n-<slice>-<worker>."""
    live = tuple(dataclasses.replace(p, node=f"n-{p.slice}-{p.worker}") for p in pods(job, 0, "Running"))
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=live)
    assert decision.status.phase == Phase.RUNNING
    return advance(job, decision), live


def fail(live, slice_index, worker, **how):
    how.setdefault("exit_code", 1)
    return tuple(
        dataclasses.replace(p, phase="Failed", **how) if (p.slice, p.worker) == (slice_index, worker) else p
        for p in live
    )


def test_a_failure_in_one_slice_recreates_only_that_slice_and_tells_the_others_in_place():
    job, live = running(make_job(tpu=MULTISLICE, runPolicy=NARROW))
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=fail(live, 1, 0))
    status = decision.status
    assert (status.phase, status.reason, status.attempt) == (Phase.RESTARTING, Reason.WORKER_FAILED, 1)
    assert status.slice_attempts == [0, 1]
    assert status.application_restarts == 1  # a narrow restart still counts as the failure it is
    assert decision.delete_pods == [naming.pod_name(job, 1, 1, 0)]  # the failed pod stays for its logs
    assert "recreating slice 1's workers" in status.message
    assert sorted(decision.restart_in_place) == sorted(p.name for p in live if p.slice == 0)  # told at once
    # Next pass (after the backoff): slice 1's pods made as attempt 1, slice 0's kept pods told attempt 1.
    job = advance(job, decision)
    kept = tuple(p for p in live if p.slice == 0)
    later = NOW + dt.timedelta(seconds=10)
    again = step(job, pools=ready_pools(job), service_exists=True, pods=kept, now=later)
    assert again.create_pods == [(1, 0), (1, 1)]
    assert sorted(again.restart_in_place) == sorted(p.name for p in kept)
    assert again.delete_pods == []
    # Once the kept pods show the new attempt, they are not told again; all four running is Running.
    told = tuple(dataclasses.replace(p, restart_attempt=1) for p in kept)
    new = pods(job, 1, "Running")[2:]
    assert [p.slice for p in new] == [1, 1]
    settled = step(
        advance(job, again), pools=ready_pools(job), service_exists=True, pods=told + new, now=later
    )
    assert settled.restart_in_place == []
    assert settled.status.phase == Phase.RUNNING
    assert settled.status.workers.running == 4


def test_a_second_narrow_restart_keeps_the_slice_kept_before():
    job, live = running(make_job(tpu=MULTISLICE, runPolicy=NARROW))
    job = advance(job, step(job, pools=ready_pools(job), service_exists=True, pods=fail(live, 1, 0)))
    now = live[:2] + pods(job, 1, "Running")[2:]
    job = advance(job, step(job, pools=ready_pools(job), service_exists=True, pods=now, now=NOW))
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=fail(now, 1, 1))
    assert decision.status.slice_attempts == [0, 2]
    assert naming.pod_name(job, 0, 0, 0) not in decision.delete_pods


@pytest.mark.parametrize(
    ("spec", "failed_slices"),
    [
        ({"tpu": MULTISLICE}, [1]),  # Recreate, the default: the whole job
        ({"tpu": MULTISLICE, "runPolicy": NARROW}, [0, 1]),  # failures in two slices
        (
            {"tpu": {"type": "v5p", "topology": "2x2x2"}, "runPolicy": NARROW},
            [0],
        ),  # one slice: nothing to keep
    ],
)
def test_other_failures_restart_the_whole_job(spec, failed_slices):
    job, live = running(make_job(**spec))
    for slice_index in failed_slices:
        live = fail(live, slice_index, 0)
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=live)
    assert decision.status.phase == Phase.RESTARTING
    assert decision.status.slice_attempts == []
    assert decision.restart_in_place == []
    assert sorted(decision.delete_pods) == sorted(p.name for p in live if p.phase == "Running")


def test_a_failure_in_one_slice_restarts_the_whole_job_when_another_slice_already_ended():
    """Slice 0's workers finished their run (Succeeded) as slice 1's worker failed at the end: they have no
    training process to restart in place, and slice 1's new processes would wait for them."""
    job, live = running(make_job(tpu=MULTISLICE, runPolicy=NARROW))
    ended = tuple(
        dataclasses.replace(p, phase="Succeeded", exit_code=0) if p.slice == 0 and p.worker == 0 else p
        for p in live
    )
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=fail(ended, 1, 0))
    status = decision.status
    assert (status.phase, status.reason, status.attempt) == (Phase.RESTARTING, Reason.WORKER_FAILED, 1)
    assert status.slice_attempts == []
    assert decision.restart_in_place == []
    assert "restarting all workers" in status.message
    # The workers still running go; the ended ones stay for their logs.
    assert sorted(decision.delete_pods) == [naming.pod_name(job, 0, 1, 0), naming.pod_name(job, 1, 1, 0)]


def test_a_node_lost_in_one_slice_recreates_that_slice_uncounted():
    job, live = running(make_job(tpu=MULTISLICE, runPolicy=NARROW))
    gone = tuple(p for p in live if (p.slice, p.worker) != (1, 1))
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=gone)
    assert decision.status.reason == Reason.NODE_LOST
    assert decision.status.slice_attempts == [0, 1]
    assert decision.status.application_restarts == 0
    assert decision.delete_pods == [naming.pod_name(job, 1, 0, 0)]


def test_narrow_pods_carry_the_attempt_file_and_others_do_not():
    job = make_job(tpu=MULTISLICE, runPolicy=NARROW)
    pod = render.pod(job, Cluster("p", "us-central2", "c", "us-central2-b"), 1, 0, 3)
    assert pod["metadata"]["annotations"]["tpujob.dev/restart-attempt"] == "3"
    volume = next(v for v in pod["spec"]["volumes"] if "downwardAPI" in v)
    assert volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['tpujob.dev/restart-attempt']"
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["TPUJOB_RESTART_ATTEMPT_FILE"] == "/etc/tpujob/restart/attempt"
    plain = render.pod(make_job(tpu=MULTISLICE), Cluster("p", "us-central2", "c", "us-central2-b"), 1, 0)
    assert "TPUJOB_RESTART_ATTEMPT_FILE" not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}


def _heartbeat(seconds):
    return s.timestamp(NOW + dt.timedelta(seconds=seconds))


@pytest.mark.parametrize("condition", [Reason.MEGASCALE_HANG, Reason.SLICE_ERROR])
def test_a_hardware_condition_on_a_running_node_restarts_the_job_uncounted(condition):
    job, live = running(make_job(tpu=MULTISLICE, runPolicy={"maxRestarts": 0}))
    faults = {"n-1-0": (s.NodeFault(condition.value, _heartbeat(5), "libtpu says so"),)}
    later = NOW + dt.timedelta(seconds=6)
    decision = step(
        job, pools=ready_pools(job), service_exists=True, pods=live, node_faults=faults, now=later
    )
    status = decision.status
    assert (status.phase, status.reason) == (Phase.RESTARTING, condition)
    assert status.application_restarts == 0 and status.restarts_by_reason == {condition.value: 1}
    assert "node n-1-0 (slice 1 worker 0): libtpu says so" in status.message
    assert sorted(decision.delete_pods) == sorted(p.name for p in live)


def test_a_hardware_condition_older_than_the_running_attempt_is_a_previous_attempts():
    job, live = running(make_job(tpu=MULTISLICE))
    old = {"n-1-0": (s.NodeFault(Reason.MEGASCALE_HANG.value, _heartbeat(0)),)}  # not after Running began
    other = {"n-9-9": (s.NodeFault(Reason.MEGASCALE_HANG.value, _heartbeat(5)),)}  # not the job's node
    unknown = {"n-1-0": (s.NodeFault("KernelDeadlock", _heartbeat(5)),)}
    for faults in (old, other, unknown):
        decision = step(job, pools=ready_pools(job), service_exists=True, pods=live, node_faults=faults)
        assert decision.status.phase == Phase.RUNNING


class EventsOnly:
    """The one read volume_problems makes: a pod's Events."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events
        self.asked: list[str] = []

    def list_pod_events(self, namespace: str, pod: str) -> list[dict]:
        self.asked.append(pod)
        return self.events


def _observer(api):
    from tpujob.reconciler.memory import JobMemory
    from tpujob.reconciler.observe import Observer, Settings

    return Observer(Cluster("p", "us-central2", "c", "us-central2-b"), api, None, JobMemory(), Settings())


def test_a_worker_stuck_creating_shows_the_kubelets_failed_mount_then_startup_timeout_frees_the_pools():
    starting = make_job(tpu=MULTISLICE, runPolicy={"startupTimeoutSeconds": 120})
    starting = advance(starting, step(starting, pools=ready_pools(starting), service_exists=True))
    assert starting.status.phase == Phase.STARTING
    began = s.timestamp(NOW)
    creating = tuple(
        dataclasses.replace(
            p, waiting_container="trainer", waiting_reason="ContainerCreating", started_at=began
        )
        for p in pods(starting, 0, "Pending")
    )
    words = 'MountVolume.SetUp failed for volume "token" : secret "hf-token" not found'
    api = EventsOnly(
        [
            {"reason": "Scheduled", "message": "assigned", "lastTimestamp": began},
            {"reason": "FailedMount", "message": words, "lastTimestamp": began},
            {
                "reason": "FailedMount",
                "message": "Unable to attach or mount volumes: ...",
                "lastTimestamp": began,
            },
        ]
    )
    observer = _observer(api)
    early = observer.volume_problems(starting, list(creating), NOW + dt.timedelta(seconds=10))
    assert api.asked == [] and early == list(creating)  # within the startup grace: not even asked
    later = NOW + dt.timedelta(seconds=31)
    seen = observer.volume_problems(starting, list(creating), later)
    assert api.asked == [naming.pod_name(starting, 0, 0, 0)]  # one read, for the first stuck worker
    decision = step(starting, pools=ready_pools(starting), service_exists=True, pods=tuple(seen), now=later)
    assert (decision.status.phase, decision.status.reason) == (Phase.STARTING, "FailedMount")
    assert decision.status.message == f"pod {seen[0].name} cannot set up its volumes: {words}"
    assert any(e.type == "Warning" and e.reason == "FailedMount" for e in decision.events)
    timed_out = step(
        advance(starting, decision),
        pools=ready_pools(starting),
        service_exists=True,
        pods=tuple(seen),
        now=NOW + dt.timedelta(seconds=121),
    )
    assert (timed_out.status.phase, timed_out.status.reason) == (Phase.FAILED, Reason.STARTUP_TIMEOUT)
    assert "FailedMount: pod" in timed_out.status.message
    assert sorted(timed_out.delete_pools) == sorted(p.name for p in ready_pools(starting))
