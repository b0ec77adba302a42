"""Authenticated /metrics (tpujob.metrics_auth): who gets 401, 403 and 200, how long answers are kept, and
the endpoint itself over HTTPS. The API server's reviews are a recording stand-in here;
tests/chart/test_install.py asks the real one, with a real Prometheus scraping through it."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from tpujob import metrics_auth
from tpujob_sandbox import free_port

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


def test_the_cache_is_bounded_against_made_up_tokens():
    gate = metrics_auth.Gate(Reviews())
    for n in range(metrics_auth.MAX_CACHED + 50):
        gate.verdict(f"Bearer forged-{n}", "GET", "/metrics")
    assert len(gate._tokens._items) == metrics_auth.MAX_CACHED


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
