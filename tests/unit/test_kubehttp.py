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


class Server:
    """Answers 200 with the request line; records each request's client port (one per connection) and
    headers. /then-close: it closes the connection after its answer, without saying so (as a server whose
    idle timeout ended the connection)."""

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
    wait_for(lambda: kubehttp._readable(idle), timeout=10, what="the server's close to reach the client")

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
    assert sum(connection.sock is None for connection in taken) == 2


def test_an_address_that_is_no_url_is_refused() -> None:
    with pytest.raises(ValueError, match="is not an http"):
        kubehttp.Connections("api.example:443", None, lambda _: None)
