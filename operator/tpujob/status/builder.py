"""The decision under construction, and the steps every part of it shares: release what holds TPUs,
record pools, fail, restart, time limits."""

from __future__ import annotations

import datetime as dt

from tpujob.api.status import ConditionType, NodePoolStatus, Phase, Reason, WorkerCounts
from tpujob.status import cost, goodput
from tpujob.status.model import (
    POOL_RELEASED_STATES,
    RAPID_RESTART_WINDOW_SECONDS,
    SAME_PROBLEM,
    WARNING_REASONS,
    Decision,
    Event,
    Observed,
    PodView,
    PoolView,
    expected_workers,
    is_current,
    parse_timestamp,
    serving_attempt,
    set_condition,
    timestamp,
)
from tpujob.status.restart_history import record_restart


class Builder:
    """Accumulates the decision; keeps decide() readable."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed
        self.job = observed.job
        self.now = observed.now
        previous = observed.status
        self.previous_phase = previous.phase
        self.previous_reason = previous.reason
        self.previous_workers = previous.workers
        self._phase_event: Event | None = None
        self.status = previous.fresh_copy()
        self.decision = Decision(status=self.status)

    def event(self, type_: str, reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))

    def set_phase(self, phase: Phase, reason: str, message: str) -> None:
        """One phase event per pass, for the phase the pass ends in: a phase passed through within the
        pass (Pending on the way to Starting) never reaches the status, so it gets no event either."""
        self.status.phase, self.status.reason, self.status.message = phase, reason, message
        if self._phase_event is not None:
            self.decision.events.remove(self._phase_event)
            self._phase_event = None
        if (phase, _problem(reason)) != (self.previous_phase, _problem(self.previous_reason)):
            warning = phase in (Phase.FAILED, Phase.RESTARTING) or reason in WARNING_REASONS
            self._phase_event = Event("Warning" if warning else "Normal", reason or phase, message)
            self.decision.events.append(self._phase_event)

    def condition(self, type_: ConditionType, status: bool, reason: str, message: str) -> None:
        self.status.conditions = set_condition(
            self.status.conditions, type_, status, reason, message, self.now
        )

    def finish(self) -> Decision:
        self.status.observed_generation = self.job.metadata.generation
        # Deleted workers whose end the watch saw count too: a killed attempt's progress line is accounted
        # even when the pod went before a pass saw it in the index.
        ended = (*self.observed.pods, *self.observed.departed)
        goodput.account(self.observed.status, self.status, ended, self.now)
        cost.account(self.job, self.observed.status, self.status, self.now)
        return self.decision


def _problem(reason: str | None) -> str | None:
    """The reason as one problem: the kubelet's pull retries (ErrImagePull, ImagePullBackOff) are one."""
    return SAME_PROBLEM.get(reason, reason) if reason else reason


def is_finished(pod: PodView) -> bool:
    """Ended, and holding no node: kept for `kubectl logs` where a pod that still runs a sidecar is not."""
    return pod.phase in ("Succeeded", "Failed") and not pod.lingering


def count_workers(b: Builder) -> dict[str, int]:
    """The pods serving the current attempt, by phase."""
    counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for pod in b.observed.pods:
        if is_current(b.status, pod) and not pod.deleting:
            key = pod.phase.lower() if pod.phase.lower() in counts else "pending"
            counts[key] += 1
    return counts


def release(b: Builder, *, keep_finished_pods: bool) -> None:
    """Delete what holds TPUs: live pods, and the pools the operator made."""
    for pod in b.observed.pods:
        if pod.deleting or (keep_finished_pods and is_finished(pod)):
            continue
        b.decision.delete_pods.append(pod.name)
    for pool in known_pools(b):
        if pool.state not in POOL_RELEASED_STATES and pool.name not in b.decision.delete_pools:
            b.decision.delete_pools.append(pool.name)


def known_pools(b: Builder) -> list[PoolView]:
    """This pass' GKE view, else what the status last recorded."""
    if b.observed.pools is not None:
        return list(b.observed.pools)
    return [
        PoolView(
            p.slice,
            p.name,
            p.state,
            p.message,
            p.condition or "",
            operation=p.operation or "",
            zone=p.zone or "",
        )
        for p in b.status.node_pools
    ]


def record_pools(b: Builder, pools: list[PoolView]) -> None:
    b.status.node_pools = [
        NodePoolStatus(
            name=p.name,
            slice=p.slice,
            state=p.state,
            message=p.message,
            condition=p.condition or None,
            operation=p.operation or None,
            zone=p.zone or None,
        )
        for p in pools
    ]


def fail(b: Builder, reason: str, message: str) -> None:
    b.status.completion_time = timestamp(b.now)
    b.set_phase(Phase.FAILED, reason, message)
    b.condition(ConditionType.FAILED, True, reason, message)
    b.condition(ConditionType.RUNNING, False, reason, "the job failed")
    release(b, keep_finished_pods=True)
    if b.decision.delete_pools:
        b.decision.requeue(b.observed.poll_provisioning_seconds)


def limit_reached(b: Builder, since: str | None, seconds: int | None) -> bool:
    """A time limit counted from `since`: reached, or a look again when it will be."""
    if seconds is None or since is None:
        return False
    ends = parse_timestamp(since) + dt.timedelta(seconds=seconds)
    if b.now < ends:
        b.decision.requeue((ends - b.now).total_seconds())
        return False
    return True


def provisioning_timed_out(b: Builder, reason: str, message: str) -> bool:
    """spec.runPolicy.provisioningTimeoutSeconds: give up waiting for pools, and give them back."""
    timeout = b.job.spec.run_policy.provisioning_timeout_seconds
    if not limit_reached(b, b.status.provisioning_since, timeout):
        return False
    b.decision.create_pools.clear()
    fail(
        b,
        Reason.PROVISIONING_TIMEOUT,
        f"node pools not running {timeout} s after the job began waiting (last: {reason}: {message})",
    )
    return True


def begin_restart(
    b: Builder, reason: str, detail: str, infrastructure: bool, only_slice: int | None = None
) -> None:
    """A new attempt, counted by reason: every pod of the job goes (a slice is all or nothing), or with
    `only_slice` (restartStrategy RecreateSlice) only that slice's; the other slices' pods stay and serve
    the new attempt, their trainers restarting in place."""
    status = b.status
    slices = b.job.spec.tpu.slices
    kept = {
        i: serving_attempt(status, i) for i in range(slices) if only_slice is not None and i != only_slice
    }
    budget = b.job.spec.run_policy.max_restarts
    status.restarts += 1
    status.restarts_by_reason[reason] = status.restarts_by_reason.get(reason, 0) + 1
    if not infrastructure:
        status.application_restarts += 1
    status.attempt += 1
    status.slice_attempts = [kept.get(i, status.attempt) for i in range(slices)] if kept else []
    previous = status.last_restart_time
    since = (b.now - parse_timestamp(previous)).total_seconds() if previous else None
    rapid = since is not None and since < RAPID_RESTART_WINDOW_SECONDS
    status.rapid_restarts = status.rapid_restarts + 1 if rapid else 0
    status.last_restart_time = timestamp(b.now)
    record_restart(status, reason, b.now)
    status.starting_since = None  # the next attempt's startup clock starts when its pods do
    status.workers = WorkerCounts(expected=len(expected_workers(b.job)))
    # Live pods go now; the failed attempt's finished pods stay for `kubectl logs` until the next restart.
    for pod in b.observed.pods:
        if pod.deleting or pod.name in b.decision.delete_pods or is_current(status, pod):
            continue
        if is_finished(pod) and pod.attempt == status.attempt - 1:
            continue
        b.decision.delete_pods.append(pod.name)
    if kept:  # the kept slices' trainers are told now (restart in place), not after the new pods' backoff
        b.decision.restart_in_place = [
            p.name
            for p in b.observed.pods
            if is_current(status, p) and not p.deleting and p.phase in ("Pending", "Running")
        ]
    counted = f"{status.application_restarts}/{budget} application restarts used"
    what = (
        "restarting all workers"
        if not kept
        else f"recreating slice {only_slice}'s workers, the other slices' trainers restarting in place,"
    )
    b.set_phase(Phase.RESTARTING, reason, f"{detail}; {what} as attempt {status.attempt} ({counted})")
    b.condition(ConditionType.RUNNING, False, reason, detail)
    # The next pass re-checks the pools (a lost node may have broken the slice) before new pods.
    b.decision.requeue(1.0)
