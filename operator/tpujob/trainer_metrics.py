"""Worker 0's step counter, read from its metrics endpoint while the job runs: the trainer contract's series
in Prometheus' text format (README, "Bring your own image"). The operator reaches pods as Prometheus does,
by pod IP and the trainer container's port named `metrics`; the trainer needs no Kubernetes permission.

Reads are paced: each job is read at most every (jobs being read / TPUJOB_PROGRESS_READS_PER_SECOND)
seconds, so the reads and the status writes a moving step brings stay within a fixed share of the request
budget however many jobs run (10,000 running jobs at one read per 30 s resync would be 333 reads and 333
status writes a second, over the default 50 requests/s). A job whose stall deadline has come is read at
once: a trainer is never restarted as Stalled on a stale read.

The endpoint is the tenant's, so a read trusts nothing of it: one GET of /metrics on the pod's IP (h11 parses
the answer; the socket is the reader's own), no redirect followed, at most MAX_BODY_BYTES of body and
MAX_HEADER_BYTES of headers, one deadline for the whole read (connect, headers, body), on a small pool of its
own (READ_THREADS) so that slow endpoints hold at most that many pass threads, each for at most the deadline;
and only parsed, bounded numbers (status/worker_numbers.py) and the reader's own words reach the status."""

from __future__ import annotations

import concurrent.futures
import socket
import threading
import time
from collections.abc import Callable

import h11
from prometheus_client.parser import text_string_to_metric_families

from tpujob import status as s
from tpujob.records import JobRecord, JobRecords
from tpujob.status import worker_numbers as numbers

# The contract's series (tpujob_trainer_*: trainer-image/tpujob_trainer/metrics.py serves them).
STEP = "tpujob_trainer_global_step"
TARGET_STEPS = "tpujob_trainer_target_steps"
CHECKPOINT_STEP = "tpujob_trainer_last_checkpoint_step"
CHECKPOINT_TIME = "tpujob_trainer_last_checkpoint_timestamp_seconds"
# A read must not hold a pass: the endpoint answers in milliseconds or is not there. The whole read.
READ_TIMEOUT_SECONDS = 2.0
# The trainer's page is ~2 KiB; Prometheus' own default body limit is none, but a tenant's page is not a
# scrape target of ours: 64 KiB holds any honest page of the contract's series with room to spare.
MAX_BODY_BYTES = 64 * 1024
MAX_HEADER_BYTES = 8 * 1024
# Reads at once; a pass whose read finds them all busy does without one (the next pass reads again).
READ_THREADS = 4
_RECV_BYTES = 16 * 1024


class ReadFailed(Exception):
    """Why a read gave no sample, in the reader's own words (never the endpoint's)."""


def fetch(host: str, port: int, deadline_seconds: float) -> str:
    """GET http://host:port/metrics within `deadline_seconds` in all: the body as text, or ReadFailed."""
    deadline = time.monotonic() + deadline_seconds

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ReadFailed(f"no whole answer within {deadline_seconds:g} s")
        return remaining

    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
    request = h11.Request(
        method="GET",
        target="/metrics",
        headers=[
            ("Host", authority),
            ("Accept", "text/plain"),
            ("Accept-Encoding", "identity"),
            ("Connection", "close"),
        ],
    )
    body = bytearray()
    try:
        with socket.create_connection((host, port), timeout=left()) as sock:
            sock.sendall(connection.send(request) + (connection.send(h11.EndOfMessage()) or b""))
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    sock.settimeout(left())
                    connection.receive_data(sock.recv(_RECV_BYTES))
                elif isinstance(event, h11.Response):
                    _check_response(event)
                elif isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > MAX_BODY_BYTES:
                        raise ReadFailed(f"its answer is over {MAX_BODY_BYTES} bytes (not read further)")
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    return body.decode("utf-8", "replace")
    except TimeoutError:
        raise ReadFailed(f"no whole answer within {deadline_seconds:g} s") from None
    except h11.ProtocolError:
        raise ReadFailed("its answer is not HTTP/1.1 (or its headers are over 8 KiB)") from None
    except OSError as error:
        raise ReadFailed(
            f"cannot connect ({type(error).__name__}: {error.strerror or 'no answer'})"
        ) from None


def _check_response(response: h11.Response) -> None:
    if 300 <= response.status_code < 400:
        raise ReadFailed(f"answered HTTP {response.status_code}, a redirect (not followed)")
    if response.status_code != 200:
        raise ReadFailed(f"answered HTTP {response.status_code}")
    for name, value in response.headers:
        if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
            raise ReadFailed(f"its answer is over {MAX_BODY_BYTES} bytes (not read)")


def parse(text: str, attempt: int) -> s.ProgressSample | None:
    """The sample in a /metrics page; None without a step counter. Zero gauges are unset values (the
    trainer sets every series at start: a target or checkpoint of 0 is none yet). ValueError for a page that
    is not Prometheus text, or a value that is not finite or not within its bounds (worker_numbers)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (STEP, TARGET_STEPS, CHECKPOINT_STEP, CHECKPOINT_TIME) and not sample.labels:
                values[sample.name] = sample.value
    if STEP not in values:
        return None

    def whole(name: str) -> int | None:
        return numbers.step(values[name], name) if values.get(name) else None

    checkpoint_time = values.get(CHECKPOINT_TIME)
    return s.ProgressSample(
        attempt=attempt,
        step=numbers.step(values[STEP], STEP),
        target_steps=whole(TARGET_STEPS),
        checkpoint_step=whole(CHECKPOINT_STEP),
        checkpoint_time=numbers.timestamp(checkpoint_time, CHECKPOINT_TIME) if checkpoint_time else None,
    )


def read_due(
    last_read: float | None, now: float, jobs_read: int, reads_per_second: float, urgent: bool
) -> bool:
    """Whether to read a job's progress now (monotonic seconds): never read yet, a stall deadline due
    (`urgent`), or its turn in a round that reads every job once per jobs_read / reads_per_second seconds."""
    if last_read is None or urgent:
        return True
    return now - last_read >= max(jobs_read, 1) / reads_per_second


class ProgressReader:
    def __init__(
        self,
        timeout: float = READ_TIMEOUT_SECONDS,
        reads_per_second: float = s.DEFAULT_PROGRESS_READS_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
        records: JobRecords | None = None,
    ) -> None:
        self.timeout = timeout
        self.reads_per_second = reads_per_second
        self._clock = clock
        # When each job's progress was last read: a field of its record, forgotten with it.
        self.records = records if records is not None else JobRecords()
        # The reads' own threads: a pass waits for its read (at most the deadline), and finds a free one or
        # goes without (the queue never grows).
        self._pool = concurrent.futures.ThreadPoolExecutor(READ_THREADS, "tpujob-progress")
        self._free = threading.BoundedSemaphore(READ_THREADS)

    def due(self, uid: str, urgent: bool) -> bool:
        """Whether the job's turn to be read has come; if so, it is counted as read now."""
        now = self._clock()
        jobs_read = self.records.count(lambda record: record.progress_read is not None)

        def take(record: JobRecord) -> bool:
            if not read_due(record.progress_read, now, jobs_read, self.reads_per_second, urgent):
                return False
            record.progress_read = now
            return True

        return self.records.update(uid, take)

    def read(self, pod: s.PodView) -> tuple[s.ProgressSample | None, str]:
        """(the sample, "") or (None, why not) for a running worker pod."""
        if not pod.ip or not pod.metrics_port:
            return None, "the pod declares no metrics port, or has no IP yet"
        url = f"http://{pod.ip}:{pod.metrics_port}/metrics"
        if not self._free.acquire(blocking=False):
            return (
                None,
                f"GET {url}: every progress reader is busy (other endpoints are slow); read again later",
            )
        try:
            future = self._pool.submit(fetch, pod.ip, pod.metrics_port, self.timeout)
        except RuntimeError:  # shut down
            self._free.release()
            return None, f"GET {url}: the operator is stopping"
        future.add_done_callback(lambda _: self._free.release())
        try:
            text = future.result(timeout=self.timeout + 1.0)  # fetch() keeps the deadline; this is a guard
            # A pod kept through a narrow restart serves the attempt its trainer was told (restart in place).
            sample = parse(text, max(pod.attempt, pod.restart_attempt))
        except ReadFailed as error:
            return None, f"GET {url}: {error}"
        except concurrent.futures.TimeoutError:
            return None, f"GET {url}: no whole answer within {self.timeout:g} s"
        except (ValueError, OverflowError) as error:
            # worker_numbers' words are the reader's own; the parser's quote the page, so they are not kept.
            why = str(error) if isinstance(error, numbers.OutOfRange) else "not Prometheus text"
            return None, f"GET {url}: {why}"
        return (sample, "") if sample is not None else (None, f"GET {url}: no {STEP}")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
