"""The trainer's last word: one line saying why it exits non-zero, in the container's termination log.

Kubernetes reads that file when the container ends and puts it in the pod's
`status.containerStatuses[].state.terminated.message` (at most 4096 bytes;
https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/), where the operator
quotes it in the TPUJob's status and events. Best effort: writing it never changes how the trainer exits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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


def write_termination_message(message: str, env: Mapping[str, str]) -> None:
    """Write `message` as one line (at most 4096 bytes) to the termination log, if there is one."""
    try:
        path = termination_log_path(env)
        if path is None:
            return
        line = " ".join(message.split()) + "\n"
        data = line.encode("utf-8", errors="replace")
        if len(data) > MAX_MESSAGE_BYTES:
            data = data[: MAX_MESSAGE_BYTES - 4].decode("utf-8", errors="ignore").encode() + b"...\n"
        with open(path, "wb") as handle:
            handle.write(data)
    except Exception:  # never fail because of it: the exit code says what matters
        return
