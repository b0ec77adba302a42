"""kopf's indexing barrier with the shared wait (handlers/kopf_barrier.py): the same semantics as kopf's
own ToggleSet.wait_for, on kopf's own ToggleSet, driven on a real event loop without sleeps."""

from __future__ import annotations

import asyncio

import pytest
from kopf._cogs.aiokits import aiotoggles

from tpujob.handlers import kopf_barrier


@pytest.fixture
def shared_wait():
    kopfs_own = aiotoggles.ToggleSet.wait_for
    assert kopf_barrier.apply()
    yield
    aiotoggles.ToggleSet.wait_for = kopfs_own  # type: ignore[method-assign]


async def settle() -> None:
    """Let every task run as far as it can."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_waiters_resume_only_once_every_toggle_is_on_and_all_of_them_resume(shared_wait):
    async def scenario() -> None:
        ready = aiotoggles.ToggleSet(all)
        toggles = [await ready.make_toggle(name=str(i)) for i in range(50)]
        waiters = [asyncio.create_task(ready.wait_for(True)) for _ in range(100)]
        for toggle in toggles[:-1]:
            await ready.drop_toggle(toggle)
        await settle()
        assert not any(w.done() for w in waiters)  # one object still unindexed holds them all
        await toggles[-1].turn_to(True)
        await asyncio.wait_for(asyncio.gather(*waiters), 5)

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_others_waiting_and_a_set_already_on_returns_at_once(shared_wait):
    async def scenario() -> None:
        ready = aiotoggles.ToggleSet(all)
        held = await ready.make_toggle(name="listing")
        cancelled, kept = asyncio.create_task(ready.wait_for(True)), asyncio.create_task(ready.wait_for(True))
        await settle()
        cancelled.cancel()
        await settle()
        assert cancelled.cancelled() and not kept.done()
        await ready.drop_toggle(held)
        await asyncio.wait_for(kept, 5)
        await asyncio.wait_for(ready.wait_for(True), 1)  # on now: no wait

    asyncio.run(scenario())


def test_waiting_for_off_is_shared_too(shared_wait):
    async def scenario() -> None:
        paused = aiotoggles.ToggleSet(any)
        pause = await paused.make_toggle(name="peering")
        waiters = [asyncio.create_task(paused.wait_for(True)) for _ in range(10)]
        await settle()
        assert not any(w.done() for w in waiters)
        await pause.turn_to(True)
        await asyncio.wait_for(asyncio.gather(*waiters), 5)
        off = asyncio.create_task(paused.wait_for(False))
        await settle()
        assert not off.done()
        await pause.turn_to(False)
        await asyncio.wait_for(off, 5)

    asyncio.run(scenario())


def test_another_kopf_version_keeps_kopfs_own_wait():
    kopfs_own = aiotoggles.ToggleSet.wait_for
    assert not kopf_barrier.apply("1.46.0")
    assert aiotoggles.ToggleSet.wait_for is kopfs_own
