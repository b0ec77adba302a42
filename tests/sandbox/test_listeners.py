"""A listening socket a thread accepts on is closed only once that thread has let go of it."""

from __future__ import annotations

import socket
import threading

from tpujob_sandbox.listeners import close_listener


def accept_until_error(listener: socket.socket, accepted: list[socket.socket]) -> None:
    while True:
        try:
            accepted.append(listener.accept()[0])
        except OSError:
            return


def test_the_accepting_thread_has_ended_when_its_listener_is_closed():
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    acceptor = threading.Thread(target=accept_until_error, args=(listener, accepted), daemon=True)
    acceptor.start()
    with socket.create_connection(listener.getsockname(), timeout=5):
        pass
    close_listener(listener, acceptor)
    # Closed alone, the socket leaves its thread blocked in accept(), its number free for the next socket.
    assert not acceptor.is_alive()
    assert listener.fileno() == -1
    # The next listener's connections are its own.
    nxt = socket.create_server(("127.0.0.1", 0))
    with nxt, socket.create_connection(nxt.getsockname(), timeout=5):
        nxt.settimeout(5)
        nxt.accept()[0].close()
    for sock in accepted:
        sock.close()
