"""status.restartHistory: each restart's cause, fault time, recovery and steps redone (pure, on tables)."""

from __future__ import annotations

import datetime as dt

import pytest

from tpujob.api.status import MAX_RESTART_HISTORY, Progress, RestartRecord, TPUJobStatus
from tpujob.status.model import timestamp
from tpujob.status.restart_history import note_recovery, record_restart, recovered_between

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def progress(attempt: int, step: int | None, checkpoint: int | None = None, read: float = 0) -> Progress:
    return Progress(
        attempt=attempt,
        step=step,
        checkpoint_step=checkpoint,
        step_time=timestamp(at(read)),
        read_time=timestamp(at(read)),
    )


@pytest.mark.parametrize(
    ("before", "expected"),
    [
        # (the failed attempt's progress, (step, checkpointStep, stepsRedone))
        (progress(0, 500, 400), (500, 400, 100)),
        (progress(0, 500, None), (500, None, 500)),  # no checkpoint: from step 0
        (progress(0, None), (None, None, None)),  # the attempt ran, no step read yet
        (progress(-1, 900, 800), (None, None, None)),  # an older attempt's progress says nothing
        (None, (None, None, None)),
    ],
)
def test_a_restart_records_its_cause_fault_time_and_the_steps_it_redoes(before, expected):
    status = TPUJobStatus(attempt=1, progress=before)
    record_restart(status, "NodeLost", at(10))
    (record,) = status.restart_history
    assert (record.attempt, record.reason, record.fault_time) == (1, "NodeLost", timestamp(at(10)))
    assert (record.step, record.checkpoint_step, record.steps_redone) == expected
    assert record.recovered_time is None


def test_the_history_keeps_the_last_restarts():
    status = TPUJobStatus()
    for attempt in range(1, MAX_RESTART_HISTORY + 4):
        status.attempt = attempt
        record_restart(status, "WorkerFailed", at(attempt))
    assert [r.attempt for r in status.restart_history] == list(range(4, MAX_RESTART_HISTORY + 4))


@pytest.mark.parametrize(
    ("now_progress", "running", "recovered", "seconds"),
    [
        # workers run, nothing read: running only
        (progress(1, None, read=40), timestamp(at(40)), None, None),
        # the new attempt's first step, read at 55 s: recovered, 45 s after the fault at 10 s
        (progress(1, 401, read=55), timestamp(at(40)), timestamp(at(55)), 45.0),
        # still the old attempt's progress: not recovered
        (progress(0, 500, read=55), timestamp(at(40)), None, None),
    ],
)
def test_recovery_is_the_first_step_of_the_new_attempt(now_progress, running, recovered, seconds):
    status = TPUJobStatus(attempt=1)
    status.restart_history = [RestartRecord(attempt=1, reason="NodeLost", fault_time=timestamp(at(10)))]
    status.progress = progress(1, None, read=40)
    assert note_recovery(status, at(40)) is None  # every worker runs: running time
    status.progress = now_progress
    done = note_recovery(status, at(60))
    (record,) = status.restart_history
    assert (record.running_time, record.recovered_time, record.recovery_seconds) == (
        running,
        recovered,
        seconds,
    )
    assert (done is record) == (recovered is not None)


def test_a_recovered_record_is_not_rewritten_and_is_observed_once():
    status = TPUJobStatus(attempt=1, progress=progress(1, 401, read=30))
    status.restart_history = [RestartRecord(attempt=1, reason="Preempted", fault_time=timestamp(at(10)))]
    before = status.model_copy(deep=True)
    note_recovery(status, at(30))
    assert [r.recovery_seconds for r in recovered_between(before, status)] == [20.0]
    again = status.model_copy(deep=True)
    status.progress = progress(1, 900, read=90)
    assert note_recovery(status, at(90)) is None
    assert status.restart_history[0].recovery_seconds == 20.0
    assert recovered_between(again, status) == []


def test_an_attempt_that_ends_before_recovering_leaves_its_record_unrecovered():
    status = TPUJobStatus(attempt=1)
    record_restart(status, "NodeLost", at(10))
    status.attempt = 2
    status.progress = progress(1, None)
    record_restart(status, "NodeLost", at(20))
    status.progress = progress(2, 5, read=50)
    note_recovery(status, at(50))
    assert [(r.attempt, r.recovery_seconds) for r in status.restart_history] == [(1, None), (2, 30.0)]
