"""A tenant's worker is untrusted: its metrics endpoint (the progress reader) and its termination message's
progress line. Hostile endpoints on loopback (redirects, 1 GB bodies streamed, slow bodies, header floods,
non-finite numbers) and fuzzed pages and lines (hypothesis): every read ends within its deadline with the
reader's own words, every parse gives bounded numbers or nothing, and no exception escapes (issue #39)."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpujob import status as s
from tpujob.status import worker_numbers as numbers
from tpujob.status.goodput import MAX_PROGRESS_LINE, parse_progress
from tpujob.trainer_metrics import MAX_BODY_BYTES, READ_THREADS, ProgressReader, parse
from tpujob_sandbox.listeners import close_listener
from tpujob_sandbox.waiting import wait_for

DEADLINE = 0.5
# The deadline of reads whose outcome is the answer's content, not its time: a loaded 2-core machine let a
# short page's thread wait past 0.5 s once (CI, 2026-11-30: "no whole answer", not "not a whole number").
ANSWER_DEADLINE = 30.0
# What a hostile endpoint says that must never reach the status: a marker in its bodies and headers.
MARKER = "SECRET-FROM-THE-METADATA-SERVER"
HONEST_PAGE = b"tpujob_trainer_global_step 42\ntpujob_trainer_target_steps 100\n"


class Endpoint:
    """A loopback HTTP endpoint that answers every connection with `answer(sock)`; counts bytes sent.

    Closed, it leaves no thread behind: one still answering (a slow or endless body) or accepting on a socket
    whose number the worker's next socket reuses would answer a later test's connection (seen on 2026-11-29:
    the simulated GKE's client read this endpoint's words in a Kueue test of the same pytest worker)."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self.answer = answer
        self.sent = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._closing = threading.Event()
        self._answering: list[tuple[socket.socket, threading.Thread]] = []
        self._acceptor = threading.Thread(target=self._serve, daemon=True)
        self._acceptor.start()

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            answering = threading.Thread(target=self._one, args=(sock,), daemon=True)
            self._answering.append((sock, answering))
            answering.start()

    def _one(self, sock: socket.socket) -> None:
        with sock, contextlib.suppress(OSError):  # the reader hung up (a bounded read does), or close()
            sock.recv(4096)  # the request
            self.answer(sock)

    def send(self, sock: socket.socket, data: bytes) -> None:
        sock.sendall(data)
        self.sent += len(data)

    def close(self) -> None:
        self._closing.set()
        close_listener(self.server, self._acceptor)
        for sock, answering in self._answering:
            with contextlib.suppress(OSError):  # wakes the thread's send or receive; it closes the socket
                sock.shutdown(socket.SHUT_RDWR)
            answering.join(5)

    def threads(self) -> list[threading.Thread]:
        return [self._acceptor, *(answering for _, answering in self._answering)]

    def pod(self) -> s.PodView:
        return s.PodView("w0", 0, 0, 0, "Running", ip="127.0.0.1", metrics_port=self.port)


@pytest.fixture
def endpoint() -> Iterator[Callable[[Callable[[Endpoint, socket.socket], None]], Endpoint]]:
    made: list[Endpoint] = []

    def make(behaviour: Callable[[Endpoint, socket.socket], None]) -> Endpoint:
        holder: list[Endpoint] = []
        served = Endpoint(lambda sock: behaviour(holder[0], sock))
        holder.append(served)
        made.append(served)
        return served

    yield make
    for served in made:
        served.close()
    assert [t for e in made for t in e.threads() if t.is_alive()] == [], (
        "an endpoint thread outlived its test"
    )


@pytest.fixture
def readers() -> Iterator[Callable[[float], ProgressReader]]:
    made: list[ProgressReader] = []

    def make(timeout: float) -> ProgressReader:
        made.append(ProgressReader(timeout=timeout))
        return made[-1]

    yield make
    for each in made:
        each.close()


@pytest.fixture
def reader(readers) -> ProgressReader:
    return readers(DEADLINE)


def timed_read(reader: ProgressReader, pod: s.PodView) -> tuple[s.ProgressSample | None, str, float]:
    started = time.monotonic()
    sample, error = reader.read(pod)
    return sample, error, time.monotonic() - started


def head(status: str, *headers: str) -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers, "", ""])).encode()


# --- hostile endpoints --------------------------------------------------------------------------------


def redirect(e: Endpoint, sock: socket.socket) -> None:
    # Server-side request forgery: sent on to the metadata server, the read would quote its answer.
    e.send(
        sock, head("302 Found", "Location: http://169.254.169.254/computeMetadata/v1/", "Content-Length: 0")
    )


def gigabyte_streamed(e: Endpoint, sock: socket.socket) -> None:
    # No length: the body runs until the connection closes. 1 GB in 64 KiB pieces, none of it kept here.
    e.send(sock, head("200 OK", "Content-Type: text/plain", "Connection: close"))
    piece = (f"# {MARKER}\n" * 2048).encode()[: 64 * 1024]
    while e.sent < 1 << 30:
        e.send(sock, piece)


def gigabyte_announced(e: Endpoint, sock: socket.socket) -> None:
    e.send(sock, head("200 OK", f"Content-Length: {1 << 30}"))
    e.send(sock, b"tpujob_trainer_global_step 1\n" * 100)


def gigabyte_chunked(e: Endpoint, sock: socket.socket) -> None:
    e.send(sock, head("200 OK", "Transfer-Encoding: chunked"))
    chunk = b"#" * 4096
    while e.sent < 1 << 30:
        e.send(sock, b"1000\r\n" + chunk + b"\r\n")


def slow_body(e: Endpoint, sock: socket.socket) -> None:
    # Slowloris: each byte well within a per-recv timeout, the whole never within the read's deadline.
    e.send(sock, head("200 OK", "Content-Length: 1000"))
    for _ in range(1000):
        e.send(sock, b"#")
        time.sleep(DEADLINE / 10)


def slow_headers(e: Endpoint, sock: socket.socket) -> None:
    e.send(sock, b"HTTP/1.1 200 OK\r\n")
    for _ in range(1000):
        e.send(sock, b"X")
        time.sleep(DEADLINE / 10)


def header_flood(e: Endpoint, sock: socket.socket) -> None:
    e.send(sock, b"HTTP/1.1 200 OK\r\n")
    while e.sent < 1 << 24:
        e.send(sock, f"X-{MARKER}: {'a' * 1000}\r\n".encode())


def silent(e: Endpoint, sock: socket.socket) -> None:
    time.sleep(DEADLINE * 4)


def not_http(e: Endpoint, sock: socket.socket) -> None:
    e.send(sock, f"{MARKER} this is not HTTP\r\n\r\n".encode())


def error_page(e: Endpoint, sock: socket.socket) -> None:
    body = f"<html>{MARKER}</html>".encode()
    e.send(sock, head("500 Internal Server Error", f"Content-Length: {len(body)}") + body)


def page_of(text: str) -> Callable[[Endpoint, socket.socket], None]:
    def answer(e: Endpoint, sock: socket.socket) -> None:
        body = text.encode()
        e.send(sock, head("200 OK", f"Content-Length: {len(body)}") + body)

    return answer


def deadline_bound(behaviour: Callable[[Endpoint, socket.socket], None], why: str) -> object:
    return pytest.param(behaviour, why, DEADLINE, id=behaviour.__name__)


def answer_bound(behaviour: Callable[[Endpoint, socket.socket], None], why: str) -> object:
    return pytest.param(behaviour, why, ANSWER_DEADLINE, id=f"{behaviour.__name__}-{why}")


@pytest.mark.parametrize(
    ("behaviour", "why", "deadline"),
    [
        answer_bound(redirect, "answered HTTP 302, a redirect (not followed)"),
        answer_bound(gigabyte_streamed, f"its answer is over {MAX_BODY_BYTES} bytes"),
        answer_bound(gigabyte_announced, f"its answer is over {MAX_BODY_BYTES} bytes (not read)"),
        answer_bound(gigabyte_chunked, f"its answer is over {MAX_BODY_BYTES} bytes"),
        deadline_bound(slow_body, f"no whole answer within {DEADLINE:g} s"),
        deadline_bound(slow_headers, f"no whole answer within {DEADLINE:g} s"),
        answer_bound(header_flood, "its headers are over 8 KiB"),
        deadline_bound(silent, f"no whole answer within {DEADLINE:g} s"),
        answer_bound(not_http, "not HTTP/1.1"),
        answer_bound(error_page, "answered HTTP 500"),
        answer_bound(page_of(f"tpujob_trainer_global_step 1e400\n# {MARKER}\n"), "is not finite"),
        answer_bound(page_of("tpujob_trainer_global_step NaN\n"), "is not finite"),
        answer_bound(page_of("tpujob_trainer_global_step -3\n"), "not a whole number from 0 to 2^53"),
        answer_bound(page_of("tpujob_trainer_global_step 1.5\n"), "not a whole number from 0 to 2^53"),
        answer_bound(page_of("tpujob_trainer_global_step 1e16\n"), "not a whole number from 0 to 2^53"),
        answer_bound(
            page_of("tpujob_trainer_global_step 5\ntpujob_trainer_target_steps +Inf\n"), "is not finite"
        ),
        answer_bound(page_of(f"tpujob_trainer_global_step {{{MARKER}\n"), "not Prometheus text"),
    ],
)
def test_a_hostile_endpoint_gives_no_sample_within_the_deadline_in_the_readers_own_words(
    endpoint, readers, behaviour, why, deadline
) -> None:
    """The slow endpoints are read with a short deadline (its being kept is the point); the others with one a
    loaded machine cannot miss, so what is checked is the reader's words on what was answered."""
    served = endpoint(behaviour)
    sample, error, took = timed_read(readers(deadline), served.pod())
    assert sample is None
    assert why in error
    assert MARKER not in error and "169.254" not in error  # nothing of the endpoint's is quoted
    assert len(error) < 200
    assert took < deadline + 1.0  # the read's one deadline, whatever the endpoint does
    # The 1 GB bodies were dropped after 64 KiB: the endpoint stopped once the socket buffers between the two
    # (megabytes on loopback) were full and the reader had hung up, far short of 1 GB.
    assert served.sent < 1 << 26


def test_an_honest_endpoint_is_read(endpoint, readers) -> None:
    served = endpoint(page_of(HONEST_PAGE.decode()))
    sample, error, _ = timed_read(readers(ANSWER_DEADLINE), served.pod())
    assert error == ""
    assert sample == s.ProgressSample(attempt=0, step=42, target_steps=100)


def test_slow_endpoints_hold_at_most_the_readers_own_threads_and_other_reads_go_on(endpoint, reader) -> None:
    """READ_THREADS slow endpoints at once: a further read does not wait behind them (it is told the readers
    are busy at once), and once their deadline passed an honest endpoint is read again."""
    slow = endpoint(silent)
    honest = endpoint(page_of(HONEST_PAGE.decode()))
    results: list[tuple[s.ProgressSample | None, str, float]] = []
    started = threading.Barrier(READ_THREADS + 1)

    def hostile_pass() -> None:
        started.wait()
        results.append(timed_read(reader, slow.pod()))

    threads = [threading.Thread(target=hostile_pass) for _ in range(READ_THREADS)]
    for thread in threads:
        thread.start()
    started.wait()
    deadline = time.monotonic() + 5
    while reader._free._value > 0 and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)  # until every reader thread holds a slow read
    sample, error, took = timed_read(reader, honest.pod())
    assert sample is None and "every progress reader is busy" in error
    assert took < DEADLINE / 2  # told at once: waiting behind the slow reads would take their deadline
    for thread in threads:
        thread.join(timeout=DEADLINE + 2)
    assert len(results) == READ_THREADS
    assert all(r[0] is None and r[2] < DEADLINE + 1.0 for r in results)
    # Read again by the same reader; a read a loaded machine let miss the short deadline is read once more.
    sample = wait_for(
        lambda: reader.read(honest.pod())[0], timeout=30, what="an honest read after the slow ones"
    )
    assert sample.step == 42


# --- fuzzing the parsers ------------------------------------------------------------------------------

SERIES = st.sampled_from(
    [
        "tpujob_trainer_global_step",
        "tpujob_trainer_target_steps",
        "tpujob_trainer_last_checkpoint_step",
        "tpujob_trainer_last_checkpoint_timestamp_seconds",
        "other_series",
    ]
)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "-1e400", "0x10", "", "1_000", "2e-400"]),
    st.text(max_size=20),
)
LINES = st.one_of(
    st.tuples(SERIES, VALUES).map(lambda pair: f"{pair[0]} {pair[1]}"),
    st.text(max_size=200),
)


def bounded(sample: s.ProgressSample) -> bool:
    steps = [sample.step, sample.target_steps, sample.checkpoint_step]
    in_range = all(v is None or (isinstance(v, int) and 0 <= v <= numbers.MAX_STEP) for v in steps)
    time_ok = sample.checkpoint_time is None or (
        math.isfinite(sample.checkpoint_time) and 0 <= sample.checkpoint_time <= numbers.MAX_TIMESTAMP
    )
    return in_range and time_ok


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINES, max_size=12))
def test_any_metrics_page_parses_to_bounded_numbers_or_a_value_error(lines: list[str]) -> None:
    try:
        sample = parse("\n".join(lines) + "\n", attempt=0)
    except ValueError:
        return  # the reader says "not Prometheus text" or which number is out of range
    assert sample is None or bounded(sample)


JSON_NUMBERS = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 0.5, 2**53, 2**53 + 1]),
)
RAW_NUMBERS = st.sampled_from(
    ["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" * 5000, "[]", "{}", '"7"']
)
FIELDS = ["startStep", "step", "startedAt", "endedAt", "firstStepAt", "checkpointStep", "checkpointAt"]
FIELDS += ["checkpointSaveSeconds", "checkpointRestoreSeconds", "inputWaitSeconds", "resumedCheckpointAt"]


@st.composite
def progress_lines(draw: st.DrawFn) -> str:
    honest = {"startStep": 0, "step": 10, "startedAt": 1.7e9, "endedAt": 1.7e9 + 60}
    chosen = draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True))
    parts = {k: json.dumps(v) for k, v in honest.items()}
    for name in chosen:
        parts[name] = draw(st.one_of(JSON_NUMBERS.map(json.dumps), RAW_NUMBERS, st.none().map(json.dumps)))
    body = "{" + ", ".join(f'"{k}": {v}' for k, v in parts.items()) + "}"
    return draw(st.sampled_from(["", "log line\n", "Traceback ...\n"])) + "tpujob-progress " + body


def progress_in_bounds(progress: object) -> bool:
    fields = vars(progress)
    return all(
        value is None or (math.isfinite(value) and 0 <= value <= max(numbers.MAX_STEP, numbers.MAX_TIMESTAMP))
        for value in fields.values()
    )


@settings(max_examples=150, deadline=None)
@given(st.one_of(progress_lines(), st.text(max_size=300).map(lambda t: "tpujob-progress " + t)))
def test_any_termination_message_gives_a_bounded_progress_line_or_none(message: str) -> None:
    progress = parse_progress(message)  # never raises: a pass must not fail on a worker's words
    assert progress is None or progress_in_bounds(progress)


def test_a_progress_line_with_step_1e400_is_no_progress_line_and_does_not_raise() -> None:
    line = 'tpujob-progress {"startStep": 0, "step": 1e400, "startedAt": 1.7e9, "endedAt": 1.7e9}'
    assert parse_progress(line) is None
    assert parse_progress(line.replace("1e400", "NaN")) is None
    assert parse_progress(line.replace("1e400", "12")) is not None
    assert parse_progress("tpujob-progress " + " " * MAX_PROGRESS_LINE + line[16:]) is None  # oversized
