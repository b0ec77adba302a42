"""tpujob.heap.trim gives back what a churn left free in the middle of the C heap."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from tpujob import heap
from tpujob.handlers import loops


def rss_mib() -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(heap._libc() is None, reason="no glibc malloc_trim here")
def test_trim_releases_free_pages_below_live_chunks() -> None:
    # 64 MiB of 4 KiB chunks (glibc's heap, below its mmap threshold), then every chunk freed but one in 64:
    # the survivors pin the heap's top, so glibc's own trimming at free() cannot give the rest back.
    chunks = [bytearray(4096) for _ in range(16384)]
    survivors = chunks[::64]
    del chunks
    before = rss_mib()
    assert heap.trim()
    after = rss_mib()
    assert before - after > 32, f"RSS {before:.1f} -> {after:.1f} MiB"
    assert len(survivors) == 256


def test_the_loop_trims_every_period_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []

    def trim() -> bool:
        threads.append(threading.current_thread().name)
        return True

    monkeypatch.setattr(heap, "trim", trim)

    async def three_rounds() -> None:
        task = asyncio.create_task(loops.trim_heap_forever(period=0.01))
        try:
            async with asyncio.timeout(10):
                while len(threads) < 3:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()

    asyncio.run(three_rounds())
    assert threading.main_thread().name not in threads
