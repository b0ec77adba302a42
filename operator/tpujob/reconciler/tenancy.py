"""A namespace's chips across the passes of its jobs (tenancy policy maxChips): the others' count, and the
admission of a job that fits, taken at once under one lock, so two jobs that each fit alone are never both
admitted past the limit by passes running side by side. What counts is status/tenancy.py's; this only reads
the jobs the watch has (the glue hands it `jobs_of`) and remembers, in each job's record, the chips it
admitted the job with until the job's status shows it."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import pydantic

from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api.status import Phase, TPUJobStatus
from tpujob.records import JobRecord, JobRecords
from tpujob.status.cost import job_chips


def _counted(body: dict[str, Any]) -> tuple[int, bool]:
    """What a watched job counts, and whether its status shows it admitted. A body the model refuses holds
    nothing: its passes fail it as InvalidSpec and release what it had."""
    try:
        job = TPUJob.model_validate(body)
    except pydantic.ValidationError:
        return 0, False
    return s.chips_counted(job), (job.status or TPUJobStatus()).start_time is not None


class NamespaceChips:
    """What it keeps of a job lives in the job's own record (records.py): forgetting the job forgets it."""

    def __init__(self, records: JobRecords) -> None:
        self._lock = threading.Lock()
        self._records = records
        # The namespace's jobs as the TPUJob watch has them (set by the glue; none before it is).
        self.jobs_of: Callable[[str], list[dict[str, Any]]] = lambda _namespace: []

    def admit(self, job: TPUJob, limit: int) -> s.ChipBudget:
        """The others' chips in the job's namespace; the job is counted from now on if it fits."""
        namespace, uid = job.metadata.namespace or "default", job.metadata.uid or ""
        with self._lock:
            others = 0
            for body in self.jobs_of(namespace):
                other = body["metadata"].get("uid") or ""
                if other and other != uid:
                    others += self._records.update(
                        other, functools.partial(_count, seen=self._seen(other, body))
                    )
            budget = s.ChipBudget(namespace, limit, others)
            chips = job_chips(job)
            if budget.fits(chips):

                def admitted(record: JobRecord) -> None:
                    record.chips_admitted = chips

                self._records.update(uid, admitted)
            return budget

    def _seen(self, uid: str, body: dict[str, Any]) -> tuple[str, int, bool]:
        """What the job's body counts: remembered for its resourceVersion, else read (outside the records'
        lock, which every pass takes: validating a body is the slow part)."""
        version = body["metadata"].get("resourceVersion") or ""
        seen: tuple[str, int, bool] | None = self._records.read(uid, lambda record: record.chips_seen, None)
        if seen is None or not version or seen[0] != version:
            seen = (version, *_counted(body))
        return seen

    def settled(self, uid: str, status: TPUJobStatus) -> None:
        """After a pass: a job not admitted (held, suspended) or ended counts only by its own status."""
        if status.start_time is None or status.phase in (*s.TERMINAL_PHASES, Phase.SUSPENDED):

            def released(record: JobRecord) -> None:
                record.chips_admitted = None

            with self._lock:
                self._records.read(uid, released, None)


def _count(record: JobRecord, *, seen: tuple[str, int, bool]) -> int:
    """What a watched job counts: by its status (`seen`: read again only when its resourceVersion changed);
    or, until its status shows it admitted, what this process admitted it with (the status write is sent in
    the background, and coalesced)."""
    record.chips_seen = seen
    _, chips, shown = seen
    if shown:
        record.chips_admitted = None  # its own status counts it now
    return max(chips, record.chips_admitted or 0)
