"""The operator's /metrics for authenticated, authorized callers only (TPUJOB_METRICS_AUTH), the way
controller-runtime's metrics filter does it (pkg/metrics/filters WithAuthenticationAndAuthorization), since
no kube-rbac-proxy image can be assumed:

- HTTPS, with a self-signed certificate made at start (controller-runtime's secure metrics serve one when
  given none): the bearer tokens that come in are not sent in the clear;
- the request's bearer token is authenticated by the API server (a TokenReview; anonymous callers get 401),
  then the user it names is authorized for the request's verb on the path (a SubjectAccessReview of a
  non-resource URL: `get /metrics`, what the chart's -metrics-reader ClusterRole grants; others get 403);
- answers are kept as controller-runtime keeps them: a token 1 minute, an allow 5 minutes, a deny 30 s, so
  a scrape every 15 s costs the API server nothing most of the time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import socketserver
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

log = logging.getLogger(__name__)

# controller-runtime's DelegatingAuthenticatorConfig.CacheTTL and DelegatingAuthorizerConfig's TTLs.
TOKEN_TTL_SECONDS = 60.0
ALLOW_TTL_SECONDS = 300.0
DENY_TTL_SECONDS = 30.0
# A cache per distinct token or user: bounded, so a flood of made-up tokens cannot grow it without end.
MAX_CACHED = 1024


class Reviews(Protocol):
    """The API server's reviews (tpujob.kube.Kube)."""

    def review_token(self, token: str) -> dict[str, Any]: ...

    def review_access(self, user: dict[str, Any], verb: str, path: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Verdict:
    status: int  # 200, 401, 403 (500 when the API server could not be asked)
    message: str


class _Expiring:
    """key -> value until its time is up; at most MAX_CACHED entries (the oldest go first)."""

    def __init__(self) -> None:
        self._items: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any, now: float) -> Any:
        found = self._items.get(key)
        if found is None or found[0] <= now:
            self._items.pop(key, None)
            return None
        return found[1]

    def put(self, key: Any, value: Any, until: float) -> None:
        if len(self._items) >= MAX_CACHED:
            self._items.pop(next(iter(self._items)))
        self._items[key] = (until, value)


class Gate:
    """Who may read /metrics, asked of the API server and remembered for a while."""

    def __init__(self, reviews: Reviews, clock: Callable[[], float] = time.monotonic) -> None:
        self.reviews = reviews
        self.clock = clock
        self._tokens = _Expiring()
        self._decisions = _Expiring()
        self._lock = threading.Lock()

    def verdict(self, authorization: str, method: str, path: str) -> Verdict:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Verdict(401, "Unauthorized: send a bearer token (Authorization: Bearer ...)")
        token = token.strip()
        try:
            user = self._user(token)
            if user is None:
                return Verdict(401, "Unauthorized")
            verb = method.lower()
            if self._allowed(user, verb, path):
                return Verdict(200, "")
        except Exception:  # the API server's answer missing: neither allowed nor the caller's fault
            log.exception("reviewing a /metrics caller failed")
            return Verdict(500, "Authentication failed")
        return Verdict(403, f"Authorization denied for user {user.get('username', '')}")

    def _user(self, token: str) -> dict[str, Any] | None:
        key = hashlib.sha256(token.encode()).hexdigest()  # never the token itself in memory for long
        with self._lock:
            known = self._tokens.get(key, self.clock())
        if known is not None:
            return known or None
        status = self.reviews.review_token(token)
        user: dict[str, Any] = status.get("user") or {} if status.get("authenticated") else {}
        with self._lock:
            self._tokens.put(key, user, self.clock() + TOKEN_TTL_SECONDS)
        return user or None

    def _allowed(self, user: dict[str, Any], verb: str, path: str) -> bool:
        key = (user.get("username"), user.get("uid"), tuple(user.get("groups") or ()), verb, path)
        with self._lock:
            known = self._decisions.get(key, self.clock())
        if known is not None:
            return bool(known)
        allowed = bool(self.reviews.review_access(user, verb, path).get("allowed"))
        ttl = ALLOW_TTL_SECONDS if allowed else DENY_TTL_SECONDS
        with self._lock:
            self._decisions.put(key, allowed, self.clock() + ttl)
        return allowed


def guarded(gate: Gate, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """A WSGI app that answers `app` only to callers `gate` lets through."""

    def guarded_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        verdict = gate.verdict(
            environ.get("HTTP_AUTHORIZATION", ""), environ.get("REQUEST_METHOD", "GET"), environ["PATH_INFO"]
        )
        if verdict.status != 200:
            reasons = {401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error"}
            start_response(f"{verdict.status} {reasons[verdict.status]}", [("Content-Type", "text/plain")])
            return [verdict.message.encode() + b"\n"]
        return app(environ, start_response)

    return guarded_app


def self_signed(folder: Path, host: str) -> tuple[Path, Path]:
    """A certificate and key for `host`, valid a year, written into `folder` (the pod's /tmp)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "metrics.crt", folder / "metrics.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A caller that speaks plain HTTP or drops mid-handshake: its problem, not a traceback in our log.
        log.debug("/metrics: a connection from %s failed", client_address, exc_info=True)


class _Quiet(WSGIRequestHandler):
    timeout = 10  # seconds a caller may take (its TLS handshake included) before its thread lets go

    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve(
    port: int, reviews: Reviews, registry: CollectorRegistry = REGISTRY, host: str = "tpujob-operator"
) -> WSGIServer:
    """/metrics over HTTPS for authorized callers only, in a daemon thread; the server (to shut down)."""
    cert, key = self_signed(Path(tempfile.mkdtemp(prefix="tpujob-metrics-")), host)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    app = guarded(Gate(reviews), make_wsgi_app(registry))
    server = make_server("", port, app, _ThreadingServer, handler_class=_Quiet)
    # The handshake in each request's own thread, not in the accept loop a slow caller would hold.
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="tpujob-metrics", daemon=True).start()
    return server
