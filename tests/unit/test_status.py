"""The life cycle, decided purely: snapshot in, actions and status out."""

import dataclasses
import datetime as dt

import pytest

from tests.manifests import base_job
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.render import naming

NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.UTC)


def make_job(status=None, **spec):
    manifest = base_job("train", **spec)
    manifest["metadata"].update(uid="u1", generation=1)
    job = parse_tpujob(manifest)
    return job.model_copy(update={"status": status}) if status is not None else job


def pods(job, attempt, phase, n=None, **extra):
    workers = s.expected_workers(job)[:n]
    return tuple(
        s.PodView(naming.pod_name(job, sl, w, attempt), sl, w, attempt, phase, **extra) for sl, w in workers
    )


def ready_pools(job):
    return tuple(s.PoolView(i, naming.node_pool_name(job, i), "RUNNING") for i in range(job.spec.tpu.slices))


def step(job, **observed):
    observed.setdefault("now", NOW)
    return s.decide(s.Observed(job=job, **observed))


def advance(job, decision):
    return job.model_copy(update={"status": decision.status})


def test_new_job_creates_one_pool_per_slice_and_waits():
    job = make_job(tpu={"type": "v6e", "topology": "4x4", "slices": 2})
    decision = step(job, pools=(s.PoolView(0, naming.node_pool_name(job, 0), s.POOL_MISSING),))
    assert decision.create_pools == [0, 1]
    assert decision.create_pods == []
    assert decision.status.phase == Phase.PROVISIONING
    assert decision.requeue_after == s.DEFAULT_POLL_PROVISIONING_SECONDS
    assert [p.state for p in decision.status.node_pools] == ["PROVISIONING", "PROVISIONING"]
    assert decision.status.start_time == "2026-11-21T12:00:00Z"


def test_a_new_job_starts_in_one_pass_with_one_event_and_no_rewrite_when_its_pods_appear():
    """Pending on the way to Starting never reaches the status: one event, for Starting. The pods just
    created count as pending, so their first watch events leave the status as it is (no second write)."""
    job = make_job(tpu={"type": "v5p", "topology": "2x2x4"}, nodePool={"policy": "existing"})
    first = step(job)
    assert first.status.phase == Phase.STARTING
    assert [e.reason for e in first.events] == ["Starting"]
    assert first.status.workers.pending == 4
    names = frozenset(naming.pod_name(job, sl, w, 0) for sl, w in first.create_pods)
    in_flight = step(advance(job, first), pods=pods(job, 0, "Pending", n=1), pods_in_flight=names)
    seen = step(advance(job, first), pods=pods(job, 0, "Pending"))
    for later in (in_flight, seen):
        assert later.status == first.status
        assert later.events == [] and later.create_pods == []


def test_pools_running_creates_service_and_every_pod():
    job = make_job(tpu={"type": "v5p", "topology": "2x2x4"})
    decision = step(job, pools=ready_pools(job))
    assert decision.create_service
    assert decision.create_pods == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert decision.status.phase == Phase.STARTING


def test_pods_in_flight_are_not_created_twice():
    job = make_job(tpu={"type": "v5p", "topology": "2x2x4"})
    in_flight = frozenset(naming.pod_name(job, 0, w, 0) for w in range(4))
    decision = step(job, pools=ready_pools(job), service_exists=True, pods_in_flight=in_flight)
    assert decision.create_pods == []
    assert not decision.create_service


def test_all_running_then_all_succeeded_releases_the_pools():
    job = make_job()
    running = step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running"))
    assert running.status.phase == Phase.RUNNING
    assert running.status.running_time
    job = advance(job, running)
    done = step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Succeeded"))
    assert done.status.phase == Phase.SUCCEEDED
    assert done.delete_pools == [naming.node_pool_name(job, 0)]
    assert done.delete_pods == []  # finished pods stay for their logs
    assert any(e.reason == "Succeeded" for e in done.events)
    job = advance(job, done)
    gone = step(job, pools=(s.PoolView(0, naming.node_pool_name(job, 0), s.POOL_MISSING),))
    assert gone.delete_pools == []
    assert gone.status.node_pools[0].state == s.POOL_DELETED
    assert gone.status.phase == Phase.SUCCEEDED


def test_application_failure_restarts_the_whole_group_and_counts():
    job = make_job(tpu={"type": "v5p", "topology": "2x2x4"})
    job = advance(job, step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running")))
    observed = list(pods(job, 0, "Running"))
    observed[2] = s.PodView(observed[2].name, 0, 2, 0, "Failed", reason="Error", exit_code=1)
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=tuple(observed))
    assert decision.status.phase == Phase.RESTARTING
    assert decision.status.reason == Reason.WORKER_FAILED
    # live pods go; the failed one stays for its logs
    assert sorted(decision.delete_pods) == sorted(p.name for p in observed if p.phase == "Running")
    assert (decision.status.attempt, decision.status.restarts, decision.status.application_restarts) == (
        1,
        1,
        1,
    )
    assert decision.status.restarts_by_reason == {Reason.WORKER_FAILED: 1}
    assert any(e.type == "Warning" and e.reason == Reason.WORKER_FAILED for e in decision.events)
    # next passes: old pods terminating; the new attempt waits out the backoff, then starts
    job = advance(job, decision)
    terminating = tuple(s.PodView(p.name, p.slice, p.worker, 0, p.phase, deleting=True) for p in observed)
    early = step(
        job, pools=ready_pools(job), service_exists=True, pods=terminating, now=NOW + dt.timedelta(seconds=4)
    )
    assert early.create_pods == []
    assert early.requeue_after == 6
    again = step(
        job, pools=ready_pools(job), service_exists=True, pods=terminating, now=NOW + dt.timedelta(seconds=10)
    )
    assert again.create_pods == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert again.status.phase == Phase.STARTING


def test_application_restart_backoff_doubles_and_preemption_does_not_wait():
    restarting = TPUJobStatus(
        phase=Phase.RESTARTING,
        reason=Reason.WORKER_FAILED,
        attempt=3,
        application_restarts=3,
        last_restart_time="2026-11-21T12:00:00Z",
        start_time="2026-11-21T11:00:00Z",
    )
    job = make_job(status=restarting)
    waiting = step(job, pools=ready_pools(job), service_exists=True, now=NOW + dt.timedelta(seconds=39))
    assert waiting.create_pods == [] and waiting.requeue_after == 1  # 10 s x 2^2
    preempted = make_job(status=restarting.model_copy(update={"reason": Reason.PREEMPTED}))
    assert step(preempted, pools=ready_pools(job), service_exists=True).create_pods == [(0, 0)]


def lose_a_worker(job, now):
    """The job's workers run, then one vanishes (a lost node, a deleted pod): the job restarting."""
    running = step(
        job,
        pools=ready_pools(job),
        service_exists=True,
        pods=pods(job, job.status.attempt, "Running"),
        now=now,
    )
    job = advance(job, running)
    lost = step(
        job,
        pools=ready_pools(job),
        service_exists=True,
        pods=pods(job, job.status.attempt, "Running", n=3),
        now=now,
    )
    assert lost.status.reason == Reason.NODE_LOST and lost.status.application_restarts == 0
    return advance(job, lost)


def test_uncounted_restarts_in_a_row_back_off_and_a_quiet_spell_forgets_them():
    """A tenant who deletes its own pods again and again: each deletion is a lost node to the operator (an
    uncounted restart), which once meant N deletes and N creates at once, every time, on the shared API
    budget. The first restart after a quiet spell is at once; each one within 10 minutes of the one before
    waits 10 s, 20 s, 40 s ... (the application restarts' back-off)."""
    job = make_job(tpu={"type": "v5p", "topology": "2x2x4"})
    job = advance(job, step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running")))
    now = NOW
    waits = []
    for _ in range(4):
        job = lose_a_worker(job, now)
        now += dt.timedelta(seconds=1)
        again = step(job, pools=ready_pools(job), service_exists=True, now=now)
        waits.append(0 if again.create_pods else again.requeue_after)
    assert waits == [0, 9, 19, 39]
    assert job.status.rapid_restarts == 3
    later = now + dt.timedelta(seconds=601)
    job = lose_a_worker(job, later)
    assert job.status.rapid_restarts == 0
    assert step(job, pools=ready_pools(job), service_exists=True, now=later).create_pods


@pytest.mark.parametrize(
    ("reason", "exit_code"),
    [("Terminated", None), ("NodeShutdown", None), ("Evicted", None), ("Terminated", 143)],
)
def test_preemption_restarts_without_spending_the_budget(reason, exit_code):
    job = make_job(runPolicy={"maxRestarts": 0})
    job = advance(job, step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running")))
    failed = pods(job, 0, "Failed", reason=reason, exit_code=exit_code)
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=failed)
    assert decision.status.phase == Phase.RESTARTING
    assert decision.status.reason == Reason.PREEMPTED
    assert decision.status.application_restarts == 0
    assert decision.status.restarts_by_reason == {Reason.PREEMPTED: 1}


def test_vanished_pods_are_a_node_loss_restart():
    job = make_job(tpu={"type": "v5p", "topology": "2x2x4"}, runPolicy={"maxRestarts": 0})
    job = advance(job, step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running")))
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running", n=3))
    assert decision.status.reason == Reason.NODE_LOST
    assert decision.status.application_restarts == 0


def test_spent_budget_fails_with_backoff_limit_exceeded():
    job = make_job(
        runPolicy={"maxRestarts": 1},
        status=TPUJobStatus(
            phase=Phase.RUNNING, attempt=1, application_restarts=1, start_time="2026-11-21T11:59:00Z"
        ),
    )
    failed = pods(job, 1, "Failed", exit_code=1)  # not 2: the default failurePolicy fails that at once
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=failed)
    assert decision.status.phase == Phase.FAILED
    assert decision.status.reason == Reason.BACKOFF_LIMIT
    assert decision.delete_pools == [naming.node_pool_name(job, 0)]
    assert decision.status.completion_time


def test_deadline_fails_the_job_and_releases_everything():
    job = make_job(
        runPolicy={"activeDeadlineSeconds": 60},
        status=TPUJobStatus(phase=Phase.RUNNING, start_time="2026-11-21T11:58:00Z"),
    )
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running"))
    assert (decision.status.phase, decision.status.reason) == (Phase.FAILED, Reason.DEADLINE)
    assert decision.delete_pods == [naming.pod_name(job, 0, 0, 0)]
    assert decision.delete_pools


def test_deadline_not_reached_requeues_for_it():
    job = make_job(
        runPolicy={"activeDeadlineSeconds": 600},
        status=TPUJobStatus(phase=Phase.RUNNING, start_time="2026-11-21T11:58:00Z"),
    )
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running"))
    assert decision.status.phase == Phase.RUNNING
    assert decision.requeue_after == 480


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (s.GKEError(Reason.QUOTA, "Quota 'TPU_V5P' exceeded"), Reason.QUOTA),
        (s.GKEError(Reason.GKE_BUSY, "Cluster is running incompatible operation"), Reason.GKE_BUSY),
    ],
)
def test_create_errors_show_their_reason_while_retrying(error, reason):
    job = make_job()
    decision = step(job, pools=(), gke_errors={0: error})
    assert decision.create_pools == []
    assert decision.status.phase == Phase.PROVISIONING
    assert decision.status.reason == reason
    assert decision.requeue_after is not None


STOCKOUT_MESSAGE = "[GCE_STOCKOUT]: The zone does not have enough resources available to fulfill the request."


@pytest.mark.parametrize(
    ("condition", "reason"), [("GCE_STOCKOUT", Reason.STOCKOUT), ("GCE_QUOTA_EXCEEDED", Reason.QUOTA)]
)
def test_a_pool_gke_retries_for_capacity_or_quota_is_waited_for_not_recreated(condition, reason):
    job = make_job()
    pool = s.PoolView(0, naming.node_pool_name(job, 0), "ERROR", STOCKOUT_MESSAGE, condition, retrying=True)
    decision = step(job, pools=(pool,))
    assert decision.delete_pools == [] and decision.create_pools == []
    assert (decision.status.phase, decision.status.reason) == (Phase.PROVISIONING, reason)
    assert decision.status.message.endswith(STOCKOUT_MESSAGE)  # GKE's own words
    assert (decision.status.message == STOCKOUT_MESSAGE) == (
        reason == Reason.STOCKOUT
    )  # quota: + what to raise
    assert decision.events[-1].type == "Warning"
    assert decision.status.node_pools[0].condition == condition
    # Minutes later, GKE still retrying: still waiting, no event again, still no churn.
    later = step(advance(job, decision), pools=(pool,), now=NOW + dt.timedelta(minutes=30))
    assert (later.delete_pools, later.events, later.status.reason) == ([], [], reason)


def test_a_stockout_gke_gave_up_on_is_deleted_and_asked_for_again():
    job = make_job()
    pool = s.PoolView(
        0, naming.node_pool_name(job, 0), "ERROR", STOCKOUT_MESSAGE, "GCE_STOCKOUT", retrying=False
    )
    decision = step(job, pools=(pool,))
    assert decision.delete_pools == [pool.name]
    assert decision.status.reason == Reason.STOCKOUT
    # While GKE removes it, the stockout is still why the job waits; then the pool is asked for again.
    stopping = dataclasses.replace(pool, state=s.POOL_STOPPING, retrying=None)
    waiting = step(advance(job, decision), pools=(stopping,))
    assert (waiting.status.reason, waiting.delete_pools, waiting.events) == (Reason.STOCKOUT, [], [])
    gone = step(advance(job, waiting), pools=(dataclasses.replace(pool, state=s.POOL_MISSING),))
    assert gone.create_pools == [0]
    assert gone.status.reason == Reason.PROVISIONING


def test_an_error_message_alone_is_not_read_as_a_stockout():
    """Codes, not words: an ERROR pool without a capacity condition is a broken pool (grace, then lost)."""
    job = make_job()
    pool = s.PoolView(0, naming.node_pool_name(job, 0), "ERROR", "Requested resource is exhausted")
    decision = step(job, pools=(pool,))
    assert decision.delete_pools == []
    assert decision.status.reason == Reason.POOL_LOST


def test_a_permanent_refusal_shows_gke_message_and_names_no_retry_storm():
    job = make_job()
    refusal = s.GKEError(
        Reason.POOL_REJECTED,
        "Auto_upgrade cannot be false when release_channel REGULAR is set.",
        permanent=True,
    )
    decision = step(job, pools=(), gke_errors={0: refusal})
    assert decision.create_pools == []
    assert (decision.status.phase, decision.status.reason) == (Phase.PROVISIONING, Reason.POOL_REJECTED)
    assert decision.status.message == refusal.message
    condition = next(c for c in decision.status.conditions if c.type == "NodePoolsReady")
    assert (condition.reason, condition.message) == (Reason.POOL_REJECTED, refusal.message)
    assert decision.events[-1].type == "Warning"


def test_a_permanent_refusal_outranks_a_transient_one_in_the_status():
    job = make_job(tpu={"type": "v6e", "topology": "4x4", "slices": 2})
    errors = {
        0: s.GKEError(Reason.GKE_BUSY, "Cluster is running incompatible operation"),
        1: s.GKEError(Reason.POOL_REJECTED, "bad request", permanent=True),
    }
    assert step(job, pools=(), gke_errors=errors).status.reason == Reason.POOL_REJECTED


def test_rejected_requests_back_off_exponentially_up_to_a_cap():
    delays = [s.rejected_backoff_seconds(n) for n in range(1, 8)]
    assert delays[:3] == [30.0, 60.0, 120.0]
    assert delays == sorted(delays) and delays[-1] == s.REJECTED_BACKOFF_CAP_SECONDS
    # TPUJOB_REFUSED_BACKOFF_SECONDS sets the first wait; the cap stays 20 of them.
    assert [s.rejected_backoff_seconds(n, base=1.0) for n in (1, 2, 3, 6, 9)] == [1.0, 2.0, 4.0, 20.0, 20.0]


def test_provisioning_timeout_fails_the_job_and_gives_the_pools_back():
    job = make_job(runPolicy={"provisioningTimeoutSeconds": 600})
    pool = s.PoolView(
        0, naming.node_pool_name(job, 0), "ERROR", STOCKOUT_MESSAGE, "GCE_STOCKOUT", retrying=True
    )
    waiting = step(job, pools=(pool,))
    assert waiting.status.provisioning_since == "2026-11-21T12:00:00Z"
    assert waiting.requeue_after == s.DEFAULT_POLL_PROVISIONING_SECONDS
    # The cadence is the operator's setting (TPUJOB_POLL_PROVISIONING_SECONDS), passed in with the facts.
    assert step(job, pools=(pool,), poll_provisioning_seconds=0.2).requeue_after == 0.2
    still = step(advance(job, waiting), pools=(pool,), now=NOW + dt.timedelta(seconds=599))
    assert still.status.phase == Phase.PROVISIONING
    timed_out = step(advance(job, still), pools=(pool,), now=NOW + dt.timedelta(seconds=600))
    assert (timed_out.status.phase, timed_out.status.reason) == (Phase.FAILED, Reason.PROVISIONING_TIMEOUT)
    assert "GCE_STOCKOUT" in timed_out.status.message
    assert timed_out.delete_pools == [pool.name]
    assert timed_out.create_pools == []


def test_without_a_provisioning_timeout_the_job_waits_as_long_as_it_takes():
    job = make_job()
    pool = s.PoolView(
        0, naming.node_pool_name(job, 0), "ERROR", STOCKOUT_MESSAGE, "GCE_STOCKOUT", retrying=True
    )
    first = step(job, pools=(pool,))
    days = step(advance(job, first), pools=(pool,), now=NOW + dt.timedelta(days=3))
    assert days.status.phase == Phase.PROVISIONING


def test_unschedulable_pods_show_the_scheduler_reason_after_the_grace():
    job = make_job(nodePool={"policy": "existing"})
    message = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    started = step(job)
    pending = pods(job, 0, "Pending", unschedulable=message, unschedulable_since="2026-11-21T12:00:00Z")
    early = step(advance(job, started), pods=pending, service_exists=True, unschedulable_grace_seconds=30)
    assert early.status.reason == "Starting"
    assert early.requeue_after == 30
    late = step(
        advance(job, early), pods=pending, service_exists=True, unschedulable_grace_seconds=30,
        now=NOW + dt.timedelta(seconds=30),
    )  # fmt: skip
    assert (late.status.phase, late.status.reason) == (Phase.STARTING, Reason.UNSCHEDULABLE)
    assert message in late.status.message
    assert late.events[-1].type == "Warning"


def test_transient_error_state_is_tolerated_within_the_grace():
    job = make_job()
    pool = s.PoolView(0, naming.node_pool_name(job, 0), "ERROR", "internal error")
    first = step(job, pools=(pool,))
    assert first.delete_pools == []
    later = step(advance(job, first), pools=(pool,), now=NOW + s.POOL_ERROR_GRACE)
    assert later.delete_pools == [pool.name]
    assert later.status.reason == Reason.POOL_LOST


def test_existing_policy_skips_pools():
    job = make_job(nodePool={"policy": "existing"})
    decision = step(job)
    assert decision.create_pools == []
    assert decision.create_pods == [(0, 0)]


def test_suspend_releases_and_resume_starts_a_fresh_attempt():
    job = make_job(
        runPolicy={"suspend": True},
        status=TPUJobStatus(phase=Phase.RUNNING, start_time="2026-11-21T11:00:00Z"),
    )
    suspended = step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 0, "Running"))
    assert suspended.status.phase == Phase.SUSPENDED
    assert suspended.delete_pods and suspended.delete_pools
    resumed_job = make_job(status=suspended.status)
    resumed = step(resumed_job, pools=(), service_exists=True)
    assert resumed.status.attempt == 1
    assert resumed.status.start_time == "2026-11-21T12:00:00Z"
    assert resumed.create_pools == [0]
    assert resumed.status.restarts == 0


def test_ttl_deletes_the_finished_job_when_due():
    done = TPUJobStatus(phase=Phase.SUCCEEDED, completion_time="2026-11-21T11:59:30Z")
    job = make_job(runPolicy={"ttlSecondsAfterFinished": 60}, status=done)
    early = step(job, pools=())
    assert not early.delete_job and early.requeue_after == 30
    assert step(job, pools=(), now=NOW + dt.timedelta(seconds=30)).delete_job


def test_a_newer_attempt_found_on_the_cluster_is_adopted():
    job = make_job(status=TPUJobStatus(phase=Phase.RESTARTING, attempt=0, start_time="2026-11-21T11:00:00Z"))
    decision = step(job, pools=ready_pools(job), service_exists=True, pods=pods(job, 1, "Pending"))
    assert decision.status.attempt == 1
    assert decision.create_pods == []


def test_fixed_invalid_spec_starts_over():
    job = make_job(status=TPUJobStatus(phase=Phase.FAILED, reason=Reason.INVALID_SPEC))
    decision = step(job, pools=())
    assert decision.status.phase == Phase.PROVISIONING
    assert decision.create_pools == [0]


def test_condition_transition_time_moves_only_on_flip():
    first = s.set_condition([], "Running", True, "A", "m", NOW)
    later = s.set_condition(first, "Running", True, "B", "m2", NOW + dt.timedelta(minutes=5))
    assert later[0].last_transition_time == first[0].last_transition_time
    flipped = s.set_condition(later, "Running", False, "C", "m3", NOW + dt.timedelta(minutes=9))
    assert flipped[0].last_transition_time == "2026-11-21T12:09:00Z"


def flex_job(status=None, **run_policy):
    return make_job(
        status=status,
        tpu={"type": "v5p", "topology": "2x2x2"},
        capacity={"mode": "flexStart", "maxRunDurationSeconds": 3600},
        runPolicy={"maintenanceLeadSeconds": 300, **run_policy},
    )


def test_flex_start_pods_waiting_on_the_empty_pool_are_queued_for_capacity_not_unschedulable():
    job = flex_job()
    started = step(job, pools=ready_pools(job))
    assert started.create_pods == [(0, 0), (0, 1)]
    waiting_pods = pods(job, 0, "Pending", unschedulable="0/3 nodes are available", unschedulable_since="x")
    queued = step(advance(job, started), pools=ready_pools(job), pods=waiting_pods, service_exists=True)
    assert (queued.status.phase, queued.status.reason) == (Phase.PROVISIONING, Reason.WAITING_FOR_CAPACITY)
    assert queued.status.provisioning_since == "2026-11-21T12:00:00Z"
    assert queued.events[-1].type == "Normal"  # waiting is what flex-start is
    later = step(
        advance(job, queued), pools=ready_pools(job), pods=waiting_pods, service_exists=True,
        now=NOW + dt.timedelta(hours=5),
    )  # fmt: skip
    assert later.status.provisioning_since == queued.status.provisioning_since  # the queue clock runs on
    assert later.status.to_wire() == queued.status.to_wire()  # nothing to write while the queue lasts


def test_flex_start_restarts_on_a_new_slice_before_the_run_duration_ends():
    job = flex_job()
    running = step(job, pools=ready_pools(job), pods=pods(job, 0, "Running"), service_exists=True)
    assert running.status.phase == Phase.RUNNING
    assert running.status.run_deadline == "2026-11-21T13:00:00Z"  # an hour from now
    assert running.requeue_after == 3600 - 300  # checkpoint 5 minutes ahead
    at_lead = step(
        advance(job, running), pools=ready_pools(job), pods=pods(job, 0, "Running"), service_exists=True,
        now=NOW + dt.timedelta(seconds=3300),
    )  # fmt: skip
    assert (at_lead.status.phase, at_lead.status.reason) == (Phase.RESTARTING, Reason.RUN_DURATION)
    assert sorted(at_lead.delete_pods) == sorted(
        p.name for p in pods(job, 0, "Running")
    )  # SIGTERM: checkpoint
    assert at_lead.delete_pools == [naming.node_pool_name(job, 0)]  # the next slice is queued anew
    assert (at_lead.status.application_restarts, at_lead.status.restarts_by_reason) == (
        0,
        {"RunDurationReached": 1},
    )
    assert at_lead.status.run_deadline is None


def test_flex_start_counts_the_run_duration_from_the_slices_nodes_while_its_workers_still_start():
    """GKE deletes flex-start VMs maxRunDuration after their creation: a slow start does not move it."""
    job = flex_job()
    created = NOW - dt.timedelta(minutes=20)
    starting = step(
        job, pools=ready_pools(job), pods=pods(job, 0, "Pending", node="n1"), service_exists=True,
        slice_created=created,
    )  # fmt: skip
    assert starting.status.phase == Phase.STARTING
    assert starting.status.run_deadline == "2026-11-21T12:40:00Z"  # the nodes' creation plus an hour
    assert starting.requeue_after is not None and starting.requeue_after <= 40 * 60 - 300  # 5 min ahead
    late = step(
        job, pools=ready_pools(job), pods=pods(job, 0, "Running"), service_exists=True,
        slice_created=NOW - dt.timedelta(minutes=58),
    )  # fmt: skip
    assert (late.status.phase, late.status.reason) == (Phase.RESTARTING, Reason.RUN_DURATION)  # past the lead


def test_a_stockout_past_the_fallback_time_moves_the_slices_to_the_next_zone():
    zones = ("us-east5-a", "us-east5-b")
    job = make_job(
        tpu={"type": "v6e", "topology": "4x4"}, capacity={"zones": list(zones), "zoneFallbackSeconds": 600}
    )
    first = step(job, pools=(), zones=zones)
    assert first.status.zone == "us-east5-a" and first.create_pools == [0]
    name = naming.node_pool_name(job, 0)
    stocked = s.PoolView(0, name, "ERROR", STOCKOUT_MESSAGE, "GCE_STOCKOUT", retrying=True, zone="us-east5-a")
    waiting = step(advance(job, first), pools=(stocked,), zones=zones, now=NOW + dt.timedelta(seconds=599))
    assert (waiting.status.zone, waiting.delete_pools) == ("us-east5-a", [])
    moved = step(advance(job, waiting), pools=(stocked,), zones=zones, now=NOW + dt.timedelta(seconds=600))
    assert moved.status.zone == "us-east5-b"
    assert moved.delete_pools == [name] and moved.create_pools == []
    assert any(e.reason == Reason.ZONE_FALLBACK and e.type == "Warning" for e in moved.events)
    # GKE refuses the delete while it retries: asked again each pass, nothing made in the new zone meanwhile.
    again = step(advance(job, moved), pools=(stocked,), zones=zones, now=NOW + dt.timedelta(seconds=605))
    assert (again.delete_pools, again.create_pools) == ([name], [])
    gone = dataclasses.replace(stocked, state=s.POOL_MISSING, zone="")
    created = step(advance(job, again), pools=(gone,), zones=zones, now=NOW + dt.timedelta(seconds=700))
    assert created.create_pools == [0]
    assert created.status.node_pools[0].zone == "us-east5-b"


def test_announced_maintenance_shows_then_restarts_the_job_ahead_of_time_without_counting():
    job = make_job(
        tpu={"type": "v5p", "topology": "2x2x2"}, runPolicy={"maxRestarts": 0, "maintenanceLeadSeconds": 300}
    )
    running = pods(job, 0, "Running", node="node-a")
    first = step(job, pools=ready_pools(job), pods=running, service_exists=True)
    assert first.status.phase == Phase.RUNNING and first.status.maintenance_time is None
    at = int((NOW + dt.timedelta(hours=2)).timestamp())
    noticed = step(advance(job, first), pools=ready_pools(job), pods=running, service_exists=True,
                   maintenance={"node-a": at})  # fmt: skip
    assert noticed.status.maintenance_time == "2026-11-21T14:00:00Z"
    assert [e.reason for e in noticed.events] == [Reason.MAINTENANCE_SCHEDULED]
    assert noticed.requeue_after == 2 * 3600 - 300
    due = step(advance(job, noticed), pools=ready_pools(job), pods=running, service_exists=True,
               maintenance={"node-a": at}, now=NOW + dt.timedelta(seconds=2 * 3600 - 300))  # fmt: skip
    assert (due.status.phase, due.status.reason) == (Phase.RESTARTING, Reason.MAINTENANCE)
    assert due.status.restarts_by_reason == {"Maintenance": 1} and due.status.application_restarts == 0
    assert due.delete_pools == []  # the hosts come back after the maintenance


def test_maintenance_stops_the_workers_at_least_their_grace_period_ahead():
    """A lead shorter than the workers' grace period would take the host while they still save: the operator
    stops them the longer of the two ahead."""
    job = make_job(
        tpu={"type": "v5p", "topology": "2x2x2"},
        trainer={"image": "tpujob-trainer:test", "terminationGracePeriodSeconds": 600},
        runPolicy={"maintenanceLeadSeconds": 300},
    )
    assert job.spec.stop_lead_seconds == 600
    running = pods(job, 0, "Running", node="node-a")
    first = step(job, pools=ready_pools(job), pods=running, service_exists=True)
    at = int((NOW + dt.timedelta(hours=2)).timestamp())
    noticed = step(advance(job, first), pools=ready_pools(job), pods=running, service_exists=True,
                   maintenance={"node-a": at})  # fmt: skip
    assert noticed.requeue_after == 2 * 3600 - 600
    due = step(advance(job, noticed), pools=ready_pools(job), pods=running, service_exists=True,
               maintenance={"node-a": at}, now=NOW + dt.timedelta(seconds=2 * 3600 - 600))  # fmt: skip
    assert (due.status.phase, due.status.reason) == (Phase.RESTARTING, Reason.MAINTENANCE)


DENIED = "GKE refused container.operations.list on projects/p/locations/l (...): grant the operator's ..."


def test_an_operation_read_gke_refused_is_said_in_the_status_whether_the_pools_wait_or_run():
    job = make_job()
    name = naming.node_pool_name(job, 0)
    stocked = s.PoolView(0, name, "ERROR", STOCKOUT_MESSAGE, "GCE_STOCKOUT", retrying=None, denied=DENIED)
    waiting = step(job, pools=(stocked,))
    assert waiting.delete_pools == [] and waiting.status.reason == Reason.STOCKOUT
    assert waiting.status.message == f"{STOCKOUT_MESSAGE}; {DENIED}"
    running = step(job, pools=(s.PoolView(0, name, "RUNNING", denied=DENIED),))
    ready = next(c for c in running.status.conditions if c.type == "NodePoolsReady")
    assert ready.status == "True" and ready.message.endswith(DENIED)
