"""Authenticated /metrics (tpujob.metrics_auth): who gets 401, 403 and 200, how long answers are kept, and
the endpoint itself over HTTPS. The API server's reviews are a recording stand-in here;
tests/chart/test_install.py asks the real one, with a real Prometheus scraping through it."""

from __future__ import annotations

import socket
import ssl
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from tpujob import metrics_auth
from tpujob_sandbox import free_port, wait_for

READER = "system:serviceaccount:monitoring:prometheus"


class Reviews:
    """The API server's answers: `tokens` it authenticates (token -> username), users allowed GET /metrics."""

    def __init__(self) -> None:
        self.tokens = {"prometheus-token": READER, "tenant-token": "system:serviceaccount:team-a:default"}
        self.readers = {READER}
        self.asked: list[tuple[str, Any]] = []

    def review_token(self, token: str) -> dict[str, Any]:
        self.asked.append(("token", token))
        if token not in self.tokens:
            return {"authenticated": False, "error": "invalid bearer token"}
        return {
            "authenticated": True,
            "user": {"username": self.tokens[token], "groups": ["system:authenticated"]},
        }

    def review_access(self, user: dict[str, Any], verb: str, path: str) -> dict[str, Any]:
        self.asked.append(("access", (user["username"], verb, path)))
        return {"allowed": user["username"] in self.readers and (verb, path) == ("get", "/metrics")}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("", 401),
        ("Basic dXNlcjpwYXNz", 401),
        ("Bearer ", 401),
        ("Bearer forged", 401),
        ("Bearer tenant-token", 403),
        ("Bearer prometheus-token", 200),
    ],
)
def test_only_an_authenticated_and_authorized_caller_reads_metrics(header, status):
    assert metrics_auth.Gate(Reviews()).verdict(header, "GET", "/metrics").status == status


def test_the_verb_and_path_asked_are_the_request_s():
    reviews = Reviews()
    gate = metrics_auth.Gate(reviews)
    assert gate.verdict("Bearer prometheus-token", "POST", "/metrics").status == 403
    assert gate.verdict("Bearer prometheus-token", "GET", "/debug").status == 403
    assert ("access", (READER, "post", "/metrics")) in reviews.asked
    assert ("access", (READER, "get", "/debug")) in reviews.asked


def test_answers_are_kept_as_controller_runtime_keeps_them():
    reviews, clock = Reviews(), Clock()
    gate = metrics_auth.Gate(reviews, clock)
    for _ in range(3):
        assert gate.verdict("Bearer prometheus-token", "GET", "/metrics").status == 200
    assert len(reviews.asked) == 2  # one TokenReview, one SubjectAccessReview for three scrapes
    clock.now += metrics_auth.TOKEN_TTL_SECONDS + 1
    gate.verdict("Bearer prometheus-token", "GET", "/metrics")
    assert [kind for kind, _ in reviews.asked] == ["token", "access", "token"]  # the allow lasts 5 minutes
    # A denial is kept 30 s only: a reader bound meanwhile gets in soon after.
    gate.verdict("Bearer tenant-token", "GET", "/metrics")
    reviews.readers.add("system:serviceaccount:team-a:default")
    assert gate.verdict("Bearer tenant-token", "GET", "/metrics").status == 403
    clock.now += metrics_auth.DENY_TTL_SECONDS + 1
    assert gate.verdict("Bearer tenant-token", "GET", "/metrics").status == 200


def test_a_failed_review_is_an_error_not_a_pass():
    class Down(Reviews):
        def review_token(self, token: str) -> dict[str, Any]:
            raise ConnectionError("API server unreachable")

    assert metrics_auth.Gate(Down()).verdict("Bearer prometheus-token", "GET", "/metrics").status == 500


def test_the_caches_are_bounded_and_refusals_never_push_out_a_reader():
    reviews, clock = Reviews(), Clock()
    gate = metrics_auth.Gate(reviews, clock)
    assert gate.verdict("Bearer prometheus-token", "GET", "/metrics").status == 200
    for n in range(metrics_auth.MAX_CACHED + 50):
        clock.now += 1 / metrics_auth.REVIEW_PER_SECOND  # within the budget: every made-up token is asked
        assert gate.verdict(f"Bearer forged-{n}", "GET", "/metrics").status == 401
    assert len(gate._refused) == metrics_auth.MAX_CACHED
    assert len(gate._users) == 1
    # No token is kept, only its keyed hash.
    assert all(isinstance(key, bytes) and b"forged" not in key for key in gate._refused._items)


def test_the_least_recently_used_answer_goes_first():
    cache = metrics_auth._Expiring()
    for n in range(metrics_auth.MAX_CACHED):
        cache.put(n, n, until=10.0)
    assert cache.get(0, now=1.0) == 0  # used: now the newest
    cache.put("one more", 1, until=10.0)
    assert cache.get(0, now=1.0) == 0 and cache.get(1, now=1.0) is None


def test_many_requests_with_one_token_make_one_review_even_at_once():
    reviews = Reviews()
    release, together = threading.Event(), threading.Barrier(8)

    class Slow(Reviews):
        def review_token(self, token: str) -> dict[str, Any]:
            reviews.asked.append(("token", token))
            release.wait(10)  # every other caller arrives while this review is under way
            return {"authenticated": True, "user": {"username": READER}}

        def review_access(self, user: dict[str, Any], verb: str, path: str) -> dict[str, Any]:
            return reviews.review_access(user, verb, path)

    gate = metrics_auth.Gate(Slow())

    def scrape() -> int:
        together.wait()
        return gate.verdict("Bearer prometheus-token", "GET", "/metrics").status

    with ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(scrape) for _ in range(8)]
        wait_for(lambda: reviews.asked, timeout=10, what="the first TokenReview")
        release.set()
        assert [answer.result() for answer in answers] == [200] * 8
    assert [kind for kind, _ in reviews.asked] == ["token", "access"]
    # And one after another: still the one review.
    for _ in range(50):
        assert gate.verdict("Bearer prometheus-token", "GET", "/metrics").status == 200
    assert len(reviews.asked) == 2


def test_a_flood_of_made_up_tokens_costs_the_api_server_the_budget_only():
    """Each unseen token would cost a TokenReview from the operator's own request budget: a flood of them
    is answered 429 once the review budget is spent, asking nothing, and the budget comes back with time."""
    reviews, clock = Reviews(), Clock()
    gate = metrics_auth.Gate(reviews, clock)
    answers = [gate.verdict(f"Bearer forged-{n}", "GET", "/metrics") for n in range(1000)]
    assert len(reviews.asked) == metrics_auth.REVIEW_BURST
    assert [a.status for a in answers].count(401) == metrics_auth.REVIEW_BURST
    over = answers[-1]
    assert over.status == 429 and over.retry_after >= 1
    # A minute of flood at 100 a second asks the API server REVIEW_PER_SECOND a second, no more.
    for _ in range(60):
        clock.now += 1
        for n in range(100):
            gate.verdict(f"Bearer forged-{clock.now}-{n}", "GET", "/metrics")
    assert len(reviews.asked) == metrics_auth.REVIEW_BURST + 60 * metrics_auth.REVIEW_PER_SECOND
    # A reader already known is served from its cache all along, the flood notwithstanding.
    gate2 = metrics_auth.Gate(reviews, clock)
    assert gate2.verdict("Bearer prometheus-token", "GET", "/metrics").status == 200
    for n in range(100):
        gate2.verdict(f"Bearer forged-again-{n}", "GET", "/metrics")
    assert gate2.verdict("Bearer prometheus-token", "GET", "/metrics").status == 200


def get(port: int, token: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # self-signed, as Prometheus is told
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_endpoint_serves_https_to_readers_only():
    registry = CollectorRegistry()
    Counter("tpujob_example", "an example series", registry=registry).inc()
    port = free_port()
    server = metrics_auth.serve(port, Reviews(), registry)
    try:
        assert get(port, None)[0] == 401
        assert get(port, "tenant-token") == (
            403,
            b"Authorization denied for user system:serviceaccount:team-a:default\n",
        )
        status, body = get(port, "prometheus-token")
        assert status == 200 and b"tpujob_example_total 1.0" in body
        with pytest.raises(
            (urllib.error.URLError, ConnectionError)
        ):  # no plain HTTP: tokens never cross in the clear
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        server.shutdown()


def test_connections_past_the_bound_are_closed_not_given_threads():
    port = free_port()
    server = metrics_auth.serve(port, Reviews(), CollectorRegistry())
    idle = []

    def connection_threads() -> int:  # the server's own: other tests' threads on this worker come and go
        return sum(1 for t in threading.enumerate() if t.name.startswith("tpujob-metrics-conn"))

    try:
        threads = connection_threads()
        # Connections that say nothing hold their pooled thread until the read deadline.
        for _ in range(metrics_auth.MAX_CONNECTIONS + 20):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        wait_for(lambda: server.refused == 20, timeout=10, what="20 connections refused")
        # Each accepted one holds a pooled thread; the 20 past the bound got none.
        assert metrics_auth.MAX_CONNECTIONS <= connection_threads() <= threads + metrics_auth.MAX_CONNECTIONS
        for held in idle:
            held.close()
        # Once they go, a reader is served again.
        wait_for(lambda: status_or_none(port, "prometheus-token") == 200, timeout=20, what="a reader served")
    finally:
        server.shutdown()
        server.server_close()


def status_or_none(port: int, token: str) -> int | None:
    try:
        return get(port, token)[0]
    except OSError:  # a connection closed while the idle ones still held every slot
        return None


def test_a_certificate_given_is_served_and_verifies_against_its_ca(tmp_path):
    """TPUJOB_METRICS_CERT_DIR (the chart's metrics.auth.tls.secretName): a scraper verifies the name."""
    name = "tpujob-operator-metrics.tpujob-system.svc"
    cert, key = metrics_auth.self_signed(tmp_path, name)  # its own CA: what the scraper is given
    cert.rename(tmp_path / "tls.crt")
    key.rename(tmp_path / "tls.key")
    port = free_port()
    server = metrics_auth.serve(port, Reviews(), CollectorRegistry(), cert_dir=str(tmp_path))
    try:
        verifying = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            verifying.wrap_socket(raw, server_hostname=name) as tls,
        ):
            tls.sendall(b"GET /metrics HTTP/1.0\r\nAuthorization: Bearer prometheus-token\r\n\r\n")
            assert tls.recv(64).startswith(b"HTTP/1.0 200")
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            verifying.wrap_socket(raw, server_hostname="someone-else.svc")
    finally:
        server.shutdown()
        server.server_close()
