"""kopf's indexing barrier, made linear in the number of objects listed at start.

kopf holds every handler until the initial listing of every indexed resource is indexed: each listed
object gets a toggle in the operator's `operator_indexed` ToggleSet, and each object's worker, once it has
indexed its object, waits in `ToggleSet.wait_for(True)` (kopf 1.45 _core/reactor/queueing.py watcher,
_core/reactor/processing.py process_resource_event). That wait is `asyncio.Condition.wait_for`, and every
toggle made, dropped or turned calls `notify_all`: each listed object wakes every worker already waiting,
which re-takes the condition's lock and re-checks the whole set. Quadratic: 2,000 objects took 23 s of one
core, and a restart among 10,000 jobs (30,000 objects: the jobs, their pods, their Services) spent minutes
in it before its first pass (bench/kopf_barrier_bench.py).

The fix keeps kopf's semantics (a waiter returns once the set is in the state it waits for) but lets one
task per set and state wait on the condition for all the waiters, which await its result: a toggle
change wakes one task, not thousands. Applied to the one kopf version it was read against (pinned in
pyproject); another version leaves kopf as it is and logs why, so an upgrade is a deliberate look at it.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import weakref

from kopf._cogs.aiokits import aiotoggles

log = logging.getLogger(__name__)

PATCHED_KOPF = "1.45.2"

_kopf_wait_for = aiotoggles.ToggleSet.wait_for
# Per ToggleSet: the one task that waits on its condition for each awaited state.
_shared: weakref.WeakKeyDictionary[aiotoggles.ToggleSet, dict[bool, asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary()
)


async def shared_wait_for(self: aiotoggles.ToggleSet, state: bool, /) -> None:
    """ToggleSet.wait_for, with every waiter for the same state behind one waiting task."""
    state = bool(state)
    if self.is_on() == state:  # one event loop: nothing changes the set between this check and the return
        return
    waits = _shared.setdefault(self, {})
    waiting = waits.get(state)
    if waiting is None or waiting.done():
        waiting = waits[state] = asyncio.ensure_future(_kopf_wait_for(self, state))
    # A waiter cancelled (its object deleted, the operator stopping) leaves the shared wait to the others.
    await asyncio.shield(waiting)


def apply(version: str | None = None) -> bool:
    """Use the shared wait in every ToggleSet kopf makes; whether it was applied (`version`: kopf's, as
    installed unless given)."""
    version = version or importlib.metadata.version("kopf")
    if version != PATCHED_KOPF:
        log.warning(
            "kopf %s is not %s, which tpujob's shared indexing wait was written for: kopf's own wait is "
            "used, whose start is quadratic in the objects listed (handlers/kopf_barrier.py)",
            version,
            PATCHED_KOPF,
        )
        return False
    setattr(aiotoggles.ToggleSet, "wait_for", shared_wait_for)  # noqa: B010 (a method, replaced on purpose)
    return True
