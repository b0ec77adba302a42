"""tpujob.kubehttp's pool against a local HTTP server: connections kept and reused, a connection the server
closed while idle or one idle past the keep-alive not reused, the pool's cap on idle connections, the path,
query and headers as sent."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tpujob import kubehttp
from tpujob_sandbox import wait_for

# Answers written byte for byte, as the API server (Go's net/http) may frame them.
RAW = {
    "/chunked": (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4;ext=1\r\n{"a"\r\n6\r\n: 1234\r\nA\r\n567890123}\r\n0\r\nTrailer-Field: x\r\n\r\n'
    ),
    "/close": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    "/to-eof": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it",
    "/interim": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
    "/empty": b"HTTP/1.1 204 No Content\r\n\r\n",
    "/not-http": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "/bad-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "/huge-head": b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * (kubehttp.MAX_HEAD_BYTES + 10) + b"\r\n\r\n",
    "/short": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc",
}


class Server:
    """Answers 200 with the request line; records each request's client port (one per connection) and
    headers. /then-close: it closes the connection after its answer, without saying so (as a server whose
    idle timeout ended the connection); the paths in RAW are answered byte for byte."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.ports.append(self.client_address[1])
                server.headers.append(dict(self.headers))
                if self.path in RAW:
                    self.wfile.write(RAW[self.path])
                    self.close_connection = b"Connection: close" in RAW[self.path] or self.path == "/to-eof"
                    return
                body = f"{self.command} {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                if self.path == "/then-close":
                    self.close_connection = True

            do_GET = do_POST = do_PATCH = _answer

            def log_message(self, *_: Any) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.http.shutdown()
    running.http.server_close()


def test_one_connection_serves_request_after_request(server: Server) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: "Bearer t")

    answers = [pool.request("GET", f"/api/v1/pods/{i}").content for i in range(3)]

    assert answers == [b"GET /api/v1/pods/0", b"GET /api/v1/pods/1", b"GET /api/v1/pods/2"]
    assert len(set(server.ports)) == 1


def test_the_query_and_headers_go_as_given(server: Server) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: "Bearer t")

    answer = pool.request(
        "POST",
        "/api/v1/namespaces/ns/events",
        content=b"{}",
        params={"fieldSelector": "involvedObject.kind=Pod,involvedObject.name=p", "limit": 5},
        headers={"Content-Type": "application/json"},
    )

    assert answer.content == (
        b"POST /api/v1/namespaces/ns/events?fieldSelector=involvedObject.kind%3DPod%2CinvolvedObject.name%3Dp"
        b"&limit=5"
    )
    sent = server.headers[0]
    assert sent["Authorization"] == "Bearer t"
    assert sent["Content-Type"] == "application/json"
    assert sent["User-Agent"] == kubehttp.USER_AGENT


def test_a_connection_the_server_closed_while_idle_is_not_reused(server: Server) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: None)
    pool.request("GET", "/then-close")
    ((_, idle),) = pool._idle
    wait_for(idle.readable, timeout=10, what="the server's close to reach the client")

    assert pool.request("GET", "/b").status == 200
    assert pool.request("GET", "/c").status == 200

    assert len(set(server.ports)) == 2  # /a on the first connection; /b and /c on a second


def test_a_connection_idle_past_the_keepalive_is_closed_not_reused(server: Server) -> None:
    now = [0.0]
    pool = kubehttp.Connections(
        server.url(), None, lambda _: None, keepalive_seconds=90, clock=lambda: now[0]
    )
    pool.request("GET", "/a")
    now[0] = 89.0
    pool.request("GET", "/b")
    now[0] = 89.0 + 90.0

    pool.request("GET", "/c")

    assert server.ports[0] == server.ports[1] != server.ports[2]


def test_idle_connections_beyond_the_cap_are_closed(server: Server) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: None, max_idle=1)
    taken = [pool._take((1.0, 1.0)) for _ in range(3)]  # three threads' requests at once

    for connection in taken:
        pool._give(connection)

    assert len(pool._idle) == 1
    assert sum(connection.sock.fileno() == -1 for connection in taken) == 2  # closed


def test_an_address_that_is_no_url_is_refused() -> None:
    with pytest.raises(ValueError, match="is not an http"):
        kubehttp.Connections("api.example:443", None, lambda _: None)


@pytest.mark.parametrize(
    ("path", "status", "content", "kept"),
    [
        ("/chunked", 200, b'{"a": 1234567890123}', True),
        ("/close", 200, b"{}", False),
        ("/to-eof", 200, b"all of it", False),
        ("/interim", 201, b"ok", True),
        ("/empty", 204, b"", True),
    ],
)
def test_an_answer_is_read_whole_however_it_is_framed(
    server: Server, path: str, status: int, content: bytes, kept: bool
) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: None)

    answer = pool.request("GET", path)

    assert (answer.status, answer.content) == (status, content)
    assert len(pool._idle) == (1 if kept else 0)
    assert pool.request("GET", "/next").content == b"GET /next"  # the connection was left at an answer's end


@pytest.mark.parametrize("path", ["/not-http", "/bad-chunk", "/huge-head", "/short"])
def test_an_answer_that_breaks_the_protocol_is_an_error_and_its_connection_closed(
    server: Server, path: str
) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: None)

    with pytest.raises(kubehttp.ProtocolError):
        pool.request("GET", path)

    assert not pool._idle


def test_a_header_with_a_line_break_is_not_sent(server: Server) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: "Bearer a\r\nX-Injected: 1")

    with pytest.raises(ValueError, match="Authorization holds a line break"):
        pool.request("GET", "/a")

    assert not server.ports


def test_a_target_with_a_space_is_not_sent(server: Server) -> None:
    pool = kubehttp.Connections(server.url(), None, lambda _: None)

    with pytest.raises(ValueError, match="no spaces or control characters"):
        pool.request("GET", "/api/v1/namespaces/a b/pods")
