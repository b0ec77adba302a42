"""Stopping a listening socket that a thread of ours accepts on."""

from __future__ import annotations

import contextlib
import socket
import threading

JOIN_SECONDS = 5.0


def close_listener(listener: socket.socket, acceptor: threading.Thread | None) -> None:
    """Wake the thread accepting on `listener`, let it end, then close the socket.

    Closed alone, the socket's number is free while that thread is still in accept() or about to call it:
    the process's next socket may get the number (another server's listener), and the thread would take
    that server's connections. Seen on 2026-11-29: a hostile test endpoint's acceptor answered the simulated
    GKE's clients in a later test of the same worker. shutdown() makes a pending or next accept() fail at
    once (EINVAL on Linux); the thread returns on that error before the number is given back."""
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    if acceptor is not None and acceptor is not threading.current_thread():
        acceptor.join(JOIN_SECONDS)
    listener.close()
