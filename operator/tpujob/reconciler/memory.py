"""What the operator remembers between passes about a job: what the watch may not have shown yet (its own
status writes, pods and Services just created) and GKE's recent refusals. Each fact is a field of the job's
record (tpujob.records), so forgetting the job forgets them all; this is the pass' view of them.
Thread-safe: passes run in worker threads, and the records take one lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tpujob import status as s
from tpujob.records import JobRecord, JobRecords


class JobMemory:
    def __init__(self, records: JobRecords | None = None) -> None:
        self.records = records if records is not None else JobRecords()
        # Namespaces whose workers' NetworkPolicy a pass made (or found) and the watch has not shown yet.
        # Not a job's fact: one policy guards every job of its namespace (render/network.py).
        self._policies_in_flight: set[str] = set()
        self._policies_lock = threading.Lock()  # one pass makes a namespace's policy; the others wait for it

    # --- status writes ---------------------------------------------------------------------------

    def current_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """The job's status: the last one we decided, if any (the watch shows it later, or it is still being
        written). Once the watch shows that very status it is forgotten here: the watched body, which only
        moves forward, holds it from then on, and a job at rest keeps one copy rather than two."""
        uid, watched = body["metadata"]["uid"], body.get("status") or {}

        def look(record: JobRecord) -> dict[str, Any] | None:
            if record.written is not None and record.written == watched:
                record.written = None
            return record.written

        written = self.records.read(uid, look, None)
        return written if written is not None else dict(watched)

    def decided(self, uid: str, status: dict[str, Any]) -> None:
        """A pass decided this status: the job's current one from now on, before it is written."""

        def keep(record: JobRecord) -> None:
            record.written = status

        self.records.update(uid, keep)

    def written(self, uid: str, resource_version: str) -> None:
        """A status write answered with this version (not kept for a job forgotten meanwhile)."""

        def keep(record: JobRecord) -> None:
            record.written_version = resource_version

        self.records.read(uid, keep, None)

    def is_own_write(self, body: Mapping[str, Any]) -> bool:
        meta = body["metadata"]
        version = self.records.read(meta["uid"], lambda r: r.written_version, None)
        return version is not None and version == meta.get("resourceVersion")

    # --- creates the watch has not shown yet -----------------------------------------------------

    def pods_created(self, uid: str, names: Iterable[str]) -> None:
        def keep(record: JobRecord) -> None:
            record.pods_in_flight = record.pods_in_flight | frozenset(names)

        self.records.update(uid, keep)

    def pods_in_flight(self, uid: str, pods: Iterable[s.PodView]) -> frozenset[str]:
        """Pods created and not yet seen; those the watch now shows are dropped."""
        seen = {p.name for p in pods}

        def look(record: JobRecord) -> frozenset[str]:
            if record.pods_in_flight & seen:
                record.pods_in_flight = record.pods_in_flight - seen or frozenset()
            return record.pods_in_flight

        return self.records.read(uid, look, frozenset())

    def pods_not_created(self, uid: str, names: Iterable[str]) -> None:
        """A create call failed: not in flight, so the next pass creates them again (a pod that was created
        after all answers 409 then, which is fine)."""

        def drop(record: JobRecord) -> None:
            record.pods_in_flight = record.pods_in_flight - frozenset(names) or frozenset()

        self.records.read(uid, drop, None)

    def pods_refused(
        self, uid: str, message: str | None, backoff_seconds: float = s.REJECTED_BACKOFF_BASE_SECONDS
    ) -> float:
        """The API server refused this job's pod creates (message), or took them (None). The seconds
        before they are asked again: `backoff_seconds`, doubled with each refusal in a row, capped."""

        def took(record: JobRecord) -> float:
            record.pods_refused, record.pod_refusals, record.pods_refused_until = "", 0, 0.0
            return 0.0

        def refused(record: JobRecord) -> float:
            record.pod_refusals += 1
            delay = s.rejected_backoff_seconds(record.pod_refusals, backoff_seconds)
            record.pods_refused, record.pods_refused_until = message or "", time.monotonic() + delay
            return delay

        if message is None:
            return self.records.read(uid, took, 0.0)
        return self.records.update(uid, refused)

    def pod_refusal(self, uid: str) -> tuple[str, float]:
        """Why the API server refused the job's last pod creates ("" once a create passed), and the seconds
        left before they may be asked again."""
        return self.records.read(
            uid, lambda r: (r.pods_refused, max(r.pods_refused_until - time.monotonic(), 0.0)), ("", 0.0)
        )

    def pod_departing(self, job_uid: str, pod: s.PodView) -> None:
        """A deleted worker pod whose trainer ended with a message, as the watch last showed it."""

        def keep(record: JobRecord) -> None:
            kept = record.departed = record.departed or {}
            if any(other.attempt < pod.attempt for other in kept.values()):
                kept.clear()
            if all(other.attempt <= pod.attempt for other in kept.values()):
                kept[pod.name] = pod

        self.records.update(job_uid, keep)

    def departed(self, job_uid: str, seen: Iterable[s.PodView]) -> tuple[s.PodView, ...]:
        """Those of them the watch no longer shows."""
        names = {pod.name for pod in seen}
        kept: list[s.PodView] = self.records.read(job_uid, lambda r: list((r.departed or {}).values()), [])
        return tuple(p for p in kept if p.name not in names)

    def is_own_create(self, pod: Mapping[str, Any]) -> bool:
        """The watch's first sight of a pod a pass created, as it was created (not yet scheduled): that pass
        counted it in flight already, so it needs no pass of its own. Its next change does."""
        meta, status = pod["metadata"], pod.get("status") or {}
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
        if (
            not owners
            or status.get("phase", "Pending") != "Pending"
            or (pod.get("spec") or {}).get("nodeName")
        ):
            return False
        return self.records.read(owners[0]["uid"], lambda r: meta["name"] in r.pods_in_flight, False)

    # --- the job's Service: created by a pass, until the watch shows it ------------------------------

    SERVICE = "service_in_flight"

    def created(self, uid: str, what: str) -> None:
        """A pass created the job's Service (`what`: SERVICE)."""
        self.records.update(uid, lambda record: setattr(record, what, True))

    def service_failed(self, uid: str) -> None:
        """The job's Service was refused: not in flight, so the job's next pass asks again (a job forgotten
        meanwhile gets no record back)."""
        self.records.read(uid, lambda record: setattr(record, JobMemory.SERVICE, False), None)

    def exists(self, uid: str, what: str, seen: bool) -> bool:
        """Seen by its watch, or created and not yet seen; once seen, a later absence is a deletion."""

        def look(record: JobRecord) -> bool:
            if seen:
                setattr(record, what, False)
            return seen or bool(getattr(record, what))

        return self.records.read(uid, look, seen)

    # --- the namespace's workers' NetworkPolicy: made by the first pass that needs it -----------------

    def policy_exists(self, namespace: str, seen: bool) -> bool:
        """Seen by its watch, or made by a pass and not yet seen; once seen, a later absence is a deletion."""
        with self._policies_lock:
            if seen:
                self._policies_in_flight.discard(namespace)
            return seen or namespace in self._policies_in_flight

    def ensure_policy(self, namespace: str, make: Callable[[], object]) -> None:
        """`make()` the namespace's policy unless a pass made it already: the passes of a burst of jobs in a
        new namespace, which all saw it missing, make it once. Rare (once per namespace): one lock for all."""
        with self._policies_lock:
            if namespace not in self._policies_in_flight:
                make()
                self._policies_in_flight.add(namespace)

    def policy_gone(self, namespace: str) -> None:
        """Its watch saw the policy deleted: the next pass of the namespace's jobs makes it again."""
        with self._policies_lock:
            self._policies_in_flight.discard(namespace)

    # --- GKE refusals ----------------------------------------------------------------------------

    def refusals(self, uid: str) -> dict[int, s.GKEError]:
        """GKE's refusals of this job's creates while their backoff lasts; {} after."""

        def look(record: JobRecord) -> dict[int, s.GKEError]:
            until, errors = record.gke_refused or (0.0, {})
            if time.monotonic() >= until:
                record.gke_refused = None
                return {}
            return errors

        return self.records.read(uid, look, {})

    def refused(
        self,
        uid: str,
        errors: dict[int, s.GKEError],
        poll_seconds: float,
        backoff_seconds: float = s.REJECTED_BACKOFF_BASE_SECONDS,
    ) -> float:
        """Refused creates are not asked again before the delay returned: the polling interval
        (`poll_seconds`) for transient refusals, a growing one from `backoff_seconds` for permanent ones."""

        def keep(record: JobRecord) -> float:
            if any(error.permanent for error in errors.values()):
                record.rejections += 1
                delay = s.rejected_backoff_seconds(record.rejections, backoff_seconds)
            else:
                record.rejections = 0
                delay = poll_seconds
            record.gke_refused = (time.monotonic() + delay, errors)
            return delay

        return self.records.update(uid, keep)

    def accepted(self, uid: str) -> None:
        """Every create of the pass was accepted: the permanent-refusal count starts over."""

        def keep(record: JobRecord) -> None:
            record.rejections = 0

        self.records.read(uid, keep, None)
