"""Since when a job has waited, pure: from its status' own times, so the answer is the same after an operator
restart, a rollout or a failover (a process' own clock would start over with the process, and an alert on it
would go quiet again each time)."""

from __future__ import annotations

from collections.abc import Callable

from tpujob.api.status import Phase, TPUJobStatus

# The phases that are a wait, and the status time each one's wait is counted from: Pending since startTime,
# Queued since queue.queuedSince (Kueue has not admitted it),
# Provisioning since provisioningSince (the job began waiting for its node pools; a zone fallback or a
# flex-start queue goes on counting), Starting since startingSince (the attempt began starting its workers),
# Restarting since lastRestartTime.
_SINCE: dict[Phase, Callable[[TPUJobStatus], str | None]] = {
    Phase.PENDING: lambda status: status.start_time,
    Phase.QUEUED: lambda status: status.queue.queued_since if status.queue else None,
    Phase.PROVISIONING: lambda status: status.provisioning_since,
    Phase.STARTING: lambda status: status.starting_since,
    Phase.RESTARTING: lambda status: status.last_restart_time,
}
WAITING_PHASES = tuple(_SINCE)


def waiting_since(status: TPUJobStatus) -> str | None:
    """When the wait the job's phase stands for began (RFC 3339); None for a phase that is no wait (Running,
    finished, Suspended), or a status without that time."""
    since = _SINCE.get(status.phase) if status.phase is not None else None
    return since(status) if since is not None else None
