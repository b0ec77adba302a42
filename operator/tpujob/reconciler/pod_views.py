"""A pod as the pure core reads it: a kopf body or a dict from the watch made into a `status.PodView` (its
phase, the trainer's exit code and termination message, the scheduler's and the kubelet's words, its
conditions), once per pod change, for the failure causes and the failurePolicy.

A pod's labels and annotations are its namespace's to write (`kubectl label pod`, `edit` is enough), and the
pod watch serves every namespace: what is read from them is parsed, never trusted. A worker's identity
(slice, worker, attempt labels) that does not parse makes the pod unreadable (`Unreadable`: the watch leaves
it out and says so once); an annotation that does not parse is read as absent, and said."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpujob import status as s
from tpujob.api import constants as c

# The largest index a worker's labels may carry: far above any slice count or hosts per slice (a tpu7x
# 16x24x24 slice has 2,304 hosts) and any attempt a job reaches, small enough for every integer type.
MAX_INDEX = 999_999


class Unreadable(ValueError):
    """A field a tenant can write holds what the operator cannot read: the object is left out."""


def read_index(value: object, field: str) -> int:
    """A label's whole number (ASCII digits only: `"²".isdigit()` is True and int() refuses it)."""
    if not isinstance(value, str) or not (value.isascii() and value.isdigit()) or int(value) > MAX_INDEX:
        raise Unreadable(f"{field}: {_quoted(value)} is not a whole number from 0 to {MAX_INDEX}")
    return int(value)


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _ignore(_: str) -> None:
    return None


def pod_view(pod: Any, warn: Callable[[str], None] = _ignore) -> s.PodView:
    """A pod (kopf body or dict) -> PodView. Reads the container's exit code and termination message, and
    the pod's conditions, for failure causes and the failurePolicy. Raises Unreadable for a pod whose
    identity labels do not parse; `warn` hears of any other field read as absent."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    identity = {
        key: read_index(labels.get(key, "0"), f"metadata.labels['{key}']")
        for key in (c.LABEL_SLICE, c.LABEL_WORKER, c.LABEL_ATTEMPT)
    }
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    unschedulable, since, disruption = "", "", ""
    conditions = []
    for condition in status.get("conditions") or []:
        conditions.append((condition.get("type") or "", condition.get("status") or ""))
        if (condition.get("type"), condition.get("status")) == (s.DISRUPTION_TARGET, "True"):
            disruption = condition.get("reason") or ""
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
        slice=identity[c.LABEL_SLICE],
        worker=identity[c.LABEL_WORKER],
        attempt=identity[c.LABEL_ATTEMPT],
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
        disruption=disruption[:64] if phase == "Failed" else "",
        ready=phase == "Running" and ("Ready", "True") in conditions,
        lingering=lingering,
        waiting_container=waiting[0],
        waiting_reason=waiting[1],
        waiting_message=waiting[2],
        started_at=(status.get("startTime") or "") if waiting[1] else "",
        ip=status.get("podIP") or "" if phase == "Running" else "",
        metrics_port=_metrics_port(pod.get("spec") or {}) if phase == "Running" else 0,
        restart_attempt=_restart_attempt(meta.get("annotations") or {}, warn),
    )


def _restart_attempt(annotations: dict[str, Any], warn: Callable[[str], None]) -> int:
    """The attempt the pod's trainer was told to run; 0 (as if never told) when absent or unreadable."""
    value = annotations.get(c.ANNOTATION_RESTART_ATTEMPT)
    if value is None:
        return 0
    try:
        return read_index(value, f"metadata.annotations['{c.ANNOTATION_RESTART_ATTEMPT}']")
    except Unreadable as error:
        warn(f"{error}; read as absent")
        return 0


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
