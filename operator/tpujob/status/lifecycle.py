"""decide(): the life cycle of a job, from a snapshot of what was observed to a Decision."""

from __future__ import annotations

import dataclasses
import datetime as dt

from tpujob.api.spec import CapacityMode
from tpujob.api.status import ConditionType, Phase, Reason, TransitionReason, WorkerCounts
from tpujob.render import naming
from tpujob.status import bad_nodes, failures, progress, queue, recovery, shape, tenancy
from tpujob.status.builder import (
    Builder,
    begin_restart,
    count_workers,
    fail,
    is_finished,
    known_pools,
    limit_reached,
    record_pools,
    release,
)
from tpujob.status.capacity import (
    maintenance_due,
    run_duration_ends,
    start_run_clock,
    waiting_for_flex_capacity,
)
from tpujob.status.model import (
    POOL_DELETED,
    POOL_MISSING,
    RESTART_BACKOFF_CAP_SECONDS,
    TERMINAL_PHASES,
    Decision,
    Observed,
    PodView,
    expected_workers,
    is_current,
    parse_timestamp,
    serving_attempt,
    timestamp,
)
from tpujob.status.pools import place, pools_ready
from tpujob.status.recreation import restart_for_recreation
from tpujob.status.startup import startup_timed_out, why_not_started


def decide(observed: Observed) -> Decision:
    b = Builder(observed)
    _decide(b)
    queue.follow_up(b)  # Kueue: the Workload told what the pass decided (Finished, PodsReady, active)
    return b.finish()


def _decide(b: Builder) -> None:
    status = b.status
    _say_shape_refused(b)
    if status.phase in TERMINAL_PHASES and status.reason != Reason.INVALID_SPEC:
        _finished(b)
        return
    if status.reason == Reason.INVALID_SPEC:  # the spec was fixed: start over
        status.phase, status.reason, status.message = Phase.PENDING, "", ""
        status.conditions = [c for c in status.conditions if c.type != ConditionType.FAILED]
    if b.job.spec.run_policy.suspend:
        _suspend(b)
        return
    if status.phase == Phase.SUSPENDED:  # resumed: fresh pods, fresh deadline clock (as Job does)
        status.attempt += 1
        status.start_time = None
        b.condition(ConditionType.SUSPENDED, False, TransitionReason.RESUMED, "the job was resumed")
    if not queue.admitted(b):
        # Kueue has not admitted the job: nothing of it runs, and its clocks (activeDeadlineSeconds) start
        # when it is admitted, as a suspended Job's do when it resumes. Its shape may change meanwhile.
        status.start_time = None
        status.admitted_shape = None
        return
    if tenancy.over_limit(b):  # its namespace's TPUJobs hold the chips its policy allows
        return
    if status.phase in shape.OPEN_PHASES or not status.admitted_shape:
        status.admitted_shape = shape.shape_of(b.job)  # from now on, what the job holds (status/shape.py)
    if status.start_time is None:
        status.start_time = timestamp(b.now)
        if status.phase is None:
            b.set_phase(Phase.PENDING, TransitionReason.CREATED, "the operator accepted the job")
    status.workers = WorkerCounts(expected=len(expected_workers(b.job)), **count_workers(b))
    bad_nodes.forget_replaced(b)  # a bad host's VM replaced since: its count starts again
    if _deadline_passed(b):
        return
    place(b)
    if restart_for_recreation(b):
        # GKE's upgrade or repair disrupted the slice: restarted; the pools recorded (and waited for, while
        # GKE still works on them); the new attempt's workers come in a later pass.
        pools_ready(b)
        return
    if not pools_ready(b):
        return
    _run_workers(b)


def _say_shape_refused(b: Builder) -> None:
    """An edit of a running job's shape, refused (the pass runs the job as admitted): said once per edit."""
    refused = "; ".join(b.observed.shape_refused) or None
    if refused is not None and refused != b.status.shape_change_refused:
        b.event("Warning", Reason.SHAPE_CHANGE_REFUSED, refused)
    b.status.shape_change_refused = refused


def _finished(b: Builder) -> None:
    """Succeeded or Failed: give the TPUs back, keep finished pods for their logs, honour the TTL."""
    progress.quote_last_words(b)  # a stall that spent maxRestarts: its workers' last words as they end
    release(b, keep_finished_pods=True)
    pools = known_pools(b)
    if b.observed.pools is not None:
        record_pools(
            b, [dataclasses.replace(p, state=POOL_DELETED) if p.state == POOL_MISSING else p for p in pools]
        )
    if b.decision.delete_pools:
        b.decision.requeue(b.observed.poll_provisioning_seconds)
    ttl = b.job.spec.run_policy.ttl_seconds_after_finished
    if ttl is not None and b.status.completion_time:
        expires = parse_timestamp(b.status.completion_time) + dt.timedelta(seconds=ttl)
        if b.now >= expires:
            b.decision.delete_job = True
        else:
            b.decision.requeue((expires - b.now).total_seconds())


def _suspend(b: Builder) -> None:
    release(b, keep_finished_pods=False)
    b.status.starting_since = None
    b.set_phase(
        Phase.SUSPENDED,
        TransitionReason.SUSPENDED,
        "spec.runPolicy.suspend is true: pods and node pools removed",
    )
    b.condition(ConditionType.SUSPENDED, True, TransitionReason.SUSPENDED, "spec.runPolicy.suspend is true")
    b.condition(ConditionType.RUNNING, False, TransitionReason.SUSPENDED, "the job is suspended")
    if b.observed.pools is not None:
        record_pools(
            b,
            [
                dataclasses.replace(p, state=POOL_DELETED) if p.state == POOL_MISSING else p
                for p in b.observed.pools
            ],
        )
    if b.decision.delete_pools:
        b.decision.requeue(b.observed.poll_provisioning_seconds)


def _deadline_passed(b: Builder) -> bool:
    deadline = b.job.spec.run_policy.active_deadline_seconds
    if not limit_reached(b, b.status.start_time, deadline):
        return False
    fail(b, Reason.DEADLINE, f"the job ran longer than activeDeadlineSeconds ({deadline} s)")
    return True


def _run_workers(b: Builder) -> None:
    """Pools are ready: Service, pods of the current attempt, and what their phases mean."""
    progress.quote_last_words(b)
    _ensure_workers_objects(b)
    current = {(p.slice, p.worker): p for p in b.observed.pods if is_current(b.status, p) and not p.deleting}
    wanted = expected_workers(b.job)
    missing = [
        key
        for key in wanted
        if key not in current
        and naming.pod_name(b.job, key[0], key[1], serving_attempt(b.status, key[0]))
        not in b.observed.pods_in_flight
    ]
    if _restarted(b, current, wanted, missing) or not _create_missing(b, current, wanted, missing):
        return
    _workers_phase(b, current, wanted, missing)


def _ensure_workers_objects(b: Builder) -> None:
    """The Service and the NetworkPolicy the workers need; the attempt a crash left unrecorded adopted; the
    pods of earlier attempts deleted (the last one's finished pods kept for their logs)."""
    status = b.status
    if not b.observed.service_exists:
        b.decision.create_service = True
    if not b.observed.network_policy_exists:  # never assumed from the Service: it may be deleted alone
        b.decision.create_network_policy = True
    # A crash after creating a new attempt's pods but before recording it: adopt that attempt.
    newest = max((p.attempt for p in b.observed.pods), default=status.attempt)
    if newest > status.attempt:
        status.attempt, status.slice_attempts = newest, []
    for pod in b.observed.pods:
        keep_for_logs = is_finished(pod) and pod.attempt == status.attempt - 1
        stale = pod.attempt < status.attempt and not is_current(status, pod)
        if stale and not pod.deleting and not keep_for_logs:
            b.decision.delete_pods.append(pod.name)


def _restarted(
    b: Builder,
    current: dict[tuple[int, int], PodView],
    wanted: list[tuple[int, int]],
    missing: list[tuple[int, int]],
) -> bool:
    """Whether the workers restart (or stop) this pass: one failed, a hardware fault, the run's end or a
    maintenance ahead, or workers lost with their nodes. An in-place restart goes on with the same pods."""
    status = b.status
    failed = [p for p in current.values() if p.phase == "Failed"]
    if failed:
        _restart(b, failed, lost=[])
        return True
    if recovery.hardware_restart(b, list(current.values())):
        return True
    recovery.restart_in_place(b, list(current.values()))
    if b.observed.slice_created is not None and status.run_deadline is None:
        start_run_clock(b)  # the slice's VMs count from their creation, even while its workers start
    if run_duration_ends(b) or maintenance_due(b):
        return True
    # Every pod of this attempt was seen before, and now some are gone: their nodes went away.
    before = b.previous_workers
    all_seen_before = before.pending + before.running + before.succeeded + before.failed == len(wanted)
    if missing and all_seen_before and b.previous_phase in (Phase.STARTING, Phase.RUNNING):
        _restart(b, [], lost=missing)
        return True
    return False


def _create_missing(
    b: Builder,
    current: dict[tuple[int, int], PodView],
    wanted: list[tuple[int, int]],
    missing: list[tuple[int, int]],
) -> bool:
    """The missing workers created, unless a restart's or a refusal's backoff holds them (False: wait)."""
    wait = _restart_backoff_left(b)
    if b.observed.pods_refused:  # refused creates are not sent again before their backoff ends
        wait = max(wait, b.observed.pods_refused_wait)
    if missing and wait > 0:
        b.decision.requeue(wait)
        return False
    b.decision.create_pods = missing
    # Pods created now or not yet seen by the watch are Pending: counting them so means their first
    # watch events change nothing, and the status is not written again for each of them.
    counts = count_workers(b)
    if not b.observed.pods_refused:  # refused pods do not exist: the next pass must not find them "lost"
        counts["pending"] += sum(1 for key in wanted if key not in current)
    b.status.workers = WorkerCounts(expected=len(wanted), **counts)
    return True


def _workers_phase(
    b: Builder,
    current: dict[tuple[int, int], PodView],
    wanted: list[tuple[int, int]],
    missing: list[tuple[int, int]],
) -> None:
    """What the workers' phases mean for the job's: succeeded, running, waiting for capacity, starting."""
    status = b.status
    workers = status.workers
    if workers.succeeded == len(wanted):
        status.starting_since = None
        status.completion_time = timestamp(b.now)
        b.set_phase(Phase.SUCCEEDED, TransitionReason.SUCCEEDED, f"all {len(wanted)} workers succeeded")
        b.condition(
            ConditionType.SUCCEEDED, True, TransitionReason.SUCCEEDED, f"all {len(wanted)} workers succeeded"
        )
        b.condition(ConditionType.RUNNING, False, TransitionReason.SUCCEEDED, "the job finished")
        progress.finish(b, current.get((0, 0)))
        release(b, keep_finished_pods=True)
        if b.decision.delete_pools:
            b.decision.requeue(b.observed.poll_provisioning_seconds)
    elif not missing and workers.running + workers.succeeded == len(wanted):
        status.starting_since = None
        if status.running_time is None:
            status.running_time = timestamp(b.now)
        message = f"{workers.running} of {len(wanted)} workers running"
        if b.job.spec.capacity.mode == CapacityMode.flex_start:
            status.provisioning_since = None
            message += f"; the flex-start slice runs until {start_run_clock(b)}"
        b.set_phase(Phase.RUNNING, TransitionReason.RUNNING, message)
        b.condition(
            ConditionType.RUNNING,
            True,
            TransitionReason.ALL_WORKERS_RUNNING,
            f"{len(wanted)} workers running",
        )
        progress.track(b)
    elif waiting_for_flex_capacity(b, list(current.values())):
        # Queued for capacity holds no slice: the startup clock starts when the slice comes.
        status.starting_since = None
    else:
        why = why_not_started(b, list(current.values()))
        if startup_timed_out(b, why):
            return
        if why is None:
            b.set_phase(
                Phase.STARTING,
                TransitionReason.STARTING,
                f"{workers.running} of {len(wanted)} workers running",
            )
        else:
            b.set_phase(Phase.STARTING, *why)
            b.condition(ConditionType.RUNNING, False, *why)


def _restart_backoff_left(b: Builder) -> float:
    """Seconds before the pods of a restart may be created: an application restart's, and an uncounted one
    that came in a row of rapid restarts (RAPID_RESTART_WINDOW_SECONDS)."""
    status = b.status
    if status.phase != Phase.RESTARTING or not status.last_restart_time:
        return 0.0
    # Ignored failures do not count, but back off as counted ones do (by their own number): a worker that
    # keeps failing so would otherwise restart the slice in a tight loop.
    if status.reason in (Reason.WORKER_FAILED, Reason.STALLED):
        failures_so_far = status.application_restarts
    elif status.reason == Reason.IGNORED_BY_POLICY:
        failures_so_far = status.restarts_by_reason.get(Reason.IGNORED_BY_POLICY, 0)
    else:  # uncounted: at once, unless rapid (the first rapid one waits the base, then doubling)
        failures_so_far = status.rapid_restarts
        if not failures_so_far:
            return 0.0
    exponent = max(failures_so_far - 1, 0)
    backoff = min(b.observed.restart_backoff_seconds * float(2**exponent), RESTART_BACKOFF_CAP_SECONDS)
    elapsed = (b.now - parse_timestamp(status.last_restart_time)).total_seconds()
    return max(backoff - elapsed, 0.0)


def _restart(b: Builder, failed: list[PodView], lost: list[tuple[int, int]]) -> None:
    """TPU slices are all-or-nothing: any worker lost or failed restarts every pod of the job (or of its one
    slice, recovery.narrow_slice), unless the failurePolicy fails the job at once (failures.judge: its rules
    over preemption and application failures)."""
    status = b.status
    bad_nodes.note_failures(b, failed)  # a failure that was its node's fault, counted for that node
    if lost:
        reason, counted = Reason.NODE_LOST, False
        detail = f"{len(lost)} worker pod(s) disappeared (slice {lost[0][0]} worker {lost[0][1]} first)"
    else:
        outcome = failures.judge(b.job, failed)
        if outcome.fail:
            fail(b, outcome.reason, outcome.detail)
            return
        reason, detail, counted = outcome.reason, outcome.detail, outcome.counted
    budget = b.job.spec.run_policy.max_restarts
    if counted and status.application_restarts >= budget:
        fail(b, Reason.BACKOFF_LIMIT, f"{detail}; maxRestarts ({budget}) spent")
        return
    begin_restart(
        b, reason, detail, infrastructure=not counted, only_slice=recovery.narrow_slice(b, failed, lost)
    )
