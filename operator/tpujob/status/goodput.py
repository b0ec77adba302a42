"""Goodput accounting, pure: how a job's time on its TPUs splits into productive time and lost time
("badput"), in the categories of Google's public goodput definitions (the `ml-goodput-measurement` package's
BadputType: TPU initialization, training prep, program startup, data loading, checkpoint save / restore,
wasted progress from disruption, other).

Two sources, both already in a decision's hands:

- the status' own history: the phase the job was in since the time last accounted (`accounted_until`).
  Pending / Provisioning is waiting for capacity and TPU initialization; Starting is training prep (pods
  scheduled, not all running); Restarting is infrastructure recovery; Running is tentatively productive.
  Suspended and finished jobs hold no TPUs: not accounted.
- the trainer's progress line (the last line of its termination message, `tpujob-progress {json}`, see
  trainer-image/tpujob_trainer/termination.py): once an attempt's pods have ended, the parts of its Running
  time that were not training are moved out of productive: program startup (start to first step), input
  waits, checkpoint saves and restores, and, when the attempt was disrupted, the steps since its last
  checkpoint (the next attempt redoes them).

Attempts that end with no chance to write their last word:
- killed without warning (SIGKILL after the grace period, the OOM killer, a crash in native code): the
  trainer keeps its progress line in the termination log while it trains (rewritten on every checkpoint save
  and every few seconds) and the kubelet reads that file whatever ended the container, so the line is at
  most that stale. Its steps lost are those it had reported (it may have done a few more, up to one write
  interval's worth, which stepsLost does not count), and the seconds lost run to the later of the line's
  endedAt and the container's finishedAt, so they cover the time after the last write too.
- with no progress line at all (its pods vanished with their node, or the trainer died before training):
  counted in unreportedAttempts. When a later attempt reports, the Running time of such attempts (as the
  operator saw it, `runs`) after the checkpoint that later attempt resumed from (its progress line's
  resumedCheckpointAt) was lost: it moves to wastedProgressFromDisruption; before that checkpoint it was
  kept, and stays productive (including the unknown start-up of the attempt). Their steps lost are unknown:
  not in stepsLost. An unreported last attempt (the job ended after it) stays productive.

Accounted only when the phase changes or an attempt's progress arrives (not on every pass: the status is not
rewritten for the clock alone), so the figures are exact at each transition and final once the job ends.
Seconds are wall-clock seconds of the job (multiply by its chips for chip-seconds); times are second-resolved
like every status timestamp, so a figure may be off by a second per transition.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from tpujob.api.constants import PROGRESS_LINE_PREFIX
from tpujob.api.status import Goodput, GoodputRun, Phase, TPUJobStatus
from tpujob.status import worker_numbers as numbers
from tpujob.status.model import (
    PodView,
    parse_timestamp,
    timestamp,
)

TPU_INITIALIZATION = "tpuInitialization"
TRAINING_PREP = "trainingPrep"
INFRASTRUCTURE_RECOVERY = "infrastructureRecovery"
PROGRAM_STARTUP = "programStartup"
DATA_LOADING = "dataLoading"
CHECKPOINT_SAVE = "checkpointSave"
CHECKPOINT_RESTORE = "checkpointRestore"
WASTED_PROGRESS = "wastedProgressFromDisruption"
OTHER = "other"
CATEGORIES = (
    TPU_INITIALIZATION,
    TRAINING_PREP,
    INFRASTRUCTURE_RECOVERY,
    PROGRAM_STARTUP,
    DATA_LOADING,
    CHECKPOINT_SAVE,
    CHECKPOINT_RESTORE,
    WASTED_PROGRESS,
    OTHER,
)

# Where the time spent in a phase goes; phases not listed (Suspended, finished, none) are not accounted.
PHASE_CATEGORY = {
    Phase.PENDING: TPU_INITIALIZATION,
    Phase.PROVISIONING: TPU_INITIALIZATION,
    Phase.STARTING: TRAINING_PREP,
    Phase.RESTARTING: INFRASTRUCTURE_RECOVERY,
}
PRODUCTIVE = "productive"
# How many attempts' Running times goodput.runs keeps (the status stays small when no attempt reports).
MAX_RUNS = 4


@dataclass(frozen=True)
class Progress:
    """An attempt's progress line, as the trainer wrote it when it exited, else last while training (times:
    Unix seconds)."""

    start_step: int
    step: int
    started_at: float
    ended_at: float
    first_step_at: float | None = None
    checkpoint_step: int | None = None  # the last checkpoint saved, or resumed from
    checkpoint_at: float | None = None  # when it was saved by this attempt (None: resumed, or none)
    checkpoint_save_seconds: float = 0.0
    checkpoint_restore_seconds: float = 0.0
    input_wait_seconds: float = 0.0
    resumed_checkpoint_at: float | None = None  # when the checkpoint this attempt resumed from was saved


_T = TypeVar("_T")
# A progress line longer than this is not the trainer's (it writes ~400 bytes): left unread.
MAX_PROGRESS_LINE = 4096


def parse_progress(message: str) -> Progress | None:
    """The progress line of a termination message, if it has a valid one (the last one wins). The worker
    writes it, so nothing in it is trusted: a line that is too long, not JSON, or holds a number that is not
    finite or not within its bounds (worker_numbers) is no progress line."""
    for line in reversed(message.splitlines()):
        if not line.startswith(PROGRESS_LINE_PREFIX):
            continue
        if len(line) > MAX_PROGRESS_LINE:
            return None
        try:
            facts = json.loads(line[len(PROGRESS_LINE_PREFIX) :], parse_constant=_no_constant)
            return Progress(
                start_step=numbers.step(facts["startStep"], "startStep"),
                step=numbers.step(facts["step"], "step"),
                started_at=numbers.timestamp(facts["startedAt"], "startedAt"),
                ended_at=numbers.timestamp(facts["endedAt"], "endedAt"),
                first_step_at=_optional(numbers.timestamp, facts, "firstStepAt"),
                checkpoint_step=_optional(numbers.step, facts, "checkpointStep"),
                checkpoint_at=_optional(numbers.timestamp, facts, "checkpointAt"),
                checkpoint_save_seconds=numbers.duration(facts.get("checkpointSaveSeconds", 0.0), "save"),
                checkpoint_restore_seconds=numbers.duration(
                    facts.get("checkpointRestoreSeconds", 0.0), "restore"
                ),
                input_wait_seconds=numbers.duration(facts.get("inputWaitSeconds", 0.0), "inputWait"),
                resumed_checkpoint_at=_optional(numbers.timestamp, facts, "resumedCheckpointAt"),
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None
    return None


def _no_constant(name: str) -> float:
    """NaN, Infinity and -Infinity, which Python's json reads and JSON does not have."""
    raise ValueError(f"{name} is not a JSON number")


def _optional(read: Callable[[object, str], _T], facts: dict[str, object], name: str) -> _T | None:
    value = facts.get(name)
    return None if value is None else read(value, name)


def lost_to_disruption(progress: Progress, finished_at: float | None = None) -> tuple[int, float]:
    """(steps, seconds) an ended attempt did past its last checkpoint: what the next attempt redoes. The
    seconds run to the later of the progress line's endedAt and `finished_at` (when the container ended:
    after the trainer's last periodic write if it was killed)."""
    kept = progress.checkpoint_step if progress.checkpoint_step is not None else progress.start_step
    steps = max(progress.step - kept, 0)
    if steps == 0:
        return 0, 0.0
    since = progress.checkpoint_at if progress.checkpoint_at is not None else progress.first_step_at
    ended = max(progress.ended_at, finished_at) if finished_at is not None else progress.ended_at
    return steps, max(ended - (since if since is not None else progress.started_at), 0.0)


def attempt_badput(progress: Progress, disrupted: bool, finished_at: float | None = None) -> dict[str, float]:
    """The parts of an ended attempt's running time that were not productive training, by category."""
    first = progress.first_step_at if progress.first_step_at is not None else progress.ended_at
    lost: dict[str, float] = {
        PROGRAM_STARTUP: max(first - progress.started_at - progress.checkpoint_restore_seconds, 0.0),
        CHECKPOINT_RESTORE: progress.checkpoint_restore_seconds,
        DATA_LOADING: progress.input_wait_seconds,
        CHECKPOINT_SAVE: progress.checkpoint_save_seconds,
    }
    if disrupted:
        lost[WASTED_PROGRESS] = lost_to_disruption(progress, finished_at)[1]
    return {category: seconds for category, seconds in lost.items() if seconds > 0}


def _ended_attempts(pods: Iterable[PodView], after: int) -> list[tuple[int, PodView, Progress]]:
    """Each attempt after `after` whose pods have ended with a progress line: worker 0 of slice 0 if it
    wrote one (the chief), else the first that did; in attempt order."""
    found: dict[int, tuple[PodView, Progress]] = {}
    for pod in sorted(pods, key=lambda p: (p.attempt, p.slice, p.worker)):
        if pod.attempt <= after or pod.attempt in found or pod.phase not in ("Succeeded", "Failed"):
            continue
        progress = parse_progress(pod.message)
        if progress is not None:
            found[pod.attempt] = (pod, progress)
    return [(attempt, pod, progress) for attempt, (pod, progress) in sorted(found.items())]


def account(previous: TPUJobStatus, status: TPUJobStatus, pods: Iterable[PodView], now: dt.datetime) -> None:
    """Bring status.goodput up to `now`: the time since it was last accounted goes to the category of the
    phase the job was in (previous.phase), then the ended attempts' progress moves the parts of their running
    time that were not training out of productive. Does nothing when neither the phase changed nor an
    attempt's progress arrived."""
    goodput = status.goodput.fresh_copy() if status.goodput else Goodput()
    ended = _ended_attempts(pods, goodput.accounted_attempt)
    if goodput.accounted_until is None:
        goodput.accounted_until = timestamp(now)
    elif status.phase == previous.phase and not ended:
        return
    else:
        elapsed = max((now - parse_timestamp(goodput.accounted_until)).total_seconds(), 0.0)
        goodput.accounted_until = timestamp(now)
        if previous.phase == Phase.RUNNING:
            goodput.productive_seconds += elapsed
        elif previous.phase in PHASE_CATEGORY:
            _add(goodput, PHASE_CATEGORY[previous.phase], elapsed)
    _record_run(goodput, previous, status, now)
    for attempt, pod, progress in ended:
        _account_unreported(goodput, attempt, progress)
        disrupted = pod.phase == "Failed"
        finished_at = _unix(pod.finished_at)
        for category, seconds in attempt_badput(progress, disrupted, finished_at).items():
            _move(goodput, category, seconds)
        if disrupted:
            goodput.steps_lost += lost_to_disruption(progress, finished_at)[0]
        goodput.accounted_attempt = attempt
    goodput.runs = [run for run in goodput.runs if run.attempt > goodput.accounted_attempt][-MAX_RUNS:]
    goodput.productive_seconds = round(goodput.productive_seconds, 3)
    total = goodput.productive_seconds + sum(goodput.badput_seconds.values())
    goodput.ratio = round(goodput.productive_seconds / total, 4) if total > 0 else None
    status.goodput = goodput


def _record_run(goodput: Goodput, previous: TPUJobStatus, status: TPUJobStatus, now: dt.datetime) -> None:
    """Remember when each attempt was Running (goodput.runs), for attempts that will report no progress."""
    if previous.phase == Phase.RUNNING and status.phase != Phase.RUNNING:
        for ended in goodput.runs:
            if ended.attempt == previous.attempt and ended.until is None:
                ended.until = timestamp(now)
    if status.phase == Phase.RUNNING and previous.phase != Phase.RUNNING:
        run = next((r for r in goodput.runs if r.attempt == status.attempt), None)
        if run is None:
            goodput.runs.append(GoodputRun(attempt=status.attempt, since=timestamp(now)))
        elif run.until is not None:  # Running again in the same attempt: keep its running time, not the gap
            gap = now - parse_timestamp(run.until)
            run.since, run.until = timestamp(parse_timestamp(run.since) + gap), None


def _account_unreported(goodput: Goodput, attempt: int, progress: Progress) -> None:
    """The attempts that ran between the last accounted one and `attempt` (which reported `progress`) but
    left no progress line: their Running time after the checkpoint `attempt` resumed from was lost."""
    for run in goodput.runs:
        if not goodput.accounted_attempt < run.attempt < attempt or run.until is None:
            continue
        goodput.unreported_attempts += 1
        if progress.resumed_checkpoint_at is not None:
            kept_until = progress.resumed_checkpoint_at
        elif progress.start_step == 0:
            kept_until = float("-inf")  # started over: nothing of it was kept
        else:
            continue  # resumed, but its trainer did not say from when: the loss is unknown
        since, until = parse_timestamp(run.since).timestamp(), parse_timestamp(run.until).timestamp()
        _move(goodput, WASTED_PROGRESS, max(until - max(since, kept_until), 0.0))


def _move(goodput: Goodput, category: str, seconds: float) -> None:
    """Move `seconds` (at most what is productive) from productive to `category`."""
    moved = min(seconds, goodput.productive_seconds)
    goodput.productive_seconds -= moved
    _add(goodput, category, moved)


def _unix(value: str) -> float | None:
    """An RFC 3339 status time as Unix seconds; None if empty or malformed."""
    try:
        return parse_timestamp(value).timestamp() if value else None
    except ValueError:
        return None


def _add(goodput: Goodput, category: str, seconds: float) -> None:
    if seconds > 0:
        goodput.badput_seconds[category] = round(goodput.badput_seconds.get(category, 0.0) + seconds, 3)
