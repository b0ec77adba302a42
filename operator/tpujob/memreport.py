"""Where the operator's memory goes, on request: a diagnosis aid for benchmarks, off unless asked for.

With TPUJOB_MEMORY_REPORT=<path> the operator traces Python allocations from its start (tracemalloc, one
frame each unless TPUJOB_MEMORY_REPORT_FRAMES says otherwise), and on each SIGUSR2 writes a report,
<path>.<k>.txt for the k-th signal: RSS, glibc's heap, pymalloc's arenas, the traced bytes by source line
and by file, and the live container objects by type; and the tracemalloc snapshot beside it
(<path>.<k>.snap), for bench/memory_diff.py to compare. Tracing costs CPU and memory, so RSS figures come
from runs without it; the report says how the bytes divide, not how many."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import os
import signal
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType

from tpujob import heap

ENV = "TPUJOB_MEMORY_REPORT"
# Frames kept per traced allocation; 0: no tracing, so RSS is as without the report and pymalloc's own
# statistics show (tracemalloc's hooks hide them): for the allocator's share, fragmentation.
FRAMES_ENV = "TPUJOB_MEMORY_REPORT_FRAMES"
# Set: each report also calls malloc_trim(0) and says what it released (it changes RSS from then on).
TRIM_ENV = "TPUJOB_MEMORY_REPORT_TRIM"
TOP = 60


class _MallInfo2(ctypes.Structure):
    _FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS.split()]


def _proc_status() -> str:
    lines = Path("/proc/self/status").read_text().splitlines()
    return "\n".join(line for line in lines if line.startswith(("VmHWM", "VmRSS", "RssAnon", "RssFile")))


def _glibc_heap() -> str:
    """glibc's view: bytes from the OS (arena: brk heap; hblkhd: mmapped chunks), in use, free."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
        mib = 1 << 20
        return (
            f"glibc: heap {info.arena / mib:.1f} MiB (in use {info.uordblks / mib:.1f},"
            f" free {info.fordblks / mib:.1f}), mmapped {info.hblkhd / mib:.1f} MiB in {info.hblks} chunks"
        )
    return "glibc: mallinfo2 not available"


def _pymalloc() -> str:
    """The summary lines of pymalloc's statistics (sys._debugmallocstats writes them to C's stderr)."""
    read, write = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(write, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    keep = ("# arenas", "# bytes in", "# bytes lost", "Total")
    return "\n".join(line for line in text.splitlines() if line.startswith(keep))


def _trimmed() -> str:
    """What glibc's malloc_trim gives back to the OS now: whether trimming after a burst would pay."""
    before = _rss_kib()
    heap.trim()
    return f"malloc_trim(0): RSS {before / 1024:.1f} -> {_rss_kib() / 1024:.1f} MiB"


def _rss_kib() -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS"))
    return int(line.split()[1])


def report(snapshot: tracemalloc.Snapshot | None) -> str:
    out = io.StringIO()
    print(_proc_status(), _glibc_heap(), _pymalloc(), sep="\n", file=out)
    if os.environ.get(TRIM_ENV):
        print(_trimmed(), file=out)
    # Cyclic garbage not yet collected: it holds memory until a collection of its generation runs.
    print(f"gc.collect() found {gc.collect()} unreachable objects", file=out)
    counts = Counter(type(o).__qualname__ for o in gc.get_objects())
    print(f"\ngc-tracked objects: {sum(counts.values())}", file=out)
    for name, count in counts.most_common(TOP):
        print(f"{count:>10} {name}", file=out)
    if snapshot is not None:
        current, peak = tracemalloc.get_traced_memory()
        print(f"\ntraced: {current / 2**20:.1f} MiB now, {peak / 2**20:.1f} MiB peak", file=out)
        for key in ("filename", "lineno"):
            print(f"\nby {key}:", file=out)
            for stat in snapshot.statistics(key)[:TOP]:
                frame = stat.traceback[0]
                where = frame.filename if key == "filename" else f"{frame.filename}:{frame.lineno}"
                print(f"{stat.size / 1024:>10.0f} KiB {stat.count:>9} {where}", file=out)
    return out.getvalue()


def install_from_environment() -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    frames = int(os.environ.get(FRAMES_ENV, "1"))
    if frames:
        tracemalloc.start(frames)
    written = 0

    def write(_signum: int, _frame: FrameType | None) -> None:
        nonlocal written
        snapshot = tracemalloc.take_snapshot() if frames else None
        if snapshot is not None:
            snapshot.dump(f"{path}.{written}.snap")
        Path(f"{path}.{written}.txt").write_text(report(snapshot))
        written += 1

    signal.signal(signal.SIGUSR2, write)
