"""Addresses for the test bed's simulated nodes and pods: loopback ones (127.0.0.0/8), unique on this machine.
The operator reaches a pod by its IP, as Prometheus does (its trainer's metrics port), so a pod's IP must be
somewhere a connection goes on this machine: loopback is the only range that is. A pod with a local process
serves there (the kubelet binds its trainer's metrics to it: pods here share the host's network); any other
pod refuses, as a pod with nothing listening does."""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Iterable

# Second octets: pods and nodes apart, and each test-bed process (pytest-xdist runs several) its own.
POD_BASE, NODE_BASE, SPREAD = 16, 128, 100
# Addresses handed out in this process, per base, whichever simulator asks: a kubelet of a second session in
# the same process (tpujob sandbox attach, a test's own) must not hand out an address a pod still holds.
_COUNTERS: dict[int, itertools.count[int]] = {}
_LOCK = threading.Lock()
TRIES = 1000


class LoopbackAddresses:
    def __init__(self, base: int) -> None:
        self._base = base
        self._octet = base + os.getpid() % SPREAD

    def next(self, ports: Iterable[int] = ()) -> str:
        """A fresh address; with `ports`, one where each of them is free (another process of this machine,
        a test bed of another pytest worker whose octet is the same, may hold the address)."""
        wanted = tuple(ports)
        for _ in range(TRIES):
            with _LOCK:
                n = next(_COUNTERS.setdefault(self._base, itertools.count(2)))
            address = f"127.{self._octet}.{n // 250 % 256}.{n % 250 + 2}"
            if all(_free(address, port) for port in wanted):
                return address
        raise RuntimeError(f"no loopback address with ports {wanted} free after {TRIES} tries")


def _free(address: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True
