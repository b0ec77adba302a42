"""Give the C heap's free pages back to the OS.

A day of churn grows the operator's RSS while its Python objects do not grow. Two memory reports of one soak
(tpujob/memreport.py, 2,200 jobs apart) show pymalloc's blocks in use flat at 44.0 MB while glibc's heap grew
from 40.1 to 54.1 MiB, 12.8 MiB of that free: memory freed below live chunks, which glibc returns by itself
only from the top of each heap (M_TRIM_THRESHOLD). The operator's ~30 threads allocate in up to 8 x cores
arenas, each fragmenting its own way. malloc_trim(0) releases every whole free page of every arena
(madvise(MADV_DONTNEED); glibc 2.8 and later): in that soak, about 10 MiB a minute, in 136 ranges. That is
what a memory limit counts. Without glibc (musl has no malloc_trim) it does nothing."""

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
