"""Everything the operator keeps about one job between passes, in one record, and the one map of them.

A job's facts used to sit in a dozen maps across the reconciler's memory, the status writer, the progress
reader and the metrics' collectors, kept consistent by a chain of `forget` calls; a fact that missed its
line outlived its job. Here a job is one `JobRecord` in `JobRecords`, by UID: forgetting it is one pop.
What is not here is not kept per job beyond a pass: the work queue's state (a job queued, in flight, its
timer, its lock) lasts only while the job waits or runs, and the watch-fed indexes mirror the API server.

Thread-safe through one lock: passes run in worker threads, the collectors read at scrape time.

One sum across records is kept as they change, not gathered: the chips each namespace's jobs count against
its limit (reconciler/tenancy.py), so an admission reads one number however many jobs the namespace has.
A record's share of it changes only through `update_chips`, and leaves the sum with the record.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class JobRecord:
    """Containers are immutable or None until used: a job at rest holds no empty set or dict."""

    # --- what the watch has not shown yet (reconciler/memory.py) ---
    # The status this operator last decided, written or on its way: the watch may not have delivered it.
    written: dict[str, Any] | None = None
    # The resourceVersion of its last status write (the watch's echo of it is skipped).
    written_version: str | None = None
    pods_in_flight: frozenset[str] = frozenset()  # created, maybe not yet seen by the watch
    service_in_flight: bool = False
    # GKE's refusals of pool creates, not asked again before the monotonic time; permanent ones in a row.
    gke_refused: tuple[float, dict[int, Any]] | None = None
    rejections: int = 0
    pods_refused: str = ""  # the API server's refusal of the last pod creates ("" once one passed)
    pod_refusals: int = 0  # refused pod creates in a row: their backoff grows with it
    pods_refused_until: float = 0.0  # the monotonic time before which refused pods are not asked again
    # Deleted workers' last state (the newest attempt's), for the pass that quotes their last words.
    departed: dict[str, Any] | None = None
    # --- metrics (metrics.py: the pass recorder and the collectors that read the records) ---
    last_seen: tuple[str, int] | None = None  # the last pass: when (a status time), chips held then
    pools_created: dict[str, dt.datetime] | None = None  # pool -> when asked for; until it is ready
    phase: str | None = None
    waiting_since: float | None = None  # Unix time the phase's wait began (status/waiting.py)
    chips: tuple[str, str, int] | None = None  # (tpu type, capacity mode, chips held)
    maintenance: float | None = None  # Unix time of the next host maintenance announced
    # Waiting in a ClusterQueue: (its name, Unix time of the estimated start or None: unknown).
    start_estimate: tuple[str, float | None] | None = None
    # --- its namespace's chip limit (reconciler/tenancy.py) ---
    chips_namespace: str | None = None  # the namespace whose limit it counts against (None: counts nothing)
    chips_admitted: int | None = None  # admitted by this process with so many chips; its status not yet
    chips_seen: tuple[str, int, bool] | None = None  # (resourceVersion, chips it counts, status shows it)
    chips_vouched: str | None = None  # the startTime of the admission this process made or kept
    # --- the progress reader (trainer_metrics.py) and the resync ---
    progress_read: float | None = None  # when worker 0's step counter was last read (monotonic)
    last_pass: float | None = None  # when the last pass began (the event loop's clock)


def counted_chips(record: JobRecord) -> int:
    """The chips a record counts against its namespace: as its status shows, or as this process admitted
    it before the status shows it, whichever is more."""
    if record.chips_namespace is None:
        return 0
    seen = record.chips_seen[1] if record.chips_seen is not None else 0
    return max(seen, record.chips_admitted or 0)


class JobRecords:
    """One record per job UID. `update` and `read` run a function on a job's record under the lock;
    `forget` drops the whole record."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._records: dict[str, JobRecord] = {}
        self._namespace_chips: dict[str, int] = {}  # namespace -> sum of its records' counted_chips

    def update_chips(self, uid: str, change: Callable[[JobRecord], None], *, make: bool = True) -> None:
        """`change` the chip fields of the job's record (made if `make`), the namespace's sum with them."""
        with self._lock:
            record = self._records.get(uid)
            if record is None:
                if not make:
                    return
                record = self._records[uid] = JobRecord()
            self._add_chips(record, -1)
            change(record)
            self._add_chips(record, +1)

    def namespace_chips(self, namespace: str) -> int:
        with self._lock:
            return self._namespace_chips.get(namespace, 0)

    def _add_chips(self, record: JobRecord, sign: int) -> None:
        chips = counted_chips(record)
        if chips and record.chips_namespace is not None:
            total = self._namespace_chips.get(record.chips_namespace, 0) + sign * chips
            if total:
                self._namespace_chips[record.chips_namespace] = total
            else:
                self._namespace_chips.pop(record.chips_namespace, None)

    def __len__(self) -> int:
        return len(self._records)

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._records)

    def update(self, uid: str, change: Callable[[JobRecord], T]) -> T:
        """`change` applied to the job's record, made if the job has none."""
        with self._lock:
            record = self._records.get(uid)
            if record is None:
                record = self._records[uid] = JobRecord()
            return change(record)

    def read(self, uid: str, look: Callable[[JobRecord], T], default: T) -> T:
        """`look` at the job's record; `default` for a job with none (none is made)."""
        with self._lock:
            record = self._records.get(uid)
            return default if record is None else look(record)

    def count(self, which: Callable[[JobRecord], bool]) -> int:
        with self._lock:
            return sum(1 for record in self._records.values() if which(record))

    def gather(self, look: Callable[[JobRecord], T | None]) -> list[T]:
        """`look` at every record (a collector's scrape), the values that are not None."""
        with self._lock:
            values = [look(record) for record in self._records.values()]
        return [value for value in values if value is not None]

    def forget(self, uid: str) -> None:
        with self._lock:
            record = self._records.pop(uid, None)
            if record is not None:
                self._add_chips(record, -1)

    def retain(self, live: set[str]) -> list[str]:
        """Forget every job not in `live` (the resync's safety net: a pass racing its job's deletion may
        have made a record after the job was forgotten); the UIDs forgotten."""
        with self._lock:
            gone = [uid for uid in self._records if uid not in live]
            for uid in gone:
                self._add_chips(self._records.pop(uid), -1)
        return gone

    def forget_all(self) -> None:
        """Everything but what the TPUJob watch showed of each job's chips: the watch runs on, and sends
        a job again only when it changes."""
        with self._lock:
            kept = {
                uid: JobRecord(chips_namespace=record.chips_namespace, chips_seen=record.chips_seen)
                for uid, record in self._records.items()
                if record.chips_seen is not None
            }
            self._records.clear()
            self._namespace_chips.clear()
            for uid, record in kept.items():
                self._records[uid] = record
                self._add_chips(record, +1)
