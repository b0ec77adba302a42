"""status/goodput.py: the goodput accounting, pure (status timestamps and trainer progress lines in)."""

from __future__ import annotations

import datetime as dt
import json

from tpujob.api.constants import PROGRESS_LINE_PREFIX
from tpujob.api.status import Goodput, TPUJobStatus
from tpujob.reconciler.pod_views import pod_view
from tpujob.status import goodput as g
from tpujob.status.failures import describe, quote
from tpujob.status.model import PodView, timestamp

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
U0 = T0.timestamp()


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def line(**facts: object) -> str:
    return PROGRESS_LINE_PREFIX + json.dumps(facts)


def pod(attempt: int, phase: str, message: str, worker: int = 0, **fields: object) -> PodView:
    return PodView(name=f"p-w{worker}-a{attempt}", slice=0, worker=worker, attempt=attempt, phase=phase,
                   message=message, **fields)  # type: ignore[arg-type]  # fmt: skip


def status(phase: str | None, attempt: int = 0, goodput: Goodput | None = None) -> TPUJobStatus:
    return TPUJobStatus(phase=phase, attempt=attempt, goodput=goodput)


def step(previous: TPUJobStatus, phase: str, now: dt.datetime, pods=(), attempt: int | None = None):
    after = previous.model_copy(deep=True)
    after.phase = phase
    if attempt is not None:
        after.attempt = attempt
    g.account(previous, after, pods, now)
    return after


def test_parse_progress_reads_the_last_progress_line_and_rejects_garbage():
    message = "preempted (SIGTERM) at step 7\n" + line(startStep=2, step=7, startedAt=1.0, endedAt=9.5,
                                                       checkpointStep=5, checkpointAt=8.0)  # fmt: skip
    progress = g.parse_progress(message)
    assert progress is not None
    assert (progress.start_step, progress.step, progress.checkpoint_step, progress.checkpoint_at) == (
        2,
        7,
        5,
        8.0,
    )
    assert progress.first_step_at is None and progress.checkpoint_save_seconds == 0.0
    assert g.parse_progress("training failed: boom") is None
    assert g.parse_progress(PROGRESS_LINE_PREFIX + "{not json") is None
    assert g.parse_progress(PROGRESS_LINE_PREFIX + '{"step": 1}') is None


def test_the_status_quotes_the_human_line_not_the_progress_line():
    message = "preempted (SIGTERM) at step 7, checkpoint /c/ckpt-7\n" + line(startStep=0, step=7) + "\n"
    assert quote(message) == "preempted (SIGTERM) at step 7, checkpoint /c/ckpt-7"
    assert quote(line(startStep=0, step=7)) == ""


def test_lost_to_disruption_counts_the_steps_since_the_last_checkpoint():
    saved = g.Progress(start_step=0, step=130, started_at=U0, ended_at=U0 + 60, first_step_at=U0 + 10,
                       checkpoint_step=100, checkpoint_at=U0 + 50)  # fmt: skip
    assert g.lost_to_disruption(saved) == (30, 10.0)
    never = g.Progress(start_step=40, step=70, started_at=U0, ended_at=U0 + 30, first_step_at=U0 + 5)
    assert g.lost_to_disruption(never) == (30, 25.0)  # no checkpoint this attempt: all its steps
    at_stop = g.Progress(start_step=0, step=70, started_at=U0, ended_at=U0 + 30, checkpoint_step=70,
                         checkpoint_at=U0 + 29)  # fmt: skip
    assert g.lost_to_disruption(at_stop) == (0, 0.0)  # the SIGTERM checkpoint kept everything


def test_phases_are_accounted_at_transitions_only():
    s0 = step(status(None), "Pending", at(0))
    assert s0.goodput is not None and s0.goodput.accounted_until == timestamp(at(0))
    s1 = step(s0, "Provisioning", at(2))
    s2 = step(s1, "Provisioning", at(50))  # no transition: nothing moves, the status is not rewritten
    assert s2.goodput == s1.goodput
    s3 = step(s2, "Starting", at(60))
    s4 = step(s3, "Running", at(70))
    s5 = step(s4, "Running", at(100))
    assert s5.goodput == s4.goodput
    assert s4.goodput is not None
    assert s4.goodput.badput_seconds == {g.TPU_INITIALIZATION: 60.0, g.TRAINING_PREP: 10.0}
    assert s4.goodput.productive_seconds == 0.0 and s4.goodput.ratio == 0.0


def test_a_preempted_attempt_moves_its_lost_steps_and_overheads_out_of_productive():
    running = status("Running", goodput=Goodput(accounted_until=timestamp(at(0))))
    ended = pod(0, "Failed", "preempted (SIGTERM) at step 130\n" + line(
        startStep=0, step=130, startedAt=U0 - 5, endedAt=U0 + 100, firstStepAt=U0 + 5, checkpointStep=100,
        checkpointAt=U0 + 80, checkpointSaveSeconds=2.0, inputWaitSeconds=3.0,
    ))  # fmt: skip
    restarting = step(running, "Restarting", at(101), [ended], attempt=1)
    gp = restarting.goodput
    assert gp is not None
    assert gp.badput_seconds == {
        g.PROGRAM_STARTUP: 10.0,
        g.DATA_LOADING: 3.0,
        g.CHECKPOINT_SAVE: 2.0,
        g.WASTED_PROGRESS: 20.0,
    }
    assert gp.productive_seconds == 101 - 35 and gp.steps_lost == 30 and gp.accounted_attempt == 0
    assert gp.ratio == round(66 / 101, 4)
    # The attempt's pod is kept for its logs: seen again, it is not accounted twice.
    again = step(restarting, "Provisioning", at(111), [ended])
    assert again.goodput is not None and again.goodput.steps_lost == 30
    assert again.goodput.badput_seconds[g.INFRASTRUCTURE_RECOVERY] == 10.0
    assert again.goodput.badput_seconds[g.WASTED_PROGRESS] == 20.0


def test_a_successful_attempt_wastes_nothing_and_moves_no_more_than_was_productive():
    running = status("Running", attempt=2, goodput=Goodput(accounted_until=timestamp(at(0))))
    done = pod(2, "Succeeded", line(startStep=100, step=200, startedAt=U0 - 50, endedAt=U0 + 9,
                                    firstStepAt=U0 - 40, checkpointStep=200, checkpointAt=U0 + 9,
                                    checkpointRestoreSeconds=1.0))  # fmt: skip
    finished = step(running, "Succeeded", at(10), [done])
    gp = finished.goodput
    assert gp is not None and gp.steps_lost == 0 and g.WASTED_PROGRESS not in gp.badput_seconds
    # startup (9 s) + restore (1 s) took all of the 10 s the operator saw Running
    assert gp.productive_seconds == 0.0 and sum(gp.badput_seconds.values()) == 10.0
    assert gp.accounted_attempt == 2


def test_pods_without_a_progress_line_leave_productive_time_alone():
    running = status("Running", goodput=Goodput(accounted_until=timestamp(at(0))))
    after = step(running, "Restarting", at(30), [pod(0, "Failed", "Terminated"), pod(0, "Running", "", 1)],
                 attempt=1)  # fmt: skip
    assert after.goodput is not None
    assert (after.goodput.productive_seconds, after.goodput.badput_seconds, after.goodput.ratio) == (
        30.0,
        {},
        1.0,
    )
    assert after.goodput.accounted_attempt == -1


def test_suspended_and_finished_time_is_not_accounted():
    suspended = status("Suspended", goodput=Goodput(accounted_until=timestamp(at(0)), productive_seconds=5))
    resumed = step(suspended, "Pending", at(600))
    assert resumed.goodput is not None and resumed.goodput.badput_seconds == {}
    assert resumed.goodput.productive_seconds == 5 and resumed.goodput.accounted_until == timestamp(at(600))


# --- attempts that end with no chance to write their last word ----------------------------------------


def test_a_killed_attempt_loses_its_steps_since_the_checkpoint_up_to_when_its_container_ended():
    """SIGKILL / OOM: the trainer's last periodic progress line (no human line) is at most a few seconds
    stale; the container's finishedAt says when the attempt really stopped."""
    running = status("Running", goodput=Goodput(accounted_until=timestamp(at(0))))
    periodic = line(startStep=0, step=130, startedAt=U0 - 5, endedAt=U0 + 97, firstStepAt=U0 + 5,
                    checkpointStep=100, checkpointAt=U0 + 80)  # fmt: skip
    killed = pod(0, "Failed", periodic + "\n", exit_code=137, reason="OOMKilled",
                 finished_at=timestamp(at(100)))  # fmt: skip
    gp = step(running, "Restarting", at(101), [killed], attempt=1).goodput
    assert gp is not None and gp.steps_lost == 30
    assert gp.badput_seconds[g.WASTED_PROGRESS] == 20.0  # from the checkpoint (80) to finishedAt (100)
    # A progress line alone quotes nothing: no ": " with an empty quote in the status message or event.
    assert quote(killed.message) == ""
    assert describe(killed, 1) == "worker 0 (pod p-w0-a0) failed with exit code 137 (OOMKilled)"
    # finishedAt before the line's endedAt (second-resolved, or a clock apart): the line's end stands.
    early = pod(0, "Failed", periodic, finished_at=timestamp(at(90)))
    gp = step(running, "Restarting", at(101), [early], attempt=1).goodput
    assert gp is not None and gp.badput_seconds[g.WASTED_PROGRESS] == 17.0
    # A malformed finishedAt is ignored.
    odd = pod(0, "Failed", periodic, finished_at="yesterday")
    gp = step(running, "Restarting", at(101), [odd], attempt=1).goodput
    assert gp is not None and gp.badput_seconds[g.WASTED_PROGRESS] == 17.0


def test_a_successful_attempts_finished_at_changes_nothing():
    running = status("Running", goodput=Goodput(accounted_until=timestamp(at(0))))
    done = pod(
        0,
        "Succeeded",
        line(
            startStep=0,
            step=10,
            startedAt=U0,
            endedAt=U0 + 10,
            firstStepAt=U0,
            checkpointStep=10,
            checkpointAt=U0 + 10,
        ),
        finished_at=timestamp(at(30)),
    )
    gp = step(running, "Succeeded", at(31), [done]).goodput
    assert gp is not None and g.WASTED_PROGRESS not in gp.badput_seconds and gp.steps_lost == 0


def test_pod_view_reads_when_the_container_finished():
    body = {
        "metadata": {"name": "p", "labels": {}},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
            "exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T12:01:40Z"}}}]},
    }  # fmt: skip
    view = pod_view(body)
    assert (view.finished_at, view.exit_code, view.reason) == ("2026-01-01T12:01:40Z", 137, "OOMKilled")
    assert pod_view({"metadata": {"name": "p"}, "status": {"phase": "Running"}}).finished_at == ""


def run_vanishes_then_next_reports(next_line: str):
    """Attempt 0 runs from 0 s to 100 s, then its pods vanish with their node (no progress line); attempt 1
    runs from 110 s and ends (Succeeded) at 200 s with `next_line`."""
    s0 = step(status("Starting", goodput=Goodput(accounted_until=timestamp(at(0)))), "Running", at(0))
    s1 = step(s0, "Restarting", at(100), [], attempt=1)  # no pods of attempt 0 left
    assert s1.goodput is not None and [(r.attempt, r.until) for r in s1.goodput.runs] == [
        (0, timestamp(at(100)))
    ]
    s2 = step(s1, "Starting", at(105))
    s3 = step(s2, "Running", at(110))
    done = pod(1, "Succeeded", next_line)
    return step(s3, "Succeeded", at(200), [done])


def test_an_attempt_without_progress_loses_its_running_time_after_the_checkpoint_the_next_resumed_from():
    after = run_vanishes_then_next_reports(line(
        startStep=700, step=1000, startedAt=U0 + 110, endedAt=U0 + 200, firstStepAt=U0 + 110,
        checkpointStep=1000, checkpointAt=U0 + 200, resumedCheckpointAt=U0 + 70))  # fmt: skip
    gp = after.goodput
    assert gp is not None
    assert gp.unreported_attempts == 1
    assert (
        gp.badput_seconds[g.WASTED_PROGRESS] == 30.0
    )  # attempt 0 ran on from its checkpoint (70 s) to 100 s
    assert gp.steps_lost == 0  # unknown: attempt 0 said nothing
    assert gp.productive_seconds == 100 + 90 - 30
    assert gp.runs == [] and gp.accounted_attempt == 1  # accounted: forgotten


def test_an_attempt_without_progress_whose_successor_started_over_lost_all_its_running_time():
    after = run_vanishes_then_next_reports(line(startStep=0, step=1000, startedAt=U0 + 110, endedAt=U0 + 200,
                                                firstStepAt=U0 + 110))  # fmt: skip
    gp = after.goodput
    assert gp is not None and gp.unreported_attempts == 1 and gp.badput_seconds[g.WASTED_PROGRESS] == 100.0


def test_a_checkpoint_from_before_the_unreported_attempt_ran_makes_all_of_it_wasted():
    after = run_vanishes_then_next_reports(
        line(
            startStep=500,
            step=1000,
            startedAt=U0 + 110,
            endedAt=U0 + 200,
            firstStepAt=U0 + 110,
            resumedCheckpointAt=U0 - 50,
        )
    )
    gp = after.goodput
    assert gp is not None and gp.badput_seconds[g.WASTED_PROGRESS] == 100.0


def test_an_unreported_attempt_is_only_counted_when_its_successors_checkpoint_time_is_unknown():
    # An older trainer: resumed (startStep > 0) but no resumedCheckpointAt.
    after = run_vanishes_then_next_reports(
        line(startStep=700, step=1000, startedAt=U0 + 110, endedAt=U0 + 200, firstStepAt=U0 + 110)
    )
    gp = after.goodput
    assert gp is not None and gp.unreported_attempts == 1 and g.WASTED_PROGRESS not in gp.badput_seconds
    assert gp.productive_seconds == 190.0


def test_runs_keep_the_running_time_of_an_attempt_running_twice_and_stay_few():
    s = step(status("Starting", goodput=Goodput(accounted_until=timestamp(at(0)))), "Running", at(0))
    s = step(s, "Suspended", at(10))
    s = step(s, "Running", at(50))  # same attempt again: 10 s of running so far, the gap is not running
    assert s.goodput is not None and s.goodput.runs[0].since == timestamp(at(40))
    for attempt in range(1, 8):  # attempts that never report
        s = step(s, "Restarting", at(60 * attempt), attempt=attempt)
        s = step(s, "Running", at(60 * attempt + 5))
    assert s.goodput is not None and [r.attempt for r in s.goodput.runs] == [4, 5, 6, 7]
    assert s.goodput.unreported_attempts == 0  # counted once a later attempt reports
