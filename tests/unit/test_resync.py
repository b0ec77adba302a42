"""The resync round (handlers/loops.py): every job a pass, in batches, a bounded number at once, pipelined;
errors logged; the round's figures in tpujob_resync_round_*. Fake passes on a real event loop, no sleeps."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from types import SimpleNamespace
from typing import Any

from prometheus_client import REGISTRY

from tpujob.handlers import loops
from tpujob.handlers.indexes import IndexedJob

KEYS = [("ns", f"job-{i}") for i in range(23)]


class Tracker:
    """A fake pass: counts passes per key and how many run at once; each yields to the loop a few times
    (a different number per key, so passes end out of order)."""

    def __init__(self) -> None:
        self.passes: dict[tuple[str, str], int] = {}
        self.running = 0
        self.most = 0
        self.batches: list[int] = []

    async def __call__(self, keys: list[tuple[str, str]]) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        self.batches.append(len(keys))
        for _ in range(int(keys[0][1].rsplit("-", 1)[1]) % 5 + 1):
            await asyncio.sleep(0)
        for key in keys:
            self.passes[key] = self.passes.get(key, 0) + 1
        self.running -= 1


def test_every_key_gets_one_pass_and_at_most_the_bound_run_at_once():
    tracker = Tracker()
    asyncio.run(loops.pass_all(KEYS, tracker, 4))
    assert tracker.passes == {key: 1 for key in KEYS}
    assert tracker.most == 4


def test_keys_go_in_batches_and_the_bound_counts_batches():
    tracker = Tracker()
    asyncio.run(loops.pass_all(KEYS, tracker, 2, batch=5))
    assert tracker.passes == {key: 1 for key in KEYS}
    assert sorted(tracker.batches) == [3, 5, 5, 5, 5]  # 23 keys
    assert tracker.most == 2


def test_fewer_keys_than_the_bound_and_no_keys():
    tracker = Tracker()
    asyncio.run(loops.pass_all(KEYS[:3], tracker, 8))
    assert tracker.passes == {key: 1 for key in KEYS[:3]}
    asyncio.run(loops.pass_all([], tracker, 8))


def test_a_slow_pass_holds_one_worker_not_the_round():
    """Batches of 2 would wait for the slow first key before starting the third; the pipeline does not."""
    done: list[str] = []

    async def scenario() -> None:
        release = asyncio.Event()

        async def pass_for(keys: list[tuple[str, str]]) -> None:
            ((_, name),) = keys
            if name == "job-0":
                await release.wait()
            done.append(name)
            if len(done) == len(KEYS) - 1:  # every other key passed while job-0 was still in its pass
                release.set()

        await asyncio.wait_for(loops.pass_all(KEYS, pass_for, 2), timeout=5)

    asyncio.run(scenario())
    assert done[-1] == "job-0"
    assert sorted(done) == sorted(name for _, name in KEYS)


def test_a_failed_pass_is_logged_and_the_others_go_on(caplog):
    seen: list[str] = []

    async def pass_for(keys: list[tuple[str, str]]) -> None:
        ((_, name),) = keys
        if name in ("job-1", "job-5"):
            raise RuntimeError(f"boom {name}")
        seen.append(name)

    with caplog.at_level(logging.ERROR, logger=loops.log.name):
        asyncio.run(loops.pass_all(KEYS, pass_for, 3))
    assert len(seen) == len(KEYS) - 2
    failed = [r.getMessage() for r in caplog.records if "resync pass" in r.getMessage()]
    assert len(failed) == 2
    assert any("ns/job-1" in m and "boom job-1" in m for m in failed)


class FakeReconciler:
    def __init__(self, order: list[str], fail: bool = False, passed: dict[str, float] | None = None) -> None:
        self.order = order
        self.fail = fail
        self.passed = passed or {}
        self.retained: set[str] | None = None

    def last_pass(self, uid: str) -> float:
        return self.passed.get(uid, -math.inf)

    def retain(self, live: set[str]) -> None:
        self.retained = live

    def refresh_maintenance(self) -> None:
        self.order.append("maintenance")
        if self.fail:
            raise RuntimeError("nodes unreadable")


def fake_runtime(
    order: list[str],
    namespace: str | None = None,
    fail: bool = False,
    passed: dict[str, float] | None = None,
) -> Any:
    """Jobs whose UIDs are their names; `passed`: when a job's last pass began, as seconds before now."""
    now = time.monotonic()  # the event loop's clock
    return SimpleNamespace(
        config=SimpleNamespace(namespace=namespace, resync_seconds=30.0),
        reconciler=FakeReconciler(order, fail, {uid: now - ago for uid, ago in (passed or {}).items()}),
        indexes=SimpleNamespace(jobs={key: [IndexedJob(key[1], False, "{}")] for key in KEYS}),
    )


def run_round(runtime: Any, order: list[str], times: list[float]) -> None:
    async def pass_for(runtime_: Any, keys: list[tuple[str, str]]) -> None:
        assert runtime_ is runtime
        order.extend(name for _, name in keys)

    clock = iter(times)
    asyncio.run(loops.resync_round(runtime, pass_for, 5, clock=lambda: next(clock)))


def gauge(name: str) -> float:
    value = REGISTRY.get_sample_value(name)
    assert value is not None
    return value


def test_a_round_reads_maintenance_first_then_passes_every_job_and_records_its_figures():
    order: list[str] = []
    run_round(fake_runtime(order), order, [100.0, 107.5])
    assert order[0] == "maintenance"
    assert sorted(order[1:]) == sorted(name for _, name in KEYS)
    assert gauge("tpujob_resync_round_seconds") == 7.5
    assert gauge("tpujob_resync_round_jobs") == len(KEYS)
    assert gauge("tpujob_resync_round_end_timestamp_seconds") > 0


def test_a_namespaced_operator_reads_no_maintenance_and_a_failed_read_does_not_stop_the_round(caplog):
    order: list[str] = []
    run_round(fake_runtime(order, namespace="team-a"), order, [0.0, 1.0])
    assert "maintenance" not in order and len(order) == len(KEYS)

    order.clear()
    with caplog.at_level(logging.ERROR, logger=loops.log.name):
        run_round(fake_runtime(order, fail=True), order, [0.0, 2.0])
    assert order[0] == "maintenance" and len(order) == len(KEYS) + 1
    assert "maintenance notices failed" in caplog.text
    assert gauge("tpujob_resync_round_seconds") == 2.0


class TakeoverApi:
    """The API server at takeover: lists the uids it has. While it lists, the watch delivers a job that
    was deleted and created again under its name, newer than the list's snapshot."""

    def __init__(self, live: set[str], index: dict[tuple[str, str], list[IndexedJob]]) -> None:
        self.live, self.index = live, index

    def list_tpujob_uids(self, namespace: str | None) -> set[str]:
        self.index[("ns", "recreated")] = [IndexedJob("uid-recreated-new", False, "{}")]
        return set(self.live)


def test_a_takeover_passes_the_jobs_the_api_server_has_and_forgets_the_cached_ones_it_lacks(monkeypatch):
    index = {
        ("ns", "kept"): [IndexedJob("uid-kept", False, "{}")],
        ("ns", "deleted-while-standing-by"): [IndexedJob("uid-gone", False, "{}")],
        ("ns", "recreated"): [IndexedJob("uid-recreated-old", False, "{}")],
    }
    forgotten: list[str] = []
    runtime = SimpleNamespace(
        api=TakeoverApi({"uid-kept"}, index),
        config=SimpleNamespace(namespace=None),
        indexes=SimpleNamespace(jobs=index),
        sweep_requested=asyncio.Event(),
        queue=SimpleNamespace(drop=lambda key: None),
        reconciler=SimpleNamespace(forget=forgotten.append),
    )
    asked: list[tuple[str, str]] = []

    def request_pass(_runtime: Any, namespace: str, name: str) -> None:
        asked.append((namespace, name))

    monkeypatch.setattr(loops, "request_pass", request_pass)

    asyncio.run(loops.take_over(runtime))

    assert asked == [("ns", "kept")]
    # The cached jobs the list lacks are gone; the one created again after the list is not judged by it
    # (its own watch event asks its pass).
    assert sorted(forgotten) == ["uid-gone", "uid-recreated-old"]
    # The gone one leaves the index (no pass or resync sees it again); the name's new job stays.
    assert ("ns", "deleted-while-standing-by") not in index
    assert [job.uid for job in index[("ns", "recreated")]] == ["uid-recreated-new"]
    assert runtime.sweep_requested.is_set()  # the orphan sweep runs now, not at its next interval


def test_a_round_skips_the_jobs_that_had_a_pass_within_the_interval():
    """job-1 and job-2 had a pass 5 s ago (an event's); job-3's was 31 s ago, before the 30 s interval."""
    order: list[str] = []
    run_round(fake_runtime(order, passed={"job-1": 5.0, "job-2": 5.0, "job-3": 31.0}), order, [0.0, 1.0])
    assert sorted(order[1:]) == sorted(name for _, name in KEYS if name not in ("job-1", "job-2"))
    assert gauge("tpujob_resync_round_jobs") == len(KEYS) - 2


def test_a_round_forgets_every_record_whose_job_the_index_no_longer_has():
    """The safety net under every forget: the round hands the reconciler the UIDs of the indexed jobs."""
    order: list[str] = []
    runtime = fake_runtime(order)
    run_round(runtime, order, [0.0, 1.0])
    assert runtime.reconciler.retained == {name for _, name in KEYS}
