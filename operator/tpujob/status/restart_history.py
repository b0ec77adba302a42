"""Time to recover, per restart, pure: status.restartHistory keeps the last MAX_RESTART_HISTORY restarts, each
with its cause, when its fault was seen, when every worker of the new attempt ran, when the new attempt's
trainer first reported its step (the job is training again: recovered), and the steps it redoes (the failed
attempt's last reported step less its last checkpoint's, where the trainer resumes).

The recovery time is what a restart cost in wall time, measured as bench/recovery_bench.py measures it from
outside (fault to first step of the new attempt), within one progress read (the operator reads worker 0's
step at most every TPUJOB_PROGRESS_READS_PER_SECOND-paced interval, at once for an attempt it has no step
of), or, for an attempt that ended before any read, at the first step its progress line gives. A trainer
that reports no step never recovers here: its records keep runningTime only."""

from __future__ import annotations

import datetime as dt

from tpujob.api.status import MAX_RESTART_HISTORY, RestartRecord, TPUJobStatus
from tpujob.status.model import parse_timestamp, timestamp


def record_restart(status: TPUJobStatus, reason: str, now: dt.datetime) -> None:
    """A restart began (status.attempt is the new attempt): its record, with the failed attempt's progress."""
    progress = status.progress if status.progress and status.progress.attempt == status.attempt - 1 else None
    step = progress.step if progress else None
    checkpoint = progress.checkpoint_step if progress else None
    redone = max(step - (checkpoint or 0), 0) if step is not None else None
    record = RestartRecord(
        attempt=status.attempt,
        reason=reason,
        fault_time=timestamp(now),
        step=step,
        checkpoint_step=checkpoint,
        steps_redone=redone,
    )
    status.restart_history = [*status.restart_history, record][-MAX_RESTART_HISTORY:]


def note_recovery(status: TPUJobStatus, now: dt.datetime) -> RestartRecord | None:
    """Every worker of the current attempt runs: its restart's record gets runningTime, and recoveredTime
    once the attempt's trainer has reported a step. Returns the record when it recovered in this call."""
    if not status.restart_history:
        return None
    record = status.restart_history[-1]
    if record.attempt != status.attempt or record.recovered_time is not None:
        return None
    if record.running_time is None:
        record.running_time = timestamp(now)
    progress = status.progress
    if progress is None or progress.attempt != status.attempt or progress.step is None:
        return None
    # The read that first showed a step: progress.readTime (not later than now).
    recovered = min(parse_timestamp(progress.read_time), now)
    record.recovered_time = timestamp(recovered)
    record.recovery_seconds = max((recovered - parse_timestamp(record.fault_time)).total_seconds(), 0.0)
    return record


def note_first_step(status: TPUJobStatus, first_step: dt.datetime, now: dt.datetime) -> None:
    """The current attempt ended before a read showed its step (it ran shorter than the reads' pace): it
    recovered when its trainer took its first step, as its progress line says. A time before the fault or
    after now is not the trainer's (the line is the worker's to write): left unread."""
    record = status.restart_history[-1] if status.restart_history else None
    if record is None or record.attempt != status.attempt or record.recovered_time is not None:
        return
    fault = parse_timestamp(record.fault_time)
    if not fault <= first_step <= now:
        return
    record.recovered_time = timestamp(first_step)
    record.recovery_seconds = (parse_timestamp(record.recovered_time) - fault).total_seconds()


def recovered_between(before: TPUJobStatus, after: TPUJobStatus) -> list[RestartRecord]:
    """Records that recovered in this pass (for the tpujob_recovery_seconds histogram: each observed once)."""
    done = {r.attempt for r in before.restart_history if r.recovered_time}
    return [r for r in after.restart_history if r.recovered_time and r.attempt not in done]
