"""The trainer's last word, in the container's termination log: one line saying why it exits non-zero, then
(on every exit but a bad config) its progress line for the operator's goodput accounting (progress_line).

Kubernetes reads that file when the container ends and puts it in the pod's
`status.containerStatuses[].state.terminated.message` (at most 4096 bytes;
https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/), where the operator
quotes it in the TPUJob's status and events. Best effort: writing it never changes how the trainer exits.

The kubelet reads the file whatever ended the container: its own exit, SIGKILL after the grace period, the
OOM killer (the container runtime reports the exit; kuberuntime then reads terminationMessagePath:
kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go, getTerminationMessage, called for every
exited container). So while training, PeriodicProgress keeps the progress line alone in the file (rewritten
on every checkpoint save and at most every PROGRESS_WRITE_SECONDS): a trainer killed with no chance to write
its last word still leaves a progress line at most that stale. The exit's write replaces it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tpujob_trainer import constants as c

# What the kubelet reads of the file.
MAX_MESSAGE_BYTES = 4096
# How stale the progress line of a trainer killed without warning may be (besides its last checkpoint save,
# which always rewrites it): one small local file write this often costs nothing next to a training step.
PROGRESS_WRITE_SECONDS = 2.0


def termination_log_path(env: Mapping[str, str]) -> str | None:
    """TPUJOB_TERMINATION_LOG if set, else /dev/termination-log when the kubelet provides it (a writable
    file: never created elsewhere, as outside a pod), else None."""
    if env.get(c.ENV_TERMINATION_LOG):
        return env[c.ENV_TERMINATION_LOG]
    default = c.DEFAULT_TERMINATION_LOG
    return default if os.path.isfile(default) and os.access(default, os.W_OK) else None


def progress_line(facts: Mapping[str, Any]) -> str:
    """The progress facts as the termination message's last line: `tpujob-progress {...}`.

    Why the termination message: the operator already reads it from the pod it watches (no new RBAC, no
    scraping the trainer's /metrics, which is gone with the pod by then), and only the exit path knows how
    far the attempt got past its last checkpoint, which is what a restart loses. The human reason stays the
    line before it (the operator quotes the last line that is not a progress line)."""
    return c.PROGRESS_LINE_PREFIX + json.dumps(dict(facts), separators=(",", ":"), sort_keys=True)


# The trainer's own last word and the stack dump's (StackDumpOnSigterm) take turns: a trainer that stops
# gracefully on SIGTERM has the last word, whichever of the two writes first.
_LAST_WORD = threading.Lock()
_last_word_written = False


def write_termination_message(message: str, env: Mapping[str, str], progress: str = "") -> None:
    """Write `message` as one line, then `progress` (a progress_line) if given, at most 4096 bytes in all,
    to the termination log, if there is one."""
    global _last_word_written
    with _LAST_WORD:
        _last_word_written = True
        _write_termination_message(message, env, progress)


def _write_termination_message(message: str, env: Mapping[str, str], progress: str) -> None:
    try:
        path = termination_log_path(env)
        if path is None:
            return
        tail = (progress + "\n").encode() if progress else b""
        limit = MAX_MESSAGE_BYTES - len(tail)
        human = " ".join(message.split())
        data = (human + "\n").encode("utf-8", errors="replace") if human else b""
        if len(data) > limit:
            data = data[: limit - 4].decode("utf-8", errors="ignore").encode() + b"...\n"
        data += tail
        write_in_place(path, data)
    except Exception:  # never fail because of it: the exit code says what matters
        return


def write_in_place(path: str, data: bytes) -> None:
    """Replace the file's content with `data` so that a SIGKILL at any moment leaves a readable message.

    In place (the kubelet bind-mounts this very file: a renamed new file would not be what it reads), and
    never truncated first: one write of the new content, padded with spaces over any longer old content,
    then the truncation. Killed in between, the file holds the new lines plus a line of blanks, which the
    operator ignores (it reads the last progress line and quotes the last non-blank line)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        old = os.fstat(fd).st_size
        padded = data + b" " * (old - len(data)) if old > len(data) else data
        os.pwrite(fd, padded, 0)
        if old > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


class PeriodicProgress:
    """Keeps the progress line alone in the termination log while training (see the module's docstring):
    `write(line)` when `due(...)`: on a checkpoint save (forced), else at most every `interval` seconds."""

    def __init__(
        self,
        env: Mapping[str, str],
        interval: float = PROGRESS_WRITE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = termination_log_path(env)
        self.interval = interval
        self.clock = clock
        self.last: float | None = None
        self.writes = 0

    def due(self, force: bool = False) -> bool:
        if self.path is None:
            return False
        return force or self.last is None or self.clock() - self.last >= self.interval

    def write(self, progress: str) -> None:
        self.last = self.clock()
        if self.path is None:
            return
        try:
            write_in_place(self.path, (progress + "\n").encode())
            self.writes += 1
        except Exception:  # best effort, as the last word
            return


class StackDumpOnSigterm:
    """On SIGTERM, where every thread is, in the container's log and (condensed) in the termination log
    before the progress line: the last words of a trainer that never reaches its own (a collective that never
    returns, an input pipeline that never yields), which the operator quotes when it restarts a stalled job.

    faulthandler writes the dump from its C signal handler, so it runs even while the Python code is stuck
    in native code; a thread relays it, since a signal handler can do nothing else safely. A trainer that
    stops gracefully overwrites the termination log with its own last word at exit, as before."""

    def __init__(self, env: Mapping[str, str], stream: Any = None) -> None:
        self.path = termination_log_path(env)
        self.stream = stream
        self.relayed = threading.Event()
        self._writer: Any = None

    def register(self) -> None:
        """Right after the Python SIGTERM handler is installed: faulthandler chains to it."""
        if self._writer is None:
            read_fd, write_fd = os.pipe()
            self._writer = os.fdopen(write_fd, "w")  # kept open for faulthandler
            threading.Thread(target=self._relay, args=(read_fd,), name="stack-dump", daemon=True).start()
        faulthandler.register(signal.SIGTERM, file=self._writer, all_threads=True, chain=True)

    def unregister(self) -> None:
        """Before the Python SIGTERM handler is installed again (faulthandler restores the one it chained)."""
        if self._writer is not None:
            faulthandler.unregister(signal.SIGTERM)

    def _relay(self, read_fd: int) -> None:
        dump = b""
        while True:
            ready, _, _ = select.select([read_fd], [], [], 0.3 if dump else None)
            if not ready:  # the dump ended: faulthandler writes it at once
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            dump += chunk
        text = dump.decode("utf-8", "replace")
        stream = self.stream or sys.stderr
        print(f"SIGTERM: every thread's stack (faulthandler):\n{text}", file=stream, flush=True)
        with _LAST_WORD:
            if self.path is not None and not _last_word_written:
                self._write_last_words(text)
        self.relayed.set()

    def _write_last_words(self, text: str) -> None:
        if self.path is not None:
            try:
                with open(self.path, "rb") as current:
                    lines = current.read().decode("utf-8", "replace").splitlines()
                progress = [line for line in lines if line.startswith(c.PROGRESS_LINE_PREFIX)]
                tail = (progress[-1] + "\n").encode() if progress else b""
                head = condensed(text)[: MAX_MESSAGE_BYTES - len(tail) - 1]
                write_in_place(self.path, head.encode() + b"\n" + tail)
            except Exception:  # best effort, as every last word
                pass


def condensed(dump: str, frames: int = 4) -> str:
    """faulthandler's dump in one line: the threads running the trainer's own code, each its innermost frames
    as `function (file:line)`."""
    parts = []
    for block in dump.strip().split("\n\n"):
        lines = block.strip().splitlines()
        calls = []
        for line in lines[1:]:
            match = FRAME.match(line.strip())
            if match:
                calls.append(
                    (match["function"], os.path.basename(match["file"]), match["line"], match["file"])
                )
        ours = any("tpujob_trainer" in path for *_, path in calls)
        if not ours or any(function == "_relay" for function, *_ in calls):  # not the relaying thread itself
            continue
        where = " < ".join(f"{function} ({file}:{line})" for function, file, line, _ in calls[:frames])
        parts.append(where)
    return "SIGTERM while stuck: " + (" | ".join(parts) if parts else "no thread in the trainer's code")


FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
