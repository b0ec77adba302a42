"""Worker 0's step counter, read from its metrics endpoint while the job runs: the trainer contract's series
in Prometheus' text format (README, "Bring your own image"). The operator reaches pods as Prometheus does,
by pod IP and the trainer container's port named `metrics`; the trainer needs no Kubernetes permission.

Reads are paced: each job is read at most every (jobs being read / TPUJOB_PROGRESS_READS_PER_SECOND)
seconds, so the reads and the status writes a moving step brings stay within a fixed share of the request
budget however many jobs run (10,000 running jobs at one read per 30 s resync would be 333 reads and 333
status writes a second, over the default 50 requests/s). A job whose stall deadline has come is read at
once: a trainer is never restarted as Stalled on a stale read."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tpujob import status as s
from tpujob.records import JobRecord, JobRecords

# The contract's series (tpujob_trainer_*: trainer-image/tpujob_trainer/metrics.py serves them).
STEP = "tpujob_trainer_global_step"
TARGET_STEPS = "tpujob_trainer_target_steps"
CHECKPOINT_STEP = "tpujob_trainer_last_checkpoint_step"
CHECKPOINT_TIME = "tpujob_trainer_last_checkpoint_timestamp_seconds"
# A read must not hold a pass: the endpoint answers in milliseconds or is not there.
READ_TIMEOUT_SECONDS = 2.0


def parse(text: str, attempt: int) -> s.ProgressSample | None:
    """The sample in a /metrics page; None without a step counter. Zero gauges are unset values (the
    trainer sets every series at start: a target or checkpoint of 0 is none yet)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (STEP, TARGET_STEPS, CHECKPOINT_STEP, CHECKPOINT_TIME) and not sample.labels:
                values[sample.name] = sample.value
    if STEP not in values:
        return None

    def whole(name: str) -> int | None:
        return int(values[name]) if values.get(name) else None

    return s.ProgressSample(
        attempt=attempt,
        step=int(values[STEP]),
        target_steps=whole(TARGET_STEPS),
        checkpoint_step=whole(CHECKPOINT_STEP),
        checkpoint_time=values.get(CHECKPOINT_TIME) or None,
    )


def read_due(
    last_read: float | None, now: float, jobs_read: int, reads_per_second: float, urgent: bool
) -> bool:
    """Whether to read a job's progress now (monotonic seconds): never read yet, a stall deadline due
    (`urgent`), or its turn in a round that reads every job once per jobs_read / reads_per_second seconds."""
    if last_read is None or urgent:
        return True
    return now - last_read >= max(jobs_read, 1) / reads_per_second


class ProgressReader:
    def __init__(
        self,
        timeout: float = READ_TIMEOUT_SECONDS,
        reads_per_second: float = s.DEFAULT_PROGRESS_READS_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
        records: JobRecords | None = None,
    ) -> None:
        self.timeout = timeout
        self.reads_per_second = reads_per_second
        self._clock = clock
        # When each job's progress was last read: a field of its record, forgotten with it.
        self.records = records if records is not None else JobRecords()

    def due(self, uid: str, urgent: bool) -> bool:
        """Whether the job's turn to be read has come; if so, it is counted as read now."""
        now = self._clock()
        jobs_read = self.records.count(lambda record: record.progress_read is not None)

        def take(record: JobRecord) -> bool:
            if not read_due(record.progress_read, now, jobs_read, self.reads_per_second, urgent):
                return False
            record.progress_read = now
            return True

        return self.records.update(uid, take)

    def read(self, pod: s.PodView) -> tuple[s.ProgressSample | None, str]:
        """(the sample, "") or (None, why not) for a running worker pod."""
        if not pod.ip or not pod.metrics_port:
            return None, "the pod declares no metrics port, or has no IP yet"
        url = f"http://{pod.ip}:{pod.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as answer:
                text = answer.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError) as error:
            return None, f"GET {url}: {error}"
        try:
            # A pod kept through a narrow restart serves the attempt its trainer was told (restart in place).
            sample = parse(text, max(pod.attempt, pod.restart_attempt))
        except ValueError as error:
            return None, f"GET {url}: not Prometheus text ({error})"
        return (sample, "") if sample is not None else (None, f"GET {url}: no {STEP}")
