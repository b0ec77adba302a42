"""Give the C heap's free pages back to the OS.

A day of churn grows the operator's RSS while its Python objects do not grow: the soak bench traced the
operator's allocations flat (-0.3 MiB over 800 jobs) while glibc's heap grew from 60 to 72 MiB, all of it
free space (in use 42.8 -> 44.5 MiB). The operator's ~30 threads allocate in up to 8 x cores glibc arenas,
and glibc returns free memory only from the top of each heap (M_TRIM_THRESHOLD): a freed chunk below a live
one stays resident. malloc_trim(0) releases every free page of every arena (madvise(MADV_DONTNEED); glibc
2.8 and later), which is what a memory limit counts. Without glibc (musl has no malloc_trim) it does
nothing."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def trim() -> bool:
    """Release the C heap's free pages; False where there is no glibc, or it had nothing to release."""
    libc = _libc()
    return libc is not None and bool(libc.malloc_trim(0))
