"""A namespace's chips across the passes of its jobs (tenancy policy maxChips): the others' count, and the
admission of a job that fits, taken at once under one lock, so two jobs that each fit alone are never both
admitted past the limit by passes running side by side. What counts is status/tenancy.py's; this only reads
the jobs the watch has (the glue hands it `jobs_of`) and remembers the jobs it admitted until their status
shows it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pydantic

from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api.status import Phase, TPUJobStatus
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
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Jobs this process admitted whose status (as the watch has it) does not show it yet: uid ->
        # (namespace, chips). The status write is sent in the background, and coalesced.
        self._admitted: dict[str, tuple[str, int]] = {}
        # The namespace's jobs as the TPUJob watch has them (set by the glue; none before it is).
        self.jobs_of: Callable[[str], list[dict[str, Any]]] = lambda _namespace: []
        # What each watched job counts, by namespace and UID, with the resourceVersion it was read at: a job
        # waiting for room looks at its namespace every pass, and validates only the jobs that changed.
        self._seen: dict[str, dict[str, tuple[str, int, bool]]] = {}

    def admit(self, job: TPUJob, limit: int) -> s.ChipBudget:
        """The others' chips in the job's namespace; the job is counted from now on if it fits."""
        namespace, uid = job.metadata.namespace or "default", job.metadata.uid or ""
        with self._lock:
            counted: dict[str, int] = {}
            before, seen = self._seen.get(namespace, {}), {}
            for body in self.jobs_of(namespace):
                other = body["metadata"].get("uid") or ""
                if other == uid:
                    continue
                version = body["metadata"].get("resourceVersion") or ""
                known = before.get(other)
                if known is None or not version or known[0] != version:
                    known = (version, *_counted(body))
                seen[other] = known
                _, chips, shown = known
                counted[other] = chips
                if shown:
                    self._admitted.pop(other, None)  # its own status counts it now
            for other, (where, chips) in list(self._admitted.items()):
                if where != namespace or other == uid:
                    continue
                if other not in counted:  # deleted meanwhile
                    del self._admitted[other]
                else:
                    counted[other] = max(counted[other], chips)
            self._seen[namespace] = seen
            budget = s.ChipBudget(namespace, limit, sum(counted.values()))
            chips = job_chips(job)
            if budget.fits(chips):
                self._admitted[uid] = (namespace, chips)
            return budget

    def settled(self, uid: str, status: TPUJobStatus) -> None:
        """After a pass: a job not admitted (held, suspended) or ended counts only by its own status."""
        if status.start_time is None or status.phase in (*s.TERMINAL_PHASES, Phase.SUSPENDED):
            with self._lock:
                self._admitted.pop(uid, None)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._admitted.pop(uid, None)
