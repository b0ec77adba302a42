"""The operator's HTTP connections to the API server: HTTP/1.1 over kept-alive TLS sockets, a pool of them,
with no layer between a request and its socket but the credentials' header.

Why not httpx (lightkube's client, which this replaced), nor http.client: a reconcile pass' requests are
the operator's largest CPU cost. Posting 300 Events over one kept-alive TLS connection (issue #51, this
machine), httpx spent about 1.1 ms of CPU on each (its request and URL models, the auth and redirect flows,
httpcore's pool, h11's parser), urllib3 0.7 ms, http.client 0.4 ms, of which a quarter went to parsing the
answer's headers with the email package and a new file object per answer. The operator's requests need none
of that: no redirects (the API server sends none), no cookies, one server, and only three of the answer's
headers (Content-Length, Transfer-Encoding, Connection). So the exchange is written here, to RFC 9112's
rules for what it reads: a status line, header lines (at most MAX_HEAD_BYTES in all), then a body by
Content-Length, by chunks, or to the connection's end. The same loop through tpujob.kube: 0.27 ms a request.

The pool, as httpx's was: a thread takes an idle connection or opens one (it never waits for the pool); up
to `max_idle` are kept for reuse, each for up to `keepalive_seconds` idle (client-go's IdleConnTimeout,
90 s), and one the server closed meanwhile (readable while idle: its EOF) is dropped before reuse, as
httpcore's `has_expired` does. Timeouts, as httpx's: (connect, read); the connect one covers the TCP and TLS
handshakes, the read one every later wait on the socket (writes too). A timeout raises TimeoutError; an
answer that breaks the protocol raises ProtocolError, and its connection is closed.

No proxy from the environment (HTTPS_PROXY): kopf's watches, the operator's other connection to the same
server, take none either (kopf's `settings.networking.trust_env` is off).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

# (connect, read) seconds.
Timeout = tuple[float, float]
USER_AGENT = "tpujob-operator"
# The status line and headers of one answer, at most (h11's default bound: 16 KiB; Go's server writes far
# less): a server that sends more is not one to trust with the rest.
MAX_HEAD_BYTES = 64 * 1024
_READ_BUFFER = 64 * 1024

# The Authorization header to send (None: none); given the one the server refused (401), a fresh one to
# try once more, or the same when there is none fresher (kubelogin.Credentials.authorization).
Authorization = Callable[[str | None], str | None]


class ProtocolError(Exception):
    """An answer that is not HTTP/1.1 as RFC 9112 has it (or too long a head)."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    reason: str
    content: bytes

    @property
    def is_error(self) -> bool:
        return self.status >= 400


class _Connection:
    """One socket and what was read from it ahead of the caller (its buffer, kept for the connection's life:
    no file object per answer)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def readable(self) -> bool:
        """Something to read while idle: the server's EOF (it closed the connection) or bytes nobody asked
        for; either way the connection is not for another request."""
        if self.buffer or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            return True
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return bool(poller.poll(0))

    def _fill(self) -> bool:
        """More bytes into the buffer; False at the connection's end."""
        data = self.sock.recv(_READ_BUFFER)
        self.buffer += data
        return bool(data)

    def readline(self, limit: int) -> bytes:
        """Up to and with the next LF, at most `limit` bytes."""
        start = 0
        while (end := self.buffer.find(b"\n", start)) < 0:
            if len(self.buffer) > limit:
                raise ProtocolError(f"an answer's head longer than {MAX_HEAD_BYTES} bytes")
            start = len(self.buffer)
            if not self._fill():
                raise ProtocolError("the connection ended inside an answer's head")
        if end >= limit:
            raise ProtocolError(f"an answer's head longer than {MAX_HEAD_BYTES} bytes")
        line = bytes(self.buffer[: end + 1])
        del self.buffer[: end + 1]
        return line

    def read(self, length: int) -> bytes:
        while len(self.buffer) < length:
            if not self._fill():
                missing = length - len(self.buffer)
                raise ProtocolError(f"the connection ended {missing} bytes before the answer's end")
        data = bytes(self.buffer[:length])
        del self.buffer[:length]
        return data

    def read_to_end(self) -> bytes:
        while self._fill():
            pass
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


class Connections:
    def __init__(
        self,
        server: str,
        context: ssl.SSLContext | None,
        authorization: Authorization,
        *,
        max_idle: int = 16,
        timeout: Timeout = (10.0, 60.0),
        keepalive_seconds: float = 90.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = urlsplit(server)
        if url.scheme not in ("https", "http") or not url.hostname:
            raise ValueError(f"the API server's address {server!r} is not an http(s) URL")
        self.server = server
        self._tls = url.scheme == "https"
        self._host, self._port = url.hostname, url.port or (443 if self._tls else 80)
        default_port = self._port == (443 if self._tls else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host  # an IPv6 address in brackets
        self._host_header = host if default_port else f"{host}:{self._port}"
        self._prefix = url.path.rstrip("/")  # a server behind a path (a proxy's), as httpx's base_url
        self._context = context if context is not None else ssl.create_default_context()
        self._authorization = authorization
        self._max_idle, self._timeout = max_idle, timeout
        self._keepalive, self._clock = keepalive_seconds, clock
        self._lock = threading.Lock()
        self._idle: list[tuple[float, _Connection]] = []  # (idle since, connection), the newest last

    def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        params: dict[str, str | int] | None = None,
        headers: dict[str, str] | None = None,
        timeout: Timeout | None = None,
    ) -> Response:
        """One request and its whole answer; sent once more, with fresh credentials, after a 401."""
        target = f"{self._prefix}{path}?{urlencode(params)}" if params else f"{self._prefix}{path}"
        if any(char <= " " or char == "\x7f" for char in target):
            raise ValueError(f"{target!r}: a request target has no spaces or control characters")
        sent = self._authorization(None)
        response = self._send(method, target, content, headers or {}, sent, timeout or self._timeout)
        if response.status == 401 and sent is not None:
            fresh = self._authorization(sent)
            if fresh is not None and fresh != sent:
                response = self._send(method, target, content, headers or {}, fresh, timeout or self._timeout)
        return response

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.close()

    def _head(
        self,
        method: str,
        target: str,
        content: bytes | None,
        headers: dict[str, str],
        authorization: str | None,
    ) -> bytes:
        fields = {"Host": self._host_header, "User-Agent": USER_AGENT, **headers}
        if authorization is not None:
            fields["Authorization"] = authorization
        if content is not None or method in ("POST", "PUT", "PATCH"):
            fields["Content-Length"] = str(len(content or b""))
        lines = [f"{method} {target} HTTP/1.1"]
        for name, value in fields.items():
            if "\r" in value or "\n" in value:  # a token file's, say: it would end the header early
                raise ValueError(f"the request header {name} holds a line break")
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send(
        self,
        method: str,
        target: str,
        content: bytes | None,
        headers: dict[str, str],
        authorization: str | None,
        timeout: Timeout,
    ) -> Response:
        message = self._head(method, target, content, headers, authorization) + (content or b"")
        connection = self._take(timeout)
        try:
            connection.sock.settimeout(timeout[1])
            connection.sock.sendall(message)
            response, keep = _read_response(connection)
        except BaseException:
            connection.close()
            raise
        if keep:
            self._give(connection)
        else:
            connection.close()
        return response

    def _take(self, timeout: Timeout) -> _Connection:
        """The most recently used idle connection that is still good, else a new one, connected."""
        now = self._clock()
        while True:
            with self._lock:
                if not self._idle:
                    break
                since, connection = self._idle.pop()
            if now - since < self._keepalive and not connection.readable():
                return connection
            connection.close()  # expired, or the server closed it (or sent what nobody asked for)
        sock = socket.create_connection((self._host, self._port), timeout=timeout[0])
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls:
                sock = self._context.wrap_socket(sock, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock)

    def _give(self, connection: _Connection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append((self._clock(), connection))
                return
        connection.close()  # as many idle as kept already


def _read_response(connection: _Connection) -> tuple[Response, bool]:
    """One answer (1xx interim answers skipped), and whether the connection may carry another request."""
    while True:
        budget = [MAX_HEAD_BYTES]
        version, status, reason = _status_line(_line(connection, budget))
        headers = _headers(connection, budget)
        if not 100 <= status < 200:
            break
    tokens = headers.get("connection", "").lower()
    keep = "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens
    if status in (204, 304):
        return Response(status, reason, b""), keep
    encoding = headers.get("transfer-encoding", "").lower()
    if encoding:
        if encoding.replace(" ", "").split(",")[-1] != "chunked":
            raise ProtocolError(f"Transfer-Encoding {encoding!r} without chunked last")
        return Response(status, reason, _chunked(connection)), keep
    if "content-length" in headers:
        length = headers["content-length"]
        if not length.isdigit():
            raise ProtocolError(f"Content-Length {length!r} is no length")
        return Response(status, reason, connection.read(int(length))), keep
    return Response(status, reason, connection.read_to_end()), False  # the body runs to the connection's end


def _line(connection: _Connection, budget: list[int]) -> bytes:
    """A line of an answer's head, counted against what is left of `budget`."""
    line = connection.readline(budget[0])
    budget[0] -= len(line)
    return line


def _status_line(line: bytes) -> tuple[str, int, str]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if (
        len(parts) < 2
        or parts[0] not in ("HTTP/1.1", "HTTP/1.0")
        or len(parts[1]) != 3
        or not parts[1].isdigit()
    ):
        raise ProtocolError(f"{line[:100]!r} is not an HTTP/1.1 status line")
    return parts[0], int(parts[1]), parts[2] if len(parts) == 3 else ""


def _headers(connection: _Connection, budget: list[int]) -> dict[str, str]:
    """The header fields by lowercased name; repeated ones joined with commas (RFC 9110 5.3)."""
    headers: dict[str, str] = {}
    while (line := _line(connection, budget)) not in (b"\r\n", b"\n"):
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():  # obs-fold (a line begun by a space) too
            raise ProtocolError(f"{line[:100]!r} is not a header field line")
        key, value = name.lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _chunked(connection: _Connection) -> bytes:
    """A chunked body (RFC 9112 7.1): chunk extensions ignored, the trailer section read and dropped."""
    chunks: list[bytes] = []
    while True:
        budget = [MAX_HEAD_BYTES]
        size = _line(connection, budget).split(b";", 1)[0].strip()
        if not size or any(byte not in b"0123456789abcdefABCDEF" for byte in size):
            raise ProtocolError(f"{size[:100]!r} is not a chunk size")
        length = int(size, 16)
        if length == 0:
            _headers(connection, budget)
            return b"".join(chunks)
        chunks.append(connection.read(length))
        if _line(connection, [2]) not in (b"\r\n", b"\n"):
            raise ProtocolError("a chunk not followed by its line end")
