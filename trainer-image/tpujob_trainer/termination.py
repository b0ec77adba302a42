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

import json
import os
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


def write_termination_message(message: str, env: Mapping[str, str], progress: str = "") -> None:
    """Write `message` as one line, then `progress` (a progress_line) if given, at most 4096 bytes in all,
    to the termination log, if there is one."""
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
