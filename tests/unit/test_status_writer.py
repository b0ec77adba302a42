"""Status writes off the pass's thread: the newest status of a job replaces one still waiting, a job has
one write in flight at a time, a failed write is tried again, a job gone (404) is forgotten, and a replica
standing by writes nothing."""

from __future__ import annotations

import threading
from typing import Any

from tpujob import kube, metrics, peering
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.status_writer import StatusWriter


class HeldWrites:
    """Records each write (name, phase); each waits until the test lets it through, as a write waiting for
    its token would. `answers` maps a phase to what its write raises or returns (a version by default)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.written: list[str] = []
        self.release = threading.Semaphore(0)
        self.answers: dict[str, list[Any]] = {}
        self._lock = threading.Condition()

    def wait_started(self, count: int) -> None:
        """Wait until `count` writes have begun (each holds in its write until released)."""
        with self._lock:
            assert self._lock.wait_for(lambda: len(self.started) >= count, timeout=10), self.started

    def __call__(self, namespace: str, name: str, status: dict[str, Any], stored: list[Any]) -> str | None:
        with self._lock:
            self.started.append(status["phase"])
            self._lock.notify_all()
        assert self.release.acquire(timeout=10), "the test never let this write through"
        answers = self.answers.get(status["phase"])
        answer = answers.pop(0) if answers else f"v-{status['phase']}"
        if isinstance(answer, Exception):
            raise answer
        with self._lock:
            self.written.append(status["phase"])
        return answer


def writer(writes: HeldWrites, memory: JobMemory, gone: list[str] | None = None) -> StatusWriter:
    return StatusWriter(
        writes, memory, (gone if gone is not None else []).append, writers=2, retry_first_seconds=0.01
    )


def test_a_newer_status_replaces_the_waiting_one_and_follows_the_one_in_flight():
    writes, memory = HeldWrites(), JobMemory()
    status_writer = writer(writes, memory)
    coalesced = metrics.STATUS_WRITES_COALESCED._value.get()
    status_writer.submit("u", "ns", "j", {"phase": "Pending"}, [])
    writes.wait_started(1)
    # Pending is in flight: Starting waits (the second writer thread must not write the same job at once),
    # and Running replaces it.
    status_writer.submit("u", "ns", "j", {"phase": "Starting"}, [])
    status_writer.submit("u", "ns", "j", {"phase": "Running"}, [])
    assert memory.current_status({"metadata": {"uid": "u"}}) == {"phase": "Running"}, "decided, not written"
    writes.release.release(2)
    assert status_writer.drain(timeout=10)
    assert writes.written == ["Pending", "Running"]
    assert metrics.STATUS_WRITES_COALESCED._value.get() == coalesced + 1
    assert memory.is_own_write({"metadata": {"uid": "u", "resourceVersion": "v-Running"}})
    status_writer.stop(timeout=10)


def test_a_failed_write_is_tried_again_and_a_gone_job_is_forgotten():
    writes, memory, gone = HeldWrites(), JobMemory(), []
    writes.answers["Running"] = [kube.ApiError(500, "InternalError")]
    writes.answers["Failed"] = [None]  # 404: deleted meanwhile
    status_writer = writer(writes, memory, gone)
    status_writer.submit("u", "ns", "j", {"phase": "Running"}, [])
    status_writer.submit("gone", "ns", "k", {"phase": "Failed"}, [])
    writes.release.release(3)
    assert status_writer.drain(timeout=10)
    assert writes.started.count("Running") == 2 and sorted(writes.written) == ["Failed", "Running"]
    assert gone == ["gone"]
    status_writer.stop(timeout=10)


def test_a_replica_standing_by_writes_nothing():
    writes, memory = HeldWrites(), JobMemory()
    writes.answers["Running"] = [peering.NotLeading("standing by")]
    status_writer = writer(writes, memory)
    status_writer.submit("u", "ns", "j", {"phase": "Running"}, [])
    writes.wait_started(1)
    status_writer.submit("v", "ns", "k", {"phase": "Starting"}, [])
    status_writer.submit("w", "ns", "l", {"phase": "Pending"}, [])
    writes.wait_started(2)
    status_writer.discard()  # the third had not started: dropped
    writes.release.release(2)
    assert status_writer.drain(timeout=10)
    assert writes.started == ["Running", "Starting"] and writes.written == ["Starting"], "not retried"
    status_writer.stop(timeout=10)
