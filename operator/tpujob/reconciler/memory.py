"""What the operator remembers between passes, per job UID: what the watch may not have shown yet (its
own status writes, pods and Services just created) and GKE's recent refusals. Thread-safe: passes run
in worker threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from tpujob import status as s


class JobMemory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The status this operator last decided, written or on its way (status_writer.py): the watch may not
        # have delivered it yet, and deciding on an older one would, for example, count one restart twice.
        self._written: dict[str, dict[str, Any]] = {}
        # The resourceVersion of each job's last status write (its watch echo is skipped).
        self._written_version: dict[str, str] = {}
        # Pods created but maybe not yet seen by the watch.
        self._in_flight: dict[str, set[str]] = {}
        # Jobs whose Service was created but maybe not yet seen by the watch: not created twice.
        self._service_in_flight: set[str] = set()
        # Pool creates GKE refused: not asked again before the monotonic time, whatever event comes first
        # (our own status write, a pod). The count of permanent refusals in a row makes their backoff grow.
        self._gke_refused: dict[str, tuple[float, dict[int, s.GKEError]]] = {}
        # Pod creates the API server refused (a missing PriorityClass, an admission webhook): its message.
        self._pods_refused: dict[str, str] = {}
        self._rejections: dict[str, int] = {}
        # The last state the watch showed of worker pods deleted after their trainer ended with a message
        # (the kubelet reports it just before it removes the pod, often too close for a pass to see it in the
        # index): their last words, for the pass that quotes them. Only the newest attempt's are kept.
        self._departed: dict[str, dict[str, s.PodView]] = {}

    def forget(self, uid: str) -> None:
        with self._lock:
            self._written.pop(uid, None)
            self._written_version.pop(uid, None)
            self._in_flight.pop(uid, None)
            self._service_in_flight.discard(uid)
            self._gke_refused.pop(uid, None)
            self._pods_refused.pop(uid, None)
            self._rejections.pop(uid, None)
            self._departed.pop(uid, None)

    def uids(self) -> set[str]:
        with self._lock:
            return {
                *self._written,
                *self._in_flight,
                *self._service_in_flight,
                *self._gke_refused,
                *self._pods_refused,
                *self._rejections,
                *self._departed,
            }

    # --- status writes ---------------------------------------------------------------------------

    def current_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """The job's status: the last one we decided, if any (the watch shows it later, or it is still being
        written). Once the watch shows that very status it is forgotten here: the watched body, which only
        moves forward, holds it from then on, and a job at rest keeps one copy rather than two."""
        uid, watched = body["metadata"]["uid"], body.get("status") or {}
        with self._lock:
            written = self._written.get(uid)
            if written is not None and written == watched:
                del self._written[uid]
                written = None
        return written if written is not None else dict(watched)

    def decided(self, uid: str, status: dict[str, Any]) -> None:
        """A pass decided this status: the job's current one from now on, before it is written."""
        with self._lock:
            self._written[uid] = status

    def written(self, uid: str, resource_version: str) -> None:
        """A status write answered with this version (not kept for a job forgotten meanwhile)."""
        with self._lock:
            if uid in self._written:
                self._written_version[uid] = resource_version

    def is_own_write(self, body: Mapping[str, Any]) -> bool:
        meta = body["metadata"]
        with self._lock:
            return bool(self._written_version.get(meta["uid"]) == meta.get("resourceVersion"))

    # --- creates the watch has not shown yet -----------------------------------------------------

    def pods_created(self, uid: str, names: Iterable[str]) -> None:
        with self._lock:
            self._in_flight.setdefault(uid, set()).update(names)

    def pods_in_flight(self, uid: str, pods: Iterable[s.PodView]) -> frozenset[str]:
        """Pods created and not yet seen; those the watch now shows are dropped."""
        seen = {p.name for p in pods}
        with self._lock:
            pending = self._in_flight.pop(uid, set()) - seen
            if pending:  # no empty set kept for every job at rest
                self._in_flight[uid] = pending
            return frozenset(pending)

    def pods_not_created(self, uid: str, names: Iterable[str]) -> None:
        """A create call failed: not in flight, so the next pass creates them again (a pod that was created
        after all answers 409 then, which is fine)."""
        with self._lock:
            self._in_flight.get(uid, set()).difference_update(names)

    def pods_refused(self, uid: str, message: str | None) -> None:
        """The API server refused this job's pod creates (message), or took them (None)."""
        with self._lock:
            if message is None:
                self._pods_refused.pop(uid, None)
            else:
                self._pods_refused[uid] = message

    def pod_refusal(self, uid: str) -> str:
        """Why the API server refused the job's last pod creates; "" once a create passed."""
        with self._lock:
            return self._pods_refused.get(uid, "")

    def pod_departing(self, job_uid: str, pod: s.PodView) -> None:
        """A deleted worker pod whose trainer ended with a message, as the watch last showed it."""
        with self._lock:
            kept = self._departed.setdefault(job_uid, {})
            if any(other.attempt < pod.attempt for other in kept.values()):
                kept.clear()
            if all(other.attempt <= pod.attempt for other in kept.values()):
                kept[pod.name] = pod

    def departed(self, job_uid: str, seen: Iterable[s.PodView]) -> tuple[s.PodView, ...]:
        """Those of them the watch no longer shows."""
        names = {pod.name for pod in seen}
        with self._lock:
            return tuple(p for p in self._departed.get(job_uid, {}).values() if p.name not in names)

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
        with self._lock:
            return meta["name"] in self._in_flight.get(owners[0]["uid"], ())

    def service_created(self, uid: str) -> None:
        with self._lock:
            self._service_in_flight.add(uid)

    def service_exists(self, uid: str, seen: bool) -> bool:
        with self._lock:
            if seen:
                self._service_in_flight.discard(uid)
                return True
            return uid in self._service_in_flight

    # --- GKE refusals ----------------------------------------------------------------------------

    def refusals(self, uid: str) -> dict[int, s.GKEError]:
        """GKE's refusals of this job's creates while their backoff lasts; {} after."""
        with self._lock:
            until, errors = self._gke_refused.get(uid, (0.0, {}))
            if time.monotonic() >= until:
                self._gke_refused.pop(uid, None)
                return {}
            return errors

    def refused(
        self,
        uid: str,
        errors: dict[int, s.GKEError],
        poll_seconds: float,
        backoff_seconds: float = s.REJECTED_BACKOFF_BASE_SECONDS,
    ) -> float:
        """Refused creates are not asked again before the delay returned: the polling interval
        (`poll_seconds`) for transient refusals, a growing one from `backoff_seconds` for permanent ones."""
        with self._lock:
            if any(error.permanent for error in errors.values()):
                self._rejections[uid] = self._rejections.get(uid, 0) + 1
                delay = s.rejected_backoff_seconds(self._rejections[uid], backoff_seconds)
            else:
                self._rejections.pop(uid, None)
                delay = poll_seconds
            self._gke_refused[uid] = (time.monotonic() + delay, errors)
        return delay

    def accepted(self, uid: str) -> None:
        """Every create of the pass was accepted: the permanent-refusal count starts over."""
        with self._lock:
            self._rejections.pop(uid, None)
