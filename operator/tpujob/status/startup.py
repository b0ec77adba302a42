"""Why an attempt's workers are not all running yet, and when to stop waiting for them.

A worker that cannot be scheduled says so through the scheduler (PodScheduled False, Unschedulable); one
that is scheduled but cannot start says so through the kubelet (a container waiting with ErrImagePull,
CreateContainerConfigError, ...). Either shows in the job's status past a grace period (a node may be on
its way, a pull may pass on retry), and spec.runPolicy.startupTimeoutSeconds ends the attempt's wait so no
TPU slice stays held by pods that cannot start.
"""

from __future__ import annotations

import datetime as dt

from tpujob.api.status import Reason
from tpujob.status.builder import Builder, fail, limit_reached
from tpujob.status.model import (
    CONTAINER_START_PROBLEMS,
    VOLUME_START_PROBLEMS,
    PodView,
    parse_timestamp,
    timestamp,
)


def why_not_started(b: Builder, pods: list[PodView]) -> tuple[str, str] | None:
    """(reason, message) for the job's status once a worker has not started past its grace period: the
    API server's refusal of the pods first, then the kubelet's reason (the pod sits on a TPU host), then the
    scheduler's. None while all are within
    their grace, with a look again when the first grace period ends."""
    if b.observed.pods_refused:
        return Reason.POD_REJECTED, f"the API server refused the worker pods: {b.observed.pods_refused}"
    return _cannot_start(b, pods) or _unschedulable(b, pods)


def startup_timed_out(b: Builder, why: tuple[str, str] | None) -> bool:
    """Start the attempt's startup clock on its first pass here; once it reaches
    spec.runPolicy.startupTimeoutSeconds, fail the job and give its pools back."""
    if b.status.starting_since is None:
        b.status.starting_since = timestamp(b.now)
    timeout = b.job.spec.run_policy.startup_timeout_seconds
    if not timeout or not limit_reached(b, b.status.starting_since, timeout):
        return False
    b.decision.create_pods.clear()
    last = f"{why[0]}: {why[1]}" if why else "the workers were still starting"
    fail(
        b,
        Reason.STARTUP_TIMEOUT,
        f"workers not all running {timeout} s after attempt {b.status.attempt} began starting them "
        f"(startupTimeoutSeconds; last: {last})",
    )
    return True


def _cannot_start(b: Builder, pods: list[PodView]) -> tuple[str, str] | None:
    problems = CONTAINER_START_PROBLEMS | VOLUME_START_PROBLEMS
    stuck = [p for p in _in_order(pods) if p.phase == "Pending" and p.waiting_reason in problems]
    shown = [p for p in stuck if _past_grace(b, p.started_at or b.status.starting_since, _startup_grace(b))]
    if not shown:
        return None
    first = shown[0]
    if first.waiting_reason in VOLUME_START_PROBLEMS:  # the pod's volumes, before any container
        message = f"pod {first.name} cannot set up its volumes: "
    else:
        message = f"pod {first.name} cannot start container {first.waiting_container}: "
    message += first.waiting_message or first.waiting_reason
    if len(stuck) > 1:
        message += f" ({len(stuck) - 1} more worker pod(s) cannot start)"
    return first.waiting_reason, message


def _unschedulable(b: Builder, pods: list[PodView]) -> tuple[str, str] | None:
    grace = dt.timedelta(seconds=b.observed.unschedulable_grace_seconds)
    for pod in _in_order(pods):
        if pod.phase != "Pending" or not pod.unschedulable or not pod.unschedulable_since:
            continue
        if _past_grace(b, pod.unschedulable_since, grace):
            return Reason.UNSCHEDULABLE, f"pod {pod.name} cannot be scheduled: {pod.unschedulable}"
    return None


def _startup_grace(b: Builder) -> dt.timedelta:
    return dt.timedelta(seconds=b.observed.startup_grace_seconds)


def _past_grace(b: Builder, since: str | None, grace: dt.timedelta) -> bool:
    """Whether `since` (RFC 3339) is at least `grace` ago; if not, a look again when it will be."""
    if not since:
        return False
    waited = b.now - parse_timestamp(since)
    if waited >= grace:
        return True
    b.decision.requeue((grace - waited).total_seconds())
    return False


def _in_order(pods: list[PodView]) -> list[PodView]:
    return sorted(pods, key=lambda p: (p.slice, p.worker))
