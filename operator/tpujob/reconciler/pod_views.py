"""A pod as the pure core reads it: a kopf body or a dict from the watch made into a `status.PodView` (its
phase, the trainer's exit code and termination message, the scheduler's and the kubelet's words, its
conditions), once per pod change, for the failure causes and the failurePolicy."""

from __future__ import annotations

from typing import Any

from tpujob import status as s
from tpujob.api import constants as c


def pod_view(pod: Any) -> s.PodView:
    """A pod (kopf body or dict) -> PodView. Reads the container's exit code and termination message, and
    the pod's conditions, for failure causes and the failurePolicy."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    unschedulable, since = "", ""
    conditions = []
    for condition in status.get("conditions") or []:
        conditions.append((condition.get("type") or "", condition.get("status") or ""))
        scheduled = condition.get("type") == "PodScheduled" and condition.get("status") == "False"
        if scheduled and condition.get("reason") == "Unschedulable":
            unschedulable = condition.get("message") or "Unschedulable"
            since = condition.get("lastTransitionTime") or ""
    exit_code, message, finished_at = None, "", ""
    phase = status.get("phase") or "Pending"
    lingering = False
    if terminated := _trainer_terminated(status):
        exit_code = terminated.get("exitCode")
        reason = reason or terminated.get("reason") or ""
        # The termination log (terminationMessagePolicy FallbackToLogsOnError: else the log's end).
        message = terminated.get("message") or ""
        finished_at = terminated.get("finishedAt") or ""
        if phase == "Running":
            # A sidecar (a regular container) outlives the trainer and keeps the pod Running: the worker's
            # outcome is the trainer's, and the pod is deleted when the job no longer needs it.
            phase, lingering = ("Succeeded" if exit_code == 0 else "Failed"), True
    waiting = _waiting_container(status)
    return s.PodView(
        name=meta["name"],
        slice=int(labels.get(c.LABEL_SLICE, 0)),
        worker=int(labels.get(c.LABEL_WORKER, 0)),
        attempt=int(labels.get(c.LABEL_ATTEMPT, 0)),
        phase=phase,
        node=(pod.get("spec") or {}).get("nodeName") or "",
        reason=reason,
        exit_code=exit_code,
        deleting=bool(meta.get("deletionTimestamp")),
        unschedulable=unschedulable,
        unschedulable_since=since,
        message=message,
        finished_at=finished_at,
        # Only a failed pod's conditions matter (failurePolicy rules judge failed pods): the index keeps no
        # more.
        conditions=tuple(conditions) if phase == "Failed" else (),
        lingering=lingering,
        waiting_container=waiting[0],
        waiting_reason=waiting[1],
        waiting_message=waiting[2],
        started_at=(status.get("startTime") or "") if waiting[1] else "",
        ip=status.get("podIP") or "" if phase == "Running" else "",
        metrics_port=_metrics_port(pod.get("spec") or {}) if phase == "Running" else 0,
        restart_attempt=_int(meta.get("annotations") or {}, c.ANNOTATION_RESTART_ATTEMPT),
    )


def _int(values: dict[str, str], key: str) -> int:
    value = values.get(key, "")
    return int(value) if value.isdigit() else 0


def _metrics_port(spec: dict[str, Any]) -> int:
    """The trainer container's port named `metrics` (the trainer contract), 0 when it declares none."""
    for container in spec.get("containers") or []:
        if container.get("name") != c.TRAINER_CONTAINER:
            continue
        for port in container.get("ports") or []:
            if port.get("name") == c.METRICS_PORT_NAME:
                return int(port.get("containerPort") or 0)
    return 0


def _trainer_terminated(status: dict[str, Any]) -> dict[str, Any] | None:
    """The trainer container's terminated state (by name: sidecars have exit codes of their own); a pod
    without one named so (made before the name was fixed) gives its first terminated container."""
    containers = status.get("containerStatuses") or []
    named = [one for one in containers if one.get("name") == c.TRAINER_CONTAINER] or containers
    for container in named:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return None


def _waiting_container(status: dict[str, Any]) -> tuple[str, str, str]:
    """The first container that waits to start, as (name, the kubelet's reason, its message): an init
    container blocks the rest, so init containers come first. ("", "", "") when none waits."""
    if status.get("phase", "Pending") != "Pending":
        return "", "", ""
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                return container.get("name") or "", waiting["reason"], waiting.get("message") or ""
    return "", "", ""
