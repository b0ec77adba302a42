"""The work queue (handlers/workqueue.WorkQueue), client-go's shape: deduplication, a bounded number of
consumers, add-after (the soonest timer wins), rate-limited retries, pause, shut down, and namespaces served
in turn. A real event loop; the pass is a function that records its key."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from tpujob.handlers import workqueue
from tpujob.handlers.workqueue import WorkQueue

Key = tuple[str, str]


class Recorder:
    """A pass that records its key (and, as the real one does, marks it begun); `done` once `done_after`
    keys passed."""

    def __init__(self, done_after: int = 1, consumers: int = 1, **kwargs: float) -> None:
        self.seen: list[Key] = []
        self.done = asyncio.Event()
        self.done_after = done_after
        self.queue = WorkQueue(self.process, consumers, **kwargs)

    async def process(self, key: Key) -> None:
        self.queue.begun(key)
        self.seen.append(key)
        if len(self.seen) >= self.done_after:
            self.done.set()


def test_a_later_or_empty_add_after_leaves_the_sooner_one_standing() -> None:
    async def scenario() -> list[Key]:
        recorder = Recorder()
        queue, seen, done = recorder.queue, recorder.seen, recorder.done
        queue.add_after(("ns", "j"), 0.2)
        queue.add_after(("ns", "j"), 30.0)  # does not replace the sooner one
        queue.add_after(("ns", "j"), None)  # nor does a pass that needs no look
        await asyncio.wait_for(done.wait(), timeout=10)
        assert not queue.timers, "a timer that fired is no longer held"
        done.clear()
        queue.add_after(("ns", "j"), 0.1)  # the fired one no longer counts
        await asyncio.wait_for(done.wait(), timeout=10)
        return seen

    assert asyncio.run(scenario()) == [("ns", "j"), ("ns", "j")]


def test_a_burst_waits_as_keys_for_a_bounded_number_of_consumers() -> None:
    """However many jobs ask at once, at most `consumers` passes run; each job is queued once however often
    it asks before its pass begins; all run, oldest first, and nothing is left once the queue is empty."""
    running, most, order = 0, 0, []
    release, all_busy = asyncio.Event(), asyncio.Event()
    queue: WorkQueue

    async def slow(key: Key) -> None:
        nonlocal running, most
        queue.begun(key)
        order.append(key[1])
        running += 1
        most = max(most, running)
        if running == 3:
            all_busy.set()
        await release.wait()
        running -= 1

    async def scenario() -> None:
        nonlocal queue
        queue = WorkQueue(slow, consumers=3)
        for i in range(20):
            queue.add(("ns", f"j{i:02d}"))
            queue.add(("ns", f"j{i:02d}"))  # a second event before the pass: no second pass
        assert len(queue.consumers) == 3 and len(queue) == 20
        await asyncio.wait_for(all_busy.wait(), timeout=10)
        assert len(queue) == 17 and len(queue.processing) == 3, "the others wait as keys"
        release.set()
        while queue.consumers:
            await asyncio.wait(queue.consumers, timeout=10)
        assert not queue.queued and not queue.processing and not queue._fifos and not queue._turns

    asyncio.run(scenario())
    assert most == 3
    assert order == [f"j{i:02d}" for i in range(20)]


def test_a_namespace_with_a_backlog_does_not_delay_another_namespaces_job_by_it() -> None:
    """1,000 jobs of one namespace queued, then one of another: with one consumer, the second namespace's
    job passes second (its namespace's turn), not after the 1,000. Then namespaces take turns."""

    async def scenario() -> list[Key]:
        recorder = Recorder(done_after=1006)
        queue, seen, done = recorder.queue, recorder.seen, recorder.done
        for i in range(1000):
            queue.add(("big", f"j{i}"))
        queue.add(("small", "only"))
        for i in range(5):
            queue.add(("other", f"k{i}"))
        await asyncio.wait_for(done.wait(), timeout=30)
        return seen

    seen = asyncio.run(scenario())
    assert seen.index(("small", "only")) == 1
    assert seen[:7] == [
        ("big", "j0"), ("small", "only"), ("other", "k0"),
        ("big", "j1"), ("other", "k1"),
        ("big", "j2"), ("other", "k2"),
    ]  # fmt: skip
    assert [key for key in seen if key[0] == "big"] == [("big", f"j{i}") for i in range(1000)]


def test_a_job_asked_for_as_the_last_consumer_ends_gets_its_pass() -> None:
    """With the only consumer ending, a key added before the ending task's done callbacks run must not be
    left waiting."""
    seen: list[Key] = []
    b_passed = asyncio.Event()
    queue: WorkQueue

    async def process(key: Key) -> None:
        queue.begun(key)
        seen.append(key)
        if key[1] == "a":
            # Runs in the next loop turn: after a's consumer found the queue empty and ended, before that
            # task's done callbacks (scheduled when it ends, so queued behind this one).
            asyncio.get_running_loop().call_soon(queue.add, ("ns", "b"))
        else:
            b_passed.set()

    async def scenario() -> None:
        nonlocal queue
        queue = WorkQueue(process, consumers=1)
        queue.add(("ns", "a"))
        await asyncio.wait_for(b_passed.wait(), timeout=10)

    asyncio.run(scenario())
    assert seen == [("ns", "a"), ("ns", "b")]


def test_retries_wait_twice_as_long_per_failure_until_forgotten() -> None:
    async def scenario() -> list[float]:
        queue = Recorder(retry_base_seconds=1.0, retry_max_seconds=5.0).queue
        loop, key = asyncio.get_running_loop(), ("ns", "j")
        delays = []
        for _ in range(4):
            queue.add_rate_limited(key)
            delays.append(round(queue.timers[key].when() - loop.time()))
            queue.timers.pop(key).cancel()
        queue.forget(key)
        queue.add_rate_limited(key)
        delays.append(round(queue.timers[key].when() - loop.time()))
        queue.drop(key)
        assert not queue.timers and not queue.failures, "a gone job's timer and failures go"
        return delays

    assert asyncio.run(scenario()) == [1, 2, 4, 5, 1]


def test_a_paused_queue_holds_nothing_and_takes_nothing_until_resumed() -> None:
    async def scenario() -> list[Key]:
        recorder = Recorder()
        queue, seen, done = recorder.queue, recorder.seen, recorder.done
        queue.add_after(("ns", "timed"), 30.0)
        queue.add_rate_limited(("ns", "failing"))
        queue.pause()
        assert not queue.timers and not queue.failures and not queue.queued
        queue.add(("ns", "ignored"))
        queue.add_after(("ns", "ignored-later"), 0.1)
        assert not queue.queued and not queue.timers
        queue.resume()
        queue.add(("ns", "after"))
        await asyncio.wait_for(done.wait(), timeout=10)
        return seen

    assert asyncio.run(scenario()) == [("ns", "after")]


def test_shut_down_cancels_the_consumers_and_takes_no_more_keys() -> None:
    async def scenario() -> None:
        started = asyncio.Event()

        async def forever(key: Key) -> None:
            started.set()
            await asyncio.Event().wait()

        queue = WorkQueue(forever, consumers=2)
        queue.add(("ns", "a"))
        queue.add_after(("ns", "b"), 30.0)
        await asyncio.wait_for(started.wait(), timeout=10)
        consumers = queue.shut_down()
        await asyncio.gather(*consumers, return_exceptions=True)
        assert all(task.cancelled() for task in consumers)
        assert not queue.consumers and not queue.timers
        queue.add(("ns", "c"))
        assert not queue.queued and not queue.consumers

    asyncio.run(scenario())


KOPF_CAUSE: contextvars.ContextVar[str] = contextvars.ContextVar("kopf_cause", default="")


def test_passes_and_timers_do_not_carry_the_kopf_handlers_context() -> None:
    """kopf's context variables hold the event's body; a pass asked for in a handler, and the timers it
    sets, must not keep them."""
    seen: list[str] = []
    done = asyncio.Event()

    async def process(key: Key) -> None:
        seen.append(KOPF_CAUSE.get())
        done.set()

    async def scenario() -> None:
        queue = WorkQueue(process, consumers=1)
        KOPF_CAUSE.set("the event's body")  # as kopf sets it around a handler
        queue.add(("ns", "j"))
        await asyncio.wait_for(done.wait(), timeout=10)
        done.clear()
        queue.begun(("ns", "j"))
        queue.add_after(("ns", "j"), 0.1)
        await asyncio.wait_for(done.wait(), timeout=10)

    asyncio.run(scenario())
    assert seen == ["", ""]


def test_the_runtime_keeps_nothing_per_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runtime's attributes are settings, clients, the queue, events and tasks: no map of jobs."""
    from tpujob.config import from_environment

    runtime = workqueue.Runtime(from_environment(), reconciler=None)  # type: ignore[arg-type]
    held = {name for name, value in vars(runtime).items() if isinstance(value, (dict, set, list))}
    assert held == {"tasks"}, f"per-job state outside the queue and the records: {held}"
