"""A running trainer's progress, pure: worker 0's step counter (read by the observer from its metrics
endpoint) into status.progress, with an ETA at the pace since the last read; a step that has not moved for
spec.runPolicy.progressDeadlineSeconds while every worker runs is a stalled trainer (a hung collective, a
stalled input pipeline): the job restarts as Stalled, counted against maxRestarts, so no slice is held by a
trainer that does not progress. The stalled attempt's last words (its workers' termination messages: the
trainer dumps its threads' stacks on SIGTERM) are quoted once, in the status and an event, as they end."""

from __future__ import annotations

import datetime as dt

from tpujob.api.constants import PROGRESS_LINE_PREFIX
from tpujob.api.job import TPUJob
from tpujob.api.status import Progress, Reason
from tpujob.status.builder import Builder, begin_restart, fail
from tpujob.status.goodput import parse_progress
from tpujob.status.model import PodView, ProgressSample, parse_timestamp, timestamp
from tpujob.status.restart_history import note_first_step, note_recovery

# What of the workers' last words goes into the status and the event (an event message is cut at 1 KiB).
MAX_LAST_WORDS = 900


def track(b: Builder) -> bool:
    """Every worker runs: record what worker 0 reported; restart the job when it stalled. True: restarted."""
    status, attempt = b.status, b.status.attempt
    current = status.progress if status.progress is not None and status.progress.attempt == attempt else None
    sample = b.observed.progress
    if current is None:  # the attempt runs; nothing read of it yet: the stall clock starts now
        # The target is the job's, not the attempt's: kept from the attempt before.
        target = status.progress.target_steps if status.progress is not None else None
        current = Progress(
            step_time=timestamp(b.now), read_time=timestamp(b.now), attempt=attempt, target_steps=target
        )
    if sample is not None and sample.attempt == attempt:
        current = advanced(current, sample, b.now)
    if status.progress is not None and status.progress is not current and current.last_words is None:
        current.last_words = status.progress.last_words  # a stalled attempt's, until another stalls
    status.progress = current
    note_recovery(status, b.now)
    deadline = b.job.spec.run_policy.progress_deadline_seconds
    if deadline is None:
        return False
    stalled_for = (b.now - parse_timestamp(current.step_time)).total_seconds()
    if stalled_for < deadline:
        b.decision.requeue(deadline - stalled_for)
        return False
    at = f"at step {current.step}" if current.step is not None else "without reporting a step"
    detail = f"the trainer stayed {at} for {int(stalled_for)} s (progressDeadlineSeconds {deadline})"
    if b.observed.progress_error and (sample is None or sample.attempt != attempt):
        detail += f"; worker 0's metrics endpoint: {b.observed.progress_error}"
    # Its last words are awaited, from the workers' termination messages as they end (quote_last_words).
    current.stalled = True
    budget = b.job.spec.run_policy.max_restarts
    if status.application_restarts >= budget:
        fail(b, Reason.BACKOFF_LIMIT, f"{detail}; maxRestarts ({budget}) spent")
    else:
        begin_restart(b, Reason.STALLED, detail, infrastructure=False)
    return True


def finish(b: Builder, chief: PodView | None) -> None:
    """The job succeeded: the step its trainer ended at, from the chief's progress line (the last line of
    its termination message, written as it exits), when it is past the last read; and, for a restart no read
    saw recover, its trainer's first step. An attempt shorter than the reads' pace (a resume close to the end)
    otherwise ends with no step, or a stale one, in the status."""
    final = parse_progress(chief.message) if chief is not None else None
    before, attempt = b.status.progress, b.status.attempt
    if final is None:
        return
    if final.first_step_at is not None:
        note_first_step(b.status, _from_unix(final.first_step_at), b.now)
    if (
        before is not None
        and before.attempt == attempt
        and before.step is not None
        and final.step <= before.step
    ):
        return
    target = before.target_steps if before is not None else None
    # The checkpoint this attempt saved last, else the one it resumed from.
    saved_at = final.checkpoint_at or final.resumed_checkpoint_at
    b.status.progress = Progress(
        step=final.step,
        target_steps=target,
        percent=_percent(final.step, target),
        checkpoint_step=final.checkpoint_step,
        checkpoint_time=timestamp(_from_unix(saved_at))
        if saved_at and final.checkpoint_step is not None
        else None,
        step_time=timestamp(_from_unix(final.ended_at)),
        read_time=timestamp(b.now),
        attempt=attempt,
        last_words=before.last_words if before is not None else None,
    )


def _percent(step: int, target: int | None) -> int | None:
    return min(100, step * 100 // target) if target else None


def _from_unix(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def read_urgent(job: TPUJob, now: dt.datetime) -> bool:
    """Whether worker 0's step must be read now, whatever the reads' pace: the attempt has no progress
    record yet, or its stall deadline has come (a Stalled restart is decided on a fresh read only)."""
    status = job.status
    if status is None or status.progress is None or status.progress.attempt != status.attempt:
        return True
    deadline = job.spec.run_policy.progress_deadline_seconds
    return (
        deadline is not None
        and (now - parse_timestamp(status.progress.step_time)).total_seconds() >= deadline
    )


def advanced(before: Progress | None, sample: ProgressSample, now: dt.datetime) -> Progress:
    """The progress record after a read: unchanged while the step stands still (no status rewrite for the
    clock alone); when it moved, the new step, since now, and an ETA at the pace since the step first moved.

    The pace runs from the first read at which the step had moved (after the first step's compilation),
    kept to the millisecond (paceTime), over a growing window: between two reads 2 s apart, the status
    times' whole seconds made it up to half off, and the ETA a queued job's start estimate rests on with
    it. No ETA until the window has a second read. A step that went back (resumed from a checkpoint in
    place) starts the window again."""
    if before is not None and before.step == sample.step:
        return before
    # A page without the target (a trainer that has not set it yet) keeps the one known.
    target = sample.target_steps or (before.target_steps if before is not None else None)
    eta = before.eta if before is not None else None
    pace_step = before.pace_step if before is not None else None
    pace_time = before.pace_time if before is not None else None
    if before is not None and before.step is not None and sample.step < before.step:
        pace_step = pace_time = eta = None
    if before is not None and before.step is not None and target and sample.step > before.step:
        if pace_step is None or pace_time is None:
            pace_step, pace_time = sample.step, precise_timestamp(now)
        elif sample.step > pace_step:
            seconds = (now - parse_precise(pace_time)).total_seconds()
            if seconds > 0:
                pace = (sample.step - pace_step) / seconds
                eta = timestamp(now + dt.timedelta(seconds=max(target - sample.step, 0) / pace))
    checkpoint_time = None
    if sample.checkpoint_time:
        checkpoint_time = timestamp(dt.datetime.fromtimestamp(sample.checkpoint_time, dt.UTC))
    return Progress(
        step=sample.step,
        target_steps=target,
        percent=_percent(sample.step, target),
        eta=eta,
        checkpoint_step=sample.checkpoint_step,
        checkpoint_time=checkpoint_time,
        step_time=timestamp(now),
        read_time=timestamp(now),
        attempt=sample.attempt,
        pace_step=pace_step,
        pace_time=pace_time,
    )


def quote_last_words(b: Builder) -> None:
    """After a Stalled restart (or failure): the stalled attempt's workers' termination messages, once they
    have ended, in status.progress.lastWords and a Warning event (kubectl describe shows where it hung)."""
    progress = b.status.progress
    if progress is None or not progress.stalled or progress.last_words is not None:
        return
    stalled_attempt = progress.attempt
    words = [
        f"slice {pod.slice} worker {pod.worker}: {said}"
        for pod in sorted((*b.observed.pods, *b.observed.departed), key=lambda p: (p.slice, p.worker))
        if pod.attempt == stalled_attempt and (said := human_lines(pod))
    ]
    if not words:
        return
    progress.last_words = " | ".join(words)[:MAX_LAST_WORDS]
    b.event(
        "Warning", Reason.STALLED, f"last words of stalled attempt {stalled_attempt}: {progress.last_words}"
    )


def human_lines(pod: PodView) -> str:
    """A worker's termination message without the trainer's progress line (that is for goodput)."""
    lines = [line.strip() for line in pod.message.splitlines()]
    return " ".join(line for line in lines if line and not line.startswith(PROGRESS_LINE_PREFIX))


def precise_timestamp(moment: dt.datetime) -> str:
    """RFC 3339 to the millisecond (status.progress.paceTime)."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_precise(value: str) -> dt.datetime:
    """An RFC 3339 time with or without its fraction of a second, in UTC."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.UTC)
