"""Restart training in place: the worker's process keeps its pod (IP, volumes, node) and runs its training
again as a new attempt when the operator says so (restartStrategy RecreateSlice).

The operator keeps a healthy slice's pods through a narrow restart and raises their annotation
tpujob.dev/restart-attempt to the job's new attempt; the kubelet rewrites the downward API file that shows it
(TPUJOB_RESTART_ATTEMPT_FILE). This supervisor runs the training as a child process and watches that file:
when the number rises it stops the child as a pod deletion would (SIGTERM: it checkpoints, then exits) and
starts it again with TPUJOB_ATTEMPT set to the new attempt, so every worker of the job, kept or recreated,
runs the same attempt and rejoins its peers from the last checkpoint. The child's own exit (success, a
failure) is the container's at once: a kept worker whose training fails because a peer died (a collective
that errors out) fails its pod, and the operator widens the restart to its slice too (waiting here for an
announcement instead would delay every real crash by the wait). One exception: a child that succeeds when a
newer attempt is already announced (its run ended as a peer failed at the end) runs again as that attempt,
since its success was the old attempt's and the recreated workers wait for this one. SIGTERM and SIGINT to
the supervisor go to the child. The kubelet rewrites the file when the pod's annotation changes (a pod
update triggers its sync; its volume manager loops every 100 ms: kubernetes/kubernetes#29633, #30189).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from tpujob_trainer import constants as c

log = logging.getLogger("tpujob_trainer.inplace")

POLL_SECONDS = 0.2
# A child that ignores SIGTERM this long (a hung collective) is killed, as the kubelet would after the pod's
# terminationGracePeriodSeconds.
STOP_GRACE_SECONDS = 30.0


def read_attempt(path: Path) -> int | None:
    """The attempt in the file; None while it is missing, empty or not a number (a write in between)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def supervise(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    grace: float = STOP_GRACE_SECONDS,
    program: Sequence[str] = (sys.executable, "-m", "tpujob_trainer"),
) -> int:
    """Run `program argv` (the trainer) as a child, again as each new attempt the file announces; return
    the exit code of the child that ended by itself."""
    path = Path(env[c.ENV_RESTART_ATTEMPT_FILE])
    attempt = read_attempt(path)
    if attempt is None:
        attempt = int(env.get(c.ENV_ATTEMPT, "0") or 0)
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    while True:
        child_env = {**env, c.ENV_ATTEMPT: str(attempt), c.ENV_SUPERVISED: "1"}
        child = subprocess.Popen([*program, *argv], env=child_env)
        log.info("attempt %d: training process %d started", attempt, child.pid)
        announced = attempt
        while child.poll() is None:
            time.sleep(POLL_SECONDS)
            announced = max(announced, read_attempt(path) or 0)
            if announced > attempt:
                break
        if child.poll() is not None:
            announced = max(announced, read_attempt(path) or 0)
            if child.returncode != 0 or announced <= attempt:
                return child.returncode if child.returncode >= 0 else 128 - child.returncode
            # It finished its attempt's run as a newer one was announced (a peer failed at the end): that
            # success is not the new attempt's, whose recreated workers wait for this one. Run it too.
            log.info("attempt %d announced as attempt %d ended: running it in place", announced, attempt)
            attempt = announced
            continue
        log.info("attempt %d announced: restarting the training process in place", announced)
        _stop(child, grace)
        attempt = announced


def _stop(child: subprocess.Popen[bytes], grace: float) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def wanted(env: Mapping[str, str]) -> bool:
    """Whether this process is to supervise: the pod has the attempt file, and this is not the child."""
    return bool(env.get(c.ENV_RESTART_ATTEMPT_FILE)) and not env.get(c.ENV_SUPERVISED)
