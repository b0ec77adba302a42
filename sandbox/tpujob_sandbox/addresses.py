"""Addresses for the test bed's simulated nodes and pods: loopback ones (127.0.0.0/8), unique per test-bed
process. The operator reaches a pod by its IP, as Prometheus does (its trainer's metrics port), so a pod's IP
must be somewhere a connection goes on this machine: loopback is the only range that is. A pod with a local
process serves there (the kubelet binds its trainer's metrics to it: pods here share the host's network);
any other pod refuses, as a pod with nothing listening does."""

from __future__ import annotations

import itertools
import os
import threading

# Second octets: pods and nodes apart, and each test-bed process (pytest-xdist runs several) its own.
POD_BASE, NODE_BASE, SPREAD = 16, 128, 100


class LoopbackAddresses:
    def __init__(self, base: int) -> None:
        self._octet = base + os.getpid() % SPREAD
        self._count = itertools.count(2)
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            n = next(self._count)
        return f"127.{self._octet}.{n // 250 % 256}.{n % 250 + 2}"
