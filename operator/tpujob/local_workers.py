"""The processes of `tpujob run --local`: one per TPU host, started together, their output relayed (worker 0's
as is, the others' lines prefixed, each also in its log file), Ctrl-C and SIGTERM passed on once, a failed
worker's peers stopped (they would wait for it in their collectives), and every worker stopped by the kernel
should the runner itself die."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class Worker:
    index: int  # across slices: slice * hosts + host
    command: list[str]
    env: dict[str, str]
    metrics_port: int
    summary_file: Path
    log_file: Path


class LocalRun:
    """The worker processes: output relayed, signals forwarded, a failure stops the others."""

    def __init__(self, workers: list[Worker], grace_seconds: float) -> None:
        self.workers = workers
        # The job's spec.trainer.terminationGracePeriodSeconds, as its pods get: to save after SIGTERM.
        self.grace_seconds = grace_seconds
        self.processes: list[subprocess.Popen[bytes]] = []
        self.relays: list[threading.Thread] = []

    def wait(self) -> list[int]:
        previous = {s: signal.signal(s, self._forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for worker in self.workers:
                self._start(worker)
            # Only now: no thread of ours may run while a worker is forked (its preexec_fn).
            for process, worker in zip(self.processes, self.workers, strict=True):
                assert process.stderr is not None
                relay = threading.Thread(target=_relay, args=(process.stderr, worker), daemon=True)
                relay.start()
                self.relays.append(relay)
            return self._wait_all()
        finally:
            for signal_number, handler in previous.items():
                signal.signal(signal_number, handler)
            for relay in self.relays:
                relay.join(timeout=5)

    def _start(self, worker: Worker) -> None:
        # Own session: a terminal's Ctrl-C reaches us only, and we pass it on exactly once.
        with worker.log_file.with_suffix(".out").open("wb") as stdout:
            process = subprocess.Popen(
                worker.command,
                env=worker.env,
                stdout=stdout,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_stop_with_parent(os.getpid()),
            )
        self.processes.append(process)

    def _wait_all(self) -> list[int]:
        codes: dict[int, int] = {}
        stopping_since: float | None = None
        while len(codes) < len(self.processes):
            for index, process in enumerate(self.processes):
                if index in codes:
                    continue
                with contextlib.suppress(subprocess.TimeoutExpired):
                    codes[index] = process.wait(timeout=0.2)
                    if codes[index] != 0 and stopping_since is None:
                        # Peers of a dead worker would wait for it forever in their collectives.
                        say(f"worker {index} exited with {codes[index]}: stopping the others")
                        self._signal_all(signal.SIGTERM)
                        stopping_since = time.monotonic()
            if stopping_since is not None and time.monotonic() - stopping_since > self.grace_seconds:
                self._signal_all(signal.SIGKILL)
        return [codes[index] for index in range(len(self.processes))]

    def _forward(self, signal_number: int, _frame: FrameType | None) -> None:
        self._signal_all(signal_number)

    def _signal_all(self, signal_number: int) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal_number)


def _stop_with_parent(parent: int) -> Callable[[], None] | None:
    """In the forked worker, before exec: a SIGTERM when this runner dies, even by SIGKILL, so no worker
    outlives it holding its ports (Linux's PR_SET_PDEATHSIG; elsewhere, nothing)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the child

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # died before the line above: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal


def _relay(stream: IO[bytes], worker: Worker) -> None:
    """Worker 0's output goes through as is (its progress bar redraws in place); the others' lines
    get a prefix. Everything also lands in the worker's log file."""
    prefix = b"" if worker.index == 0 else f"[worker {worker.index}] ".encode()
    with worker.log_file.open("wb") as log:
        for chunk in iter(lambda: stream.read1(65536) if worker.index == 0 else stream.readline(), b""):  # type: ignore[attr-defined]
            log.write(chunk)
            log.flush()
            sys.stderr.buffer.write(prefix + chunk)
            sys.stderr.buffer.flush()


def say(message: str) -> None:
    print(f"tpujob run: {message}", file=sys.stderr, flush=True)
