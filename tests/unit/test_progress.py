"""A running trainer's progress, decided purely: worker 0's step into status.progress, the ETA, a stall
restarting the job as Stalled (counted), its last words quoted once; and the trainer contract's /metrics
page read into a sample."""

import datetime as dt
import json

from tests.manifests import base_job
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.status import Phase, Progress, Reason, RestartRecord, TPUJobStatus
from tpujob.render import naming
from tpujob.trainer_metrics import ProgressReader, parse, read_due

T0 = dt.datetime(2026, 11, 24, 12, 0, 0, tzinfo=dt.UTC)


def running_job(deadline=None, max_restarts=3, **status):
    run_policy = {"maxRestarts": max_restarts}
    if deadline is not None:
        run_policy["progressDeadlineSeconds"] = deadline
    manifest = base_job("train", nodePool={"policy": "existing"}, runPolicy=run_policy)
    manifest["metadata"].update(uid="u1", generation=1)
    job = parse_tpujob(manifest)
    defaults = {
        "phase": Phase.RUNNING,
        "start_time": "2026-11-24T11:00:00Z",
        "running_time": "2026-11-24T11:00:00Z",
    }
    return job.model_copy(update={"status": TPUJobStatus(**{**defaults, **status})})


def running_pods(job, attempt=0):
    return tuple(
        s.PodView(naming.pod_name(job, sl, w, attempt), sl, w, attempt, "Running")
        for sl, w in s.expected_workers(job)
    )


def step(job, now, sample=None, error="", pods=None):
    attempt = job.status.attempt
    observed = s.Observed(
        job=job,
        now=now,
        pods=running_pods(job, attempt) if pods is None else pods,
        service_exists=True,
        progress=sample,
        progress_error=error,
    )
    return s.decide(observed)


def after(job, decision):
    return job.model_copy(update={"status": decision.status})


def sample(step_, attempt=0, target=1000, checkpoint_step=None, checkpoint_time=None):
    return s.ProgressSample(attempt, step_, target, checkpoint_step, checkpoint_time)


def test_progress_rises_with_an_eta_at_the_pace_since_the_step_first_moved():
    job = running_job()
    first = step(job, T0, sample(100, checkpoint_step=50, checkpoint_time=T0.timestamp() - 30))
    progress = first.status.progress
    assert (progress.step, progress.target_steps, progress.percent) == (100, 1000, 10)
    assert progress.eta is None  # one read: no pace yet
    assert (progress.checkpoint_step, progress.checkpoint_time) == (50, "2026-11-24T11:59:30Z")
    second = step(after(job, first), T0 + dt.timedelta(seconds=30, milliseconds=250), sample(400))
    progress = second.status.progress
    assert (progress.step, progress.percent, progress.step_time) == (400, 40, "2026-11-24T12:00:30Z")
    # The step moved: the pace is measured from here, to the millisecond; no ETA before the next read.
    assert (progress.pace_step, progress.pace_time, progress.eta) == (400, "2026-11-24T12:00:30.250Z", None)
    third = step(after(job, second), T0 + dt.timedelta(seconds=60, milliseconds=250), sample(700))
    # 300 steps in 30 s: the 300 left take 30 s more.
    assert third.status.progress.eta == "2026-11-24T12:01:30Z"


def test_the_eta_paces_from_the_first_read_at_which_the_step_moved():
    """Over a growing window, a read that came late (reads jitter) barely moves the ETA, where the pace
    between the last two reads would make it jump."""
    job = running_job()
    first = step(job, T0, sample(0))  # before the first step (compiling)
    moved = step(after(job, first), T0 + dt.timedelta(seconds=40), sample(100))
    assert (moved.status.progress.pace_step, moved.status.progress.pace_time) == (
        100,
        "2026-11-24T12:00:40.000Z",
    )
    steady = step(after(job, moved), T0 + dt.timedelta(seconds=60), sample(300))  # 10 steps/s from here
    assert steady.status.progress.eta == "2026-11-24T12:02:10Z"  # 700 left at 10/s
    late = step(after(job, steady), T0 + dt.timedelta(seconds=63), sample(320))
    # 220 steps in 23 s: 680 left at 9.57/s = 71 s. Between the last two reads it would be 20 in 3 s: 102 s.
    assert late.status.progress.eta == "2026-11-24T12:02:14Z"
    # The step went back (resumed from a checkpoint in place): the window starts again, and the ETA with it.
    back = step(after(job, late), T0 + dt.timedelta(seconds=70), sample(200))
    assert back.status.progress.pace_step is None and back.status.progress.eta is None
    again = step(after(job, back), T0 + dt.timedelta(seconds=80), sample(300))
    assert again.status.progress.pace_step == 300


def test_a_step_that_stands_still_rewrites_nothing():
    job = running_job()
    first = step(job, T0, sample(100))
    again = step(after(job, first), T0 + dt.timedelta(seconds=30), sample(100))
    assert again.status.to_wire() == first.status.to_wire()


def test_a_stall_past_the_deadline_restarts_the_job_as_stalled_and_counts_it():
    job = running_job(deadline=120)
    first = step(job, T0, sample(100))
    assert first.requeue_after is not None and first.requeue_after <= 120  # looked at again at the deadline
    later = after(job, first)
    held = step(later, T0 + dt.timedelta(seconds=119), sample(100))
    assert held.status.phase == Phase.RUNNING
    stalled = step(later, T0 + dt.timedelta(seconds=120), sample(100))
    assert (stalled.status.phase, stalled.status.reason) == (Phase.RESTARTING, Reason.STALLED)
    assert "stayed at step 100 for 120 s (progressDeadlineSeconds 120)" in stalled.status.message
    assert stalled.status.application_restarts == 1 and stalled.status.attempt == 1
    assert sorted(stalled.delete_pods) == sorted(p.name for p in running_pods(job))
    assert stalled.status.progress.stalled and stalled.status.progress.last_words is None  # awaited


def test_a_trainer_that_never_reports_stalls_from_when_the_attempt_ran_and_says_why():
    job = running_job(deadline=60)
    first = step(job, T0, None, error="GET http://10.0.0.1:9090/metrics: connection refused")
    assert first.status.progress.step is None
    stalled = step(after(job, first), T0 + dt.timedelta(seconds=60), None, error="connection refused")
    assert stalled.status.reason == Reason.STALLED
    assert (
        "without reporting a step" in stalled.status.message
        and "connection refused" in stalled.status.message
    )


def test_no_deadline_no_stall():
    job = running_job()
    first = step(job, T0, sample(100))
    assert step(after(job, first), T0 + dt.timedelta(days=2), sample(100)).status.phase == Phase.RUNNING


def test_a_stall_with_maxrestarts_spent_fails_the_job():
    job = running_job(deadline=30, max_restarts=0)
    first = step(job, T0, sample(7))
    failed = step(after(job, first), T0 + dt.timedelta(seconds=31), sample(7))
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, Reason.BACKOFF_LIMIT)


def test_a_read_of_another_attempt_does_not_count_as_progress_of_this_one():
    job = running_job(deadline=60, attempt=1)
    first = step(job, T0, sample(500, attempt=0))
    assert first.status.progress.attempt == 1 and first.status.progress.step is None


def test_the_stalled_attempts_last_words_are_quoted_once_as_its_workers_end():
    job = running_job(deadline=30)
    first = step(job, T0, sample(7))
    stalled = after(job, step(after(job, first), T0 + dt.timedelta(seconds=30), sample(7)))
    name = naming.pod_name(job, 0, 0, 0)
    still_going = (s.PodView(name, 0, 0, 0, "Running", deleting=True),)
    waiting = step(stalled, T0 + dt.timedelta(seconds=31), pods=still_going)
    assert waiting.status.progress.last_words is None and not [
        e for e in waiting.events if "last words" in e.message
    ]
    words = 'SIGTERM while stuck: hang (train.py:31) < on_step (train.py:300)\ntpujob-progress {"step":7}'
    ended = (s.PodView(name, 0, 0, 0, "Failed", exit_code=137, deleting=True, message=words),)
    quoted = step(after(stalled, waiting), T0 + dt.timedelta(seconds=62), pods=ended)
    assert (
        quoted.status.progress.last_words
        == "slice 0 worker 0: SIGTERM while stuck: hang (train.py:31) < on_step (train.py:300)"
    )
    (event,) = [e for e in quoted.events if "last words" in e.message]
    assert (event.type, event.reason) == ("Warning", Reason.STALLED) and "hang (train.py:31)" in event.message
    once_more = step(after(stalled, quoted), T0 + dt.timedelta(seconds=63), pods=ended)
    assert not [e for e in once_more.events if "last words" in e.message]


def succeeded_pods(job, attempt, chief_message):
    return tuple(
        s.PodView(
            naming.pod_name(job, sl, w, attempt),
            sl,
            w,
            attempt,
            "Succeeded",
            exit_code=0,
            message=chief_message if (sl, w) == (0, 0) else "",
        )
        for sl, w in s.expected_workers(job)
    )


def progress_read(step_, attempt=0, target=400, **fields):
    """A progress record as a read of attempt `attempt` left it."""
    times = {"step_time": "2026-11-24T11:58:00Z", "read_time": "2026-11-24T11:59:00Z"}
    return Progress(step=step_, target_steps=target, attempt=attempt, **times, **fields)


def progress_line(step_, ended_at, **facts):
    fields = {"startStep": 150, "step": step_, "startedAt": ended_at - 9, "endedAt": ended_at, **facts}
    return "tpujob-progress " + json.dumps(fields)


def test_a_job_that_succeeds_ends_with_the_step_its_trainer_exited_at_even_when_no_read_saw_the_attempt():
    """The restarted attempt resumed at 150 and ran to the end between two reads: the last read was of the
    attempt before (step 170, then stalled). The chief's progress line, written as it exited, gives the step,
    the percent of the target read before, and the checkpoint it saved last."""
    fault = RestartRecord(attempt=1, reason="Stalled", fault_time="2026-11-24T11:59:40Z")
    job = running_job(
        attempt=1,
        restart_history=[fault],
        progress=progress_read(170, percent=42, stalled=True, last_words="slice 0 worker 0: hang"),
    )
    running = step(job, T0 - dt.timedelta(seconds=10), pods=running_pods(job, 1))
    unread = running.status.progress  # the new attempt, nothing read yet: the job's target is kept
    assert (unread.attempt, unread.step, unread.target_steps, unread.percent) == (1, None, 400, None)
    assert running.status.restart_history[-1].recovered_time is None  # no read has shown a step
    first_step = T0.timestamp() - 6.5
    line = progress_line(
        400, T0.timestamp() - 2, checkpointStep=400, checkpointAt=T0.timestamp() - 3, firstStepAt=first_step
    )
    done = step(after(job, running), T0, pods=succeeded_pods(job, 1, "\n" + line))
    assert done.status.phase == Phase.SUCCEEDED
    progress = done.status.progress
    assert (progress.attempt, progress.step, progress.target_steps, progress.percent) == (1, 400, 400, 100)
    assert (progress.checkpoint_step, progress.checkpoint_time) == (400, "2026-11-24T11:59:57Z")
    assert (progress.step_time, progress.read_time) == ("2026-11-24T11:59:58Z", "2026-11-24T12:00:00Z")
    assert progress.last_words == "slice 0 worker 0: hang" and progress.eta is None
    # The restart recovered at the new attempt's first step, as its trainer wrote it (in whole seconds).
    (record,) = done.status.restart_history
    assert (record.recovered_time, record.recovery_seconds) == ("2026-11-24T11:59:53Z", 13.0)


def test_a_read_past_the_chiefs_last_line_and_a_chief_without_one_leave_the_progress_as_read():
    read = progress_read(400, percent=100)
    job = running_job(progress=read)
    behind = step(job, T0, pods=succeeded_pods(job, 0, progress_line(390, T0.timestamp() - 2)))
    silent = step(job, T0, pods=succeeded_pods(job, 0, "exited without a progress line"))
    for decision in (behind, silent):
        assert decision.status.phase == Phase.SUCCEEDED and decision.status.progress == read


PAGE = """# HELP tpujob_trainer_global_step Training step reached, including resumed steps
# TYPE tpujob_trainer_global_step gauge
tpujob_trainer_global_step 1234.0
# TYPE tpujob_trainer_target_steps gauge
tpujob_trainer_target_steps 5000.0
# TYPE tpujob_trainer_last_checkpoint_step gauge
tpujob_trainer_last_checkpoint_step 1200.0
# TYPE tpujob_trainer_last_checkpoint_timestamp_seconds gauge
tpujob_trainer_last_checkpoint_timestamp_seconds 1.7955e+09
# TYPE tpujob_trainer_steps counter
tpujob_trainer_steps_total 34.0
"""


def test_the_contracts_series_are_read_from_a_metrics_page():
    assert parse(PAGE, attempt=2) == s.ProgressSample(2, 1234, 5000, 1200, 1.7955e09)


def test_unset_gauges_are_none_and_a_page_without_a_step_is_no_sample():
    fresh = (
        "tpujob_trainer_global_step 0\ntpujob_trainer_target_steps 0\ntpujob_trainer_last_checkpoint_step 0\n"
    )
    assert parse(fresh, attempt=0) == s.ProgressSample(0, 0, None, None, None)
    assert parse("process_cpu_seconds_total 3.0\n", attempt=0) is None


def test_progress_model_round_trips():
    wire = Progress(step=3, step_time="2026-11-24T12:00:00Z", read_time="2026-11-24T12:00:00Z").model_dump(
        by_alias=True, exclude_none=True
    )
    assert wire == {
        "step": 3,
        "stepTime": "2026-11-24T12:00:00Z",
        "readTime": "2026-11-24T12:00:00Z",
        "attempt": 0,
    }


def test_a_deleted_workers_last_state_is_kept_for_the_pass_that_quotes_it():
    """The kubelet reports a deleted worker's end just before it removes the pod: the watch's last sight of
    it is kept (JobMemory), newest attempt only, and quoted even when the index no longer has the pod."""
    from tpujob.reconciler.memory import JobMemory

    memory = JobMemory()
    said = s.PodView(
        "train-s0-w0-a0", 0, 0, 0, "Failed", deleting=True, message="SIGTERM while stuck: hang (t.py:1)"
    )
    memory.pod_departing("u1", s.PodView("old", 0, 0, 0, "Failed", deleting=True, message="x"))
    memory.pod_departing("u1", said)
    memory.pod_departing("u1", s.PodView("older", 0, 0, 0, "Failed", deleting=True, message="y"))
    assert [p.name for p in memory.departed("u1", [])] == ["old", "train-s0-w0-a0", "older"]
    assert [p.name for p in memory.departed("u1", [said])] == ["old", "older"]  # the index shows it still
    memory.pod_departing("u1", s.PodView("next", 0, 0, 1, "Failed", deleting=True, message="z"))
    assert [p.name for p in memory.departed("u1", [])] == ["next"]  # a newer attempt's replace them

    job = running_job(deadline=30)
    stalled = after(job, step(after(job, step(job, T0, sample(7))), T0 + dt.timedelta(seconds=30), sample(7)))
    observed = s.Observed(
        job=stalled, now=T0 + dt.timedelta(seconds=61), service_exists=True, departed=(said,)
    )
    quoted = s.decide(observed)
    assert quoted.status.progress.last_words == "slice 0 worker 0: SIGTERM while stuck: hang (t.py:1)"


# --- the reads' pace ---------------------------------------------------------------------------------


def test_reads_are_paced_to_a_fixed_rate_in_all_however_many_jobs_run():
    # 100 jobs at 10 reads/s: each is read every 10 s; 10,000 jobs: every 1,000 s.
    assert not read_due(last_read=0.0, now=9.9, jobs_read=100, reads_per_second=10, urgent=False)
    assert read_due(last_read=0.0, now=10.0, jobs_read=100, reads_per_second=10, urgent=False)
    assert not read_due(last_read=0.0, now=999.0, jobs_read=10_000, reads_per_second=10, urgent=False)
    # A job never read, or one whose stall deadline came, is read at once.
    assert read_due(last_read=None, now=0.0, jobs_read=10_000, reads_per_second=10, urgent=False)
    assert read_due(last_read=0.0, now=0.1, jobs_read=10_000, reads_per_second=10, urgent=True)


def test_the_reader_counts_the_jobs_it_reads_and_forgets_deleted_ones():
    now = [0.0]
    reader = ProgressReader(reads_per_second=1, clock=lambda: now[0])
    assert reader.due("a", urgent=False) and reader.due("b", urgent=False)  # first reads: at once
    now[0] = 1.5
    assert not reader.due("a", urgent=False)  # two jobs at 1 read/s: every 2 s
    reader.records.forget("b")  # its job is gone: its record, and the read time in it, with it
    assert reader.due("a", urgent=False)  # one job: every 1 s
    assert reader.records.uids() == {"a"}


def test_a_read_is_urgent_for_a_new_attempt_and_when_the_stall_deadline_comes():
    job = running_job(deadline=600)
    assert s.read_urgent(job, T0)  # no progress record for the attempt yet
    read = Progress(step=5, step_time="2026-11-24T12:00:00Z", read_time="2026-11-24T12:00:00Z", attempt=0)
    job = job.model_copy(update={"status": job.status.model_copy(update={"progress": read})})
    assert not s.read_urgent(job, T0 + dt.timedelta(seconds=599))
    assert s.read_urgent(job, T0 + dt.timedelta(seconds=600))
    restarted = job.model_copy(update={"status": job.status.model_copy(update={"attempt": 1})})
    assert s.read_urgent(restarted, T0)
    assert not s.read_urgent(
        running_job().model_copy(update={"status": job.status}), T0 + dt.timedelta(days=1)
    )


def test_a_first_step_before_the_fault_or_after_now_is_not_taken_as_the_recovery():
    """The progress line is the worker's to write: a first step outside the fault and now is left unread."""
    fault = RestartRecord(attempt=1, reason="Stalled", fault_time="2026-11-24T11:59:40Z")
    job = running_job(attempt=1, restart_history=[fault])
    for first_step in (T0.timestamp() - 30, T0.timestamp() + 30):
        line = progress_line(400, T0.timestamp() - 2, firstStepAt=first_step)
        done = step(job, T0, pods=succeeded_pods(job, 1, line))
        assert done.status.progress.step == 400 and done.status.restart_history[-1].recovered_time is None


def test_a_page_without_the_target_keeps_the_one_read_before_even_across_a_restart():
    job = running_job(attempt=1, progress=progress_read(170))
    read = step(job, T0, sample(160, attempt=1, target=None)).status.progress
    assert (read.attempt, read.step, read.target_steps, read.percent) == (1, 160, 400, 40)
