"""The trainer's last word, in the container's termination log: one line saying why it exits non-zero, then
(on every exit but a bad config) its progress line for the operator's goodput accounting (progress_line).

Kubernetes reads that file when the container ends and puts it in the pod's
`status.containerStatuses[].state.terminated.message` (at most 4096 bytes;
https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/), where the operator
quotes it in the TPUJob's status and events. Best effort: writing it never changes how the trainer exits.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from tpujob_trainer import constants as c

# What the kubelet reads of the file.
MAX_MESSAGE_BYTES = 4096


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
        with open(path, "wb") as handle:
            handle.write(data)
    except Exception:  # never fail because of it: the exit code says what matters
        return
