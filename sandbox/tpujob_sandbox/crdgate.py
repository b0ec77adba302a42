"""The gate in front of the 1.36 server's CRD API (`apiextensions.k8s.io/v1`): it passes every request through
to the CRD server, except kube-apiserver's own.

kube-apiserver 1.20's in-process CRD server has its API turned off, but its controllers still run: their
informer lists CRDs as `system:apiserver` through the aggregator, and would see the 1.36 server's.
kube-apiserver would then register each CRD group as a local APIService and, while the aggregator's handlers
catch up, serve its objects from the 1.20 etcd (seen here: an object created right after its CRD was stored
there, and lost).
GKE has one CRD server, so that second view models nothing; authorization cannot refuse it (the CRD server
lets `system:masters`, the loopback identity's group, through without asking), so this gate shows that
identity no CRDs (an empty list and a quiet watch, so the in-process informer syncs and kube-apiserver is
ready) and forwards everything else unchanged: watches stream through as they come. The aggregator has
authenticated the caller and says who it is in the front-proxy headers, which the gate passes on over a
connection authenticated with the same front-proxy client cert.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

# kube-apiserver's own identity (k8s.io/apiserver pkg/authentication/user APIServerUser), as the aggregator
# names it to the server behind it.
KUBE_APISERVER_USER = "system:apiserver"
REMOTE_USER_HEADER = "X-Remote-User"
# RFC 9110 7.6.1: not forwarded by a proxy; the gate frames its own responses.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
CHUNK_BYTES = 64 * 1024
EMPTY_CRD_LIST = {
    "kind": "CustomResourceDefinitionList",
    "apiVersion": "apiextensions.k8s.io/v1",
    "metadata": {"resourceVersion": "1"},
    "items": [],
}
EMPTY_WATCH_SECONDS = 600.0


def refused(headers: Any) -> bool:
    return bool(headers.get(REMOTE_USER_HEADER) == KUBE_APISERVER_USER)


def forbidden_status() -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": "the test bed keeps kube-apiserver 1.20's in-process CRD server off the 1.36 CRDs",
    }


@dataclass(frozen=True)
class Upstream:
    host: str
    port: int
    context: ssl.SSLContext


def upstream_context(ca: Path, client_cert: Path, client_key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(client_cert, client_key)
    return context


def serve_gate(port: int, cert: Path, key: Path, upstream: Upstream) -> ThreadingHTTPServer:
    class Gate(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self.reply(200, {"status": "ok"})
            else:
                self.forward()

        def forward(self) -> None:
            if refused(self.headers):
                self.answer_kube_apiserver()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            connection = http.client.HTTPSConnection(upstream.host, upstream.port, context=upstream.context)
            try:
                # Header by header: the front proxy sends one X-Remote-Group per group.
                connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        connection.putheader(name, value)
                connection.putheader("Content-Length", str(len(body or b"")))
                connection.endheaders(body)
                response = connection.getresponse()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while chunk := response.read1(CHUNK_BYTES):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (OSError, http.client.HTTPException):
                self.close_connection = True  # the client sees the stream end, as when a server goes away
            finally:
                connection.close()

        def answer_kube_apiserver(self) -> None:
            """An empty list, and a watch on it that sees nothing until it times out, so kube-apiserver's
            in-process informer syncs (its readiness waits for that) on no CRDs; anything else is refused."""
            query = parse_qs(urlsplit(self.path).query)
            if self.command != "GET":
                self.reply(403, forbidden_status())
            elif query.get("watch", ["false"])[0] in ("true", "1"):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                timeout = float(query.get("timeoutSeconds", [str(EMPTY_WATCH_SECONDS)])[0])
                threading.Event().wait(min(timeout, EMPTY_WATCH_SECONDS))  # the watch's own length
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.reply(200, EMPTY_CRD_LIST)

        def reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a line per request would drown the log."""

    for method in ("POST", "PUT", "PATCH", "DELETE"):
        setattr(Gate, f"do_{method}", Gate.forward)
    server = ThreadingHTTPServer(("127.0.0.1", port), Gate)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="crd-gate", daemon=True).start()
    return server
