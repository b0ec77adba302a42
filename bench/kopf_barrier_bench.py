"""kopf's indexing barrier at an operator's start, with kopf's own wait and with tpujob's shared one
(tpujob.handlers.kopf_barrier): how long until every listed object's worker may run its handlers.

    .venv/bin/python bench/kopf_barrier_bench.py --n 1000 2000 4000

It drives kopf's own ToggleSet as kopf 1.45's watcher and workers do (_core/reactor/queueing.py,
_core/reactor/processing.py): the resource's listing holds a toggle; each listed object gets one before
its worker starts; the worker indexes (drops its toggle) and waits for the whole set; the listing ends
(the resource's toggle dropped). Prints seconds and CPU seconds per N, the median of --repeats runs.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time
from collections.abc import Awaitable, Callable

from kopf._cogs.aiokits import aiotoggles

from tpujob.handlers import kopf_barrier


async def start_with(n: int) -> None:
    operator_indexed = aiotoggles.ToggleSet(all)
    listing = await operator_indexed.make_toggle(name="the resource's listing")

    async def worker(indexed: aiotoggles.Toggle) -> None:
        await operator_indexed.drop_toggle(indexed)  # the object is indexed
        await operator_indexed.wait_for(True)  # every other object and resource too

    workers = []
    for i in range(n):
        indexed = await operator_indexed.make_toggle(name=f"object {i}")
        workers.append(asyncio.create_task(worker(indexed)))
        await asyncio.sleep(0)  # the watcher reads the next object; the workers start meanwhile
    await operator_indexed.drop_toggle(listing)
    await asyncio.gather(*workers)


def timed(run: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    asyncio.run(run())  # type: ignore[arg-type]
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 2000, 4000], help="objects listed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--kopf-up-to", type=int, default=4000, help="kopf's own wait only up to this N (it is quadratic)"
    )
    args = parser.parse_args()
    kopfs_own = aiotoggles.ToggleSet.wait_for
    print("| objects | kopf's wait s (CPU s) | shared wait s (CPU s) |")
    print("|---|---|---|")
    for n in args.n:
        row = []
        for wait_for in (kopfs_own, kopf_barrier.shared_wait_for):
            if wait_for is kopfs_own and n > args.kopf_up_to:
                row.append("-")
                continue
            setattr(aiotoggles.ToggleSet, "wait_for", wait_for)  # noqa: B010
            runs = [timed(functools.partial(start_with, n)) for _ in range(args.repeats)]
            row.append(
                f"{statistics.median(r[0] for r in runs):.2f} ({statistics.median(r[1] for r in runs):.2f})"
            )
        print(f"| {n} | {row[0]} | {row[1]} |", flush=True)
    setattr(aiotoggles.ToggleSet, "wait_for", kopfs_own)  # noqa: B010


if __name__ == "__main__":
    main()
