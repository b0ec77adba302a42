"""The operator's /metrics for authenticated, authorized callers only (TPUJOB_METRICS_AUTH), the way
controller-runtime's metrics filter does it (pkg/metrics/filters WithAuthenticationAndAuthorization), since
no kube-rbac-proxy image can be assumed:

- HTTPS, with a self-signed certificate made at start (controller-runtime's secure metrics serve one when
  given none): the bearer tokens that come in are not sent in the clear;
- the request's bearer token is authenticated by the API server (a TokenReview; anonymous callers get 401),
  then the user it names is authorized for the request's verb on the path (a SubjectAccessReview of a
  non-resource URL: `get /metrics`, what the chart's -metrics-reader ClusterRole grants; others get 403);
- answers are kept as controller-runtime keeps them: a token 1 minute, an allow 5 minutes, a deny 30 s, so
  a scrape every 15 s costs the API server nothing most of the time. As the API server's own token cache
  (k8s.io/apiserver's cachedTokenAuthenticator) keeps them: keyed by an HMAC-SHA256 of the token under a
  key made at start (never the token; no precomputed or colliding keys), least recently used out first,
  and callers with the same token at once share one review (its singleflight);
- what a caller can make the operator ask is bounded: authenticated users and refused tokens are kept in
  separate caches (a flood of made-up tokens cannot push Prometheus' answer out), and reviews not answered
  from a cache come from a budget of REVIEW_BURST at once, REVIEW_PER_SECOND after that; a caller past it
  gets 429 with Retry-After, asking the API server nothing. The reviews are requests of the operator's own
  client-side limit (tpujob.ratelimit), so without the budget every unseen token would spend a token of the
  budget the passes write with; with it, a flood costs at most REVIEW_PER_SECOND of the default 20 qps;
- at most MAX_CONNECTIONS connections are served at once, by as many pooled threads; one more is closed
  at once, never given a thread of its own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import logging
import math
import secrets
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
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
# Reviews not answered from a cache: Prometheus (a replica or two, one token each, asked again once a
# minute) needs a few a minute; a burst of 10 serves every scraper at a restart, and 1 a second sustained is
# 5 % of the operator's default 20 qps, spent by the Events' class (tpujob.kube), never before a pass.
REVIEW_BURST = 10
REVIEW_PER_SECOND = 1.0
# Connections served at once (each holds a pooled thread for at most _Quiet.timeout): Prometheus' replicas
# and a person or two with curl.
MAX_CONNECTIONS = 8
# How long a caller waits for another's review of the same token (the review's own deadline is the client's).
_SHARED_WAIT_SECONDS = 30.0


class Reviews(Protocol):
    """The API server's reviews (tpujob.kube.Kube)."""

    def review_token(self, token: str) -> dict[str, Any]: ...

    def review_access(self, user: dict[str, Any], verb: str, path: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Verdict:
    status: int  # 200, 401, 403, 429 (over the review budget), 500 (the API server could not be asked)
    message: str
    retry_after: int = 0  # seconds, with 429


class OverBudget(Exception):
    """No review may be asked now: the caller is told to come back in `seconds`."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"over the review budget for {seconds:.1f}s")
        self.seconds = seconds


class _Expiring:
    """key -> value until its time is up; at most MAX_CACHED entries, the least recently used out first."""

    def __init__(self) -> None:
        self._items: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Any, now: float) -> Any:
        found = self._items.get(key)
        if found is None or found[0] <= now:
            self._items.pop(key, None)
            return None
        self._items.move_to_end(key)
        return found[1]

    def put(self, key: Any, value: Any, until: float) -> None:
        self._items[key] = (until, value)
        self._items.move_to_end(key)
        while len(self._items) > MAX_CACHED:
            self._items.popitem(last=False)


class _Budget:
    """A token bucket of reviews: `burst` at once, then `rate` a second (the caller holds the lock)."""

    def __init__(self, burst: int, rate: float, now: float) -> None:
        self.burst, self.rate = burst, rate
        self._tokens, self._at = float(burst), now

    def take(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            raise OverBudget((1 - self._tokens) / self.rate)
        self._tokens -= 1


class Gate:
    """Who may read /metrics, asked of the API server and remembered for a while."""

    def __init__(self, reviews: Reviews, clock: Callable[[], float] = time.monotonic) -> None:
        self.reviews = reviews
        self.clock = clock
        self._key = secrets.token_bytes(32)  # the cache keys' HMAC key, this process' only
        self._users = _Expiring()  # token key -> the user it authenticates
        self._refused = _Expiring()  # token key -> True: its own cache, so refusals cannot evict users
        self._decisions = _Expiring()
        self._budget = _Budget(REVIEW_BURST, REVIEW_PER_SECOND, clock())
        self._asking: dict[Any, threading.Event] = {}  # reviews under way, by cache key
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
        except OverBudget as over:
            wait = max(1, math.ceil(over.seconds))
            return Verdict(429, f"Too many new callers: try again in {wait}s", retry_after=wait)
        except Exception:  # the API server's answer missing: neither allowed nor the caller's fault
            log.exception("reviewing a /metrics caller failed")
            return Verdict(500, "Authentication failed")
        return Verdict(403, f"Authorization denied for user {user.get('username', '')}")

    def _user(self, token: str) -> dict[str, Any] | None:
        key = hmac.new(self._key, token.encode(), hashlib.sha256).digest()

        def cached(now: float) -> tuple[bool, dict[str, Any] | None]:
            if self._refused.get(key, now):
                return True, None
            user = self._users.get(key, now)
            return user is not None, user

        def review() -> tuple[dict[str, Any] | None, float]:
            status = self.reviews.review_token(token)
            user: dict[str, Any] = (status.get("user") or {}) if status.get("authenticated") else {}
            return user or None, TOKEN_TTL_SECONDS

        def keep(user: dict[str, Any] | None, until: float) -> None:
            if user is None:
                self._refused.put(key, True, until)
            else:
                self._users.put(key, user, until)

        user: dict[str, Any] | None = self._once(("token", key), cached, review, keep)
        return user

    def _allowed(self, user: dict[str, Any], verb: str, path: str) -> bool:
        key = (user.get("username"), user.get("uid"), tuple(user.get("groups") or ()), verb, path)

        def cached(now: float) -> tuple[bool, bool | None]:
            known = self._decisions.get(key, now)
            return known is not None, known

        def review() -> tuple[bool, float]:
            allowed = bool(self.reviews.review_access(user, verb, path).get("allowed"))
            return allowed, ALLOW_TTL_SECONDS if allowed else DENY_TTL_SECONDS

        def keep(allowed: bool, until: float) -> None:
            self._decisions.put(key, allowed, until)

        return bool(self._once(("access", key), cached, review, keep))

    def _once(
        self,
        key: Any,
        cached: Callable[[float], tuple[bool, Any]],
        review: Callable[[], tuple[Any, float]],
        keep: Callable[[Any, float], None],
    ) -> Any:
        """The cached answer; else one review for every caller asking the same at once, from the budget."""
        while True:
            with self._lock:
                found, answer = cached(self.clock())
                if found:
                    return answer
                under_way = self._asking.get(key)
                if under_way is None:
                    self._budget.take(self.clock())
                    under_way = self._asking[key] = threading.Event()
                    break
            # Another caller asks the same: its answer, once kept (a failed review leaves none: ask again).
            under_way.wait(_SHARED_WAIT_SECONDS)
        try:
            answer, ttl = review()
            with self._lock:
                keep(answer, self.clock() + ttl)
            return answer
        finally:
            with self._lock:
                self._asking.pop(key, None)
            under_way.set()


def guarded(gate: Gate, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """A WSGI app that answers `app` only to callers `gate` lets through."""

    def guarded_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        verdict = gate.verdict(
            environ.get("HTTP_AUTHORIZATION", ""), environ.get("REQUEST_METHOD", "GET"), environ["PATH_INFO"]
        )
        if verdict.status != 200:
            reasons = {
                401: "Unauthorized",
                403: "Forbidden",
                429: "Too Many Requests",
                500: "Internal Server Error",
            }
            headers = [("Content-Type", "text/plain")]
            if verdict.retry_after:
                headers.append(("Retry-After", str(verdict.retry_after)))
            start_response(f"{verdict.status} {reasons[verdict.status]}", headers)
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


class _PooledServer(WSGIServer):
    """A WSGI server whose connections are served by at most MAX_CONNECTIONS pooled threads: one more is
    closed as it comes (the caller sees a reset and tries again), never queued or given a thread."""

    connections = MAX_CONNECTIONS
    request_queue_size = 64  # the listen backlog: a burst waits for the accept loop, not for SYN retries

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(self.connections)
        self._pool = ThreadPoolExecutor(self.connections, thread_name_prefix="tpujob-metrics-conn")
        self.refused = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            log.debug("/metrics: %d connections served already, %s closed", self.connections, client_address)
            self.shutdown_request(request)
            return
        self._pool.submit(self._serve, request, client_address)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A caller that speaks plain HTTP or drops mid-handshake: its problem, not a traceback in our log.
        log.debug("/metrics: a connection from %s failed", client_address, exc_info=True)


class _Quiet(WSGIRequestHandler):
    timeout = 10  # seconds a caller may take (its TLS handshake included) before its thread lets go

    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve(
    port: int,
    reviews: Reviews,
    registry: CollectorRegistry = REGISTRY,
    host: str = "tpujob-operator",
    cert_dir: str | None = None,
) -> WSGIServer:
    """/metrics over HTTPS for authorized callers only, served from a daemon thread; the server (to shut
    down). The certificate is `cert_dir`'s tls.crt and tls.key (a kubernetes.io/tls Secret's keys) when
    given, so a scraper can verify it against its CA; else one made at start, self-signed."""
    if cert_dir:
        cert, key = Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key"
    else:
        cert, key = self_signed(Path(tempfile.mkdtemp(prefix="tpujob-metrics-")), host)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    app = guarded(Gate(reviews), make_wsgi_app(registry))
    server = make_server("", port, app, _PooledServer, handler_class=_Quiet)
    # The handshake in each connection's pooled thread, not in the accept loop a slow caller would hold.
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="tpujob-metrics", daemon=True).start()
    return server
