"""A namespace's chips across the passes of its jobs (tenancy policy maxChips), the ledger the pure gate
(status/tenancy.py) reads: the others' count (`counts`, when the pass observes), and the reservation of the
chips a decision admitted a job with (`reserve`, first when acting: the count checked again and the job
counted, under one lock, so two jobs that each fit alone are never both admitted past the limit by passes
running side by side; the later one's pass settles it as held), released when the pass settles (`settled`).

The count is kept, not gathered: the TPUJob watch hands every version of a job to `seen` (the glue, for
the namespaces that have a limit), which reads what it counts once per resourceVersion, and each job's
share lives in its record, summed per namespace as the records change (records.JobRecords.update_chips).
A pass reads that sum: its cost does not grow with the namespace's jobs (it decoded every one of
them, under this lock, at each admission: 43 ms a pass at 3,000 pending). Until a job's status shows it
admitted, it counts with the chips this process admitted it with (the status write is sent in the
background, and coalesced)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api.status import Phase, TPUJobStatus
from tpujob.records import JobRecord, JobRecords, counted_chips

log = logging.getLogger(__name__)


def counted(body: Mapping[str, Any]) -> tuple[int, bool]:
    """What a watched job counts against its namespace, and whether its status shows it admitted: the one
    place a stored job's chips are read. A body that cannot be read as a TPUJob (stored before a rule, or
    written around the schema) holds nothing here: its own passes fail it as InvalidSpec and release what it
    had."""
    job = TPUJob.model_validate(dict(body))
    return s.chips_counted(job), (job.status or TPUJobStatus()).start_time is not None


class NamespaceChips:
    """What it keeps of a job lives in the job's own record (records.py): forgetting the job forgets it."""

    def __init__(self, records: JobRecords, limited: Callable[[str], bool] = lambda _namespace: True) -> None:
        self._lock = threading.Lock()
        self._records = records
        self._limited = limited  # whether a namespace has a limit: only then are its jobs counted
        self.decodes = 0  # stored jobs read so far (a test counts them)

    def seen(self, body: Mapping[str, Any]) -> None:
        """A version of a job from the watch: what it counts, read once per resourceVersion (outside the
        lock every admission takes: reading a body is the slow part). A job that cannot be read counts
        nothing, with one WARNING per version; nothing of it is raised into the watch."""
        meta = body.get("metadata") or {}
        namespace, uid, version = meta.get("namespace"), meta.get("uid"), meta.get("resourceVersion") or ""
        if not isinstance(namespace, str) or not isinstance(uid, str) or not self._limited(namespace):
            return
        known = self._records.read(uid, lambda record: record.chips_seen, None)
        if known is not None and version and known[0] == version:
            return
        self.decodes += 1
        try:
            chips, shown = counted(body)
        except Exception as error:  # any stored body: a ValidationError, or a type pydantic never saw
            log.warning(
                "TPUJob %s/%s (resourceVersion %s) cannot be read, so it counts no chips against the "
                "namespace's limit: %s",
                namespace,
                meta.get("name"),
                version,
                str(error).splitlines()[0] if str(error) else type(error).__name__,
            )
            chips, shown = 0, False

        def count(record: JobRecord) -> None:
            record.chips_namespace = namespace
            record.chips_seen = (str(version), chips, shown)
            if shown:
                record.chips_admitted = None  # its own status counts it now

        with self._lock:
            self._records.update_chips(uid, count)

    def counts(self, job: TPUJob, limit: int) -> s.ChipCounts:
        """What the pure gate reads (status/tenancy.chip_budget): the others' chips in the job's namespace,
        and the admission this process vouches for. Reads only: the chips are reserved when acting."""
        namespace, uid = job.metadata.namespace or "default", job.metadata.uid or ""
        with self._lock:
            nothing: tuple[int, str | None] = (0, None)
            own, vouched = self._records.read(uid, _own_share(namespace), nothing)
            return s.ChipCounts(namespace, limit, self._records.namespace_chips(namespace) - own, vouched)

    def reserve(self, uid: str, wanted: s.ChipReservation) -> s.ChipBudget:
        """The namespace's budget as it is now; the job counted from now on with `wanted.chips` if they fit
        (a pass side by side may have taken them since `counts`)."""
        namespace = wanted.namespace
        with self._lock:
            nothing: tuple[int, str | None] = (0, None)
            own = self._records.read(uid, _own_share(namespace), nothing)[0]
            budget = s.ChipBudget(namespace, wanted.limit, self._records.namespace_chips(namespace) - own)
            if budget.fits(wanted.chips):

                def admitted(record: JobRecord) -> None:
                    record.chips_namespace = namespace
                    record.chips_admitted = wanted.chips

                self._records.update_chips(uid, admitted)
            return budget

    def settled(self, uid: str, status: TPUJobStatus) -> None:
        """After a pass: a job not admitted (held, suspended) or ended counts only by its own status. One
        the pass kept admitted is vouched for with its startTime (a pass keeps only an admission it made,
        or one it could vouch for, or judged again)."""
        done = status.start_time is None or status.phase in (*s.TERMINAL_PHASES, Phase.SUSPENDED)

        def released(record: JobRecord) -> None:
            record.chips_vouched = None if done else status.start_time
            if done:
                record.chips_admitted = None

        with self._lock:
            self._records.update_chips(uid, released, make=not done)


def _own_share(namespace: str) -> Callable[[JobRecord], tuple[int, str | None]]:
    """What a job counts already in `namespace` (a job held once counts what its pools still hold), and the
    startTime of the admission this process made or kept for it."""

    def share(record: JobRecord) -> tuple[int, str | None]:
        return counted_chips(record) if record.chips_namespace == namespace else 0, record.chips_vouched

    return share
