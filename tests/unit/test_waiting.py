"""status/waiting.py: since when a job has waited in its phase, from its status' own times. Every waiting
phase a decision ends in has its time (else the gauge, and the alert on it, would miss the job)."""

from __future__ import annotations

import datetime as dt

from tests.manifests import base_job
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.job import TPUJob
from tpujob.api.status import Phase, QueueStatus, TPUJobStatus
from tpujob.render import naming
from tpujob.status.waiting import WAITING_PHASES, waiting_since

NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.UTC)


def make_job(**spec: object) -> TPUJob:
    manifest = base_job("train", **spec)
    manifest["metadata"].update(uid="u1", generation=1)
    return parse_tpujob(manifest)


def pass_at(job: TPUJob, minutes: float, **observed: object) -> TPUJob:
    seen = s.Observed(job=job, now=NOW + dt.timedelta(minutes=minutes), **observed)  # type: ignore[arg-type]
    return job.model_copy(update={"status": s.decide(seen).status})


def pods(job: TPUJob, phase: str, **extra: object) -> tuple[s.PodView, ...]:
    return tuple(
        s.PodView(naming.pod_name(job, sl, w, job.status.attempt if job.status else 0), sl, w,
                  job.status.attempt if job.status else 0, phase, **extra)  # type: ignore[arg-type]
        for sl, w in s.expected_workers(job)
    )  # fmt: skip


def since(job: TPUJob) -> str | None:
    return waiting_since(job.status or TPUJobStatus())


def test_each_waiting_phase_counts_from_its_status_time_and_the_others_from_none():
    job = make_job(tpu={"type": "v5p", "topology": "2x2x4"})
    pool = (s.PoolView(0, naming.node_pool_name(job, 0), "PROVISIONING"),)
    ready = (s.PoolView(0, naming.node_pool_name(job, 0), "RUNNING"),)
    provisioning = pass_at(job, 0, pools=(s.PoolView(0, naming.node_pool_name(job, 0), s.POOL_MISSING),))
    assert provisioning.status and provisioning.status.phase == Phase.PROVISIONING
    assert since(pass_at(provisioning, 30, pools=pool)) == "2026-11-21T12:00:00Z"  # the wait goes on
    starting = pass_at(provisioning, 40, pools=ready, service_exists=True)
    assert starting.status and starting.status.phase == Phase.STARTING
    assert since(starting) == "2026-11-21T12:40:00Z"
    running = pass_at(starting, 45, pools=ready, service_exists=True, pods=pods(starting, "Running"))
    assert running.status and running.status.phase == Phase.RUNNING and since(running) is None
    failed = list(pods(running, "Running"))
    failed[0] = s.PodView(failed[0].name, 0, 0, 0, "Failed", reason="Error", exit_code=1)
    restarting = pass_at(running, 50, pools=ready, service_exists=True, pods=tuple(failed))
    assert restarting.status and restarting.status.phase == Phase.RESTARTING
    assert since(restarting) == "2026-11-21T12:50:00Z"
    assert waiting_since(TPUJobStatus(phase=Phase.PENDING, start_time="2026-11-21T11:00:00Z")) == (
        "2026-11-21T11:00:00Z"
    )
    assert {p for p in Phase if waiting_since(_every_time(p)) is not None} == set(WAITING_PHASES)
    queued = TPUJobStatus(
        phase=Phase.QUEUED, queue=QueueStatus(name="q", queued_since="2026-11-21T10:00:00Z")
    )
    assert waiting_since(queued) == "2026-11-21T10:00:00Z"


def test_a_flex_start_queue_goes_on_counting_the_same_wait():
    job = make_job(
        tpu={"type": "v5p", "topology": "2x2x2"},
        capacity={"mode": "flexStart", "maxRunDurationSeconds": 3600},
    )
    ready = (s.PoolView(0, naming.node_pool_name(job, 0), "RUNNING"),)
    started = pass_at(job, 0, pools=ready)
    queued_pods = pods(started, "Pending", unschedulable="0/3 nodes are available", unschedulable_since="x")
    queued = pass_at(started, 1, pools=ready, pods=queued_pods, service_exists=True)
    later = pass_at(queued, 300, pools=ready, pods=queued_pods, service_exists=True)
    assert later.status and later.status.phase == Phase.PROVISIONING
    assert since(later) == "2026-11-21T12:01:00Z"


def _every_time(phase: Phase) -> TPUJobStatus:
    when = "2026-11-21T12:00:00Z"
    return TPUJobStatus(
        phase=phase,
        start_time=when,
        provisioning_since=when,
        starting_since=when,
        last_restart_time=when,
        running_time=when,
        completion_time=when,
        queue=QueueStatus(name="team-a", queued_since=when),
    )
