"""A TCP proxy that can black-hole its traffic, for network partitions between one process and a server.

What a partition looks like to a client: its connections stay open and its packets are silently dropped
(no reset, no refusal), so each call waits until its own timeout; new connections are accepted by nobody
useful either. `cut()` starts dropping every byte in both directions, on the connections open and on new
ones; `heal()` ends it, resetting the connections that lived through it (their streams lost bytes, as a
TCP connection whose retransmissions timed out would be reset), so the client reconnects. The proxy notes
when each client sent bytes, so a test can tell whether a cut-off process still tries to talk.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

from tpujob_sandbox.listeners import close_listener

CHUNK = 65536


@dataclass
class _Link:
    client: socket.socket
    server: socket.socket
    cut: bool = False  # lived through a cut: reset at the heal


@dataclass
class PartitionProxy:
    """Forwards 127.0.0.1:<port> to `target` (host, port) until `cut()`."""

    target: tuple[str, int]
    sent_at: list[float] = field(default_factory=list)  # monotonic times a client sent bytes
    _links: list[_Link] = field(default_factory=list)
    _cut: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _listener: socket.socket | None = None
    _acceptor: threading.Thread | None = None

    def start(self) -> PartitionProxy:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._acceptor = threading.Thread(target=self._accept, name="partition-proxy", daemon=True)
        self._acceptor.start()
        return self

    @property
    def port(self) -> int:
        assert self._listener is not None, "start() first"
        return int(self._listener.getsockname()[1])

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for link in self._links:
                link.cut = True

    def heal(self) -> None:
        with self._lock:
            self._cut = False
            lost = [link for link in self._links if link.cut]
        for link in lost:
            self._close(link)

    def sent_since(self, moment: float) -> int:
        """Chunks clients sent after the monotonic `moment` (forwarded or dropped)."""
        with self._lock:
            return sum(1 for sent in self.sent_at if sent > moment)

    def stop(self) -> None:
        if self._listener is not None:
            close_listener(self._listener, self._acceptor)
        with self._lock:
            links = list(self._links)
        for link in links:
            self._close(link)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                link = _Link(client, server, cut=self._cut)
                self._links.append(link)
            threading.Thread(target=self._pump, args=(link, client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, server, client, False), daemon=True).start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = source.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                self._close(link)
                return
            with self._lock:
                if from_client:
                    self.sent_at.append(time.monotonic())
                dropped = self._cut or link.cut
            if dropped:
                continue  # black-holed: nobody answers, nobody resets
            try:
                sink.sendall(data)
            except OSError:
                self._close(link)
                return

    def _close(self, link: _Link) -> None:
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        for end in (link.client, link.server):
            with contextlib.suppress(OSError):  # closed by the other side already
                end.shutdown(socket.SHUT_RDWR)
            end.close()
