"""Run a program, and run it again in place when tpujob says so (restartStrategy RecreateSlice).

    python /app/restart_in_place.py python /app/train.py --steps 200

A bring-your-own image's side of the env contract, with the standard library alone (the default trainer's
is tpujob_trainer/inplace.py). When a failure is confined to another slice, the operator keeps this pod and
raises its annotation tpujob.dev/restart-attempt to the job's new attempt; the kubelet rewrites the downward
API file TPUJOB_RESTART_ATTEMPT_FILE names. This wrapper then stops the program (SIGTERM, SIGKILL after
30 s) and starts it again with TPUJOB_ATTEMPT set to the new attempt, so it rejoins the recreated slice's
processes (jax.distributed.initialize again, against the same coordinator address). The program's own exit
is the container's. Without the file (restartStrategy Recreate) the program simply replaces this process.

JAX catches SIGTERM once jax.distributed is initialized (its preemption service: "SIGTERM caught", and the
program goes on), so the old program usually ends another way: when a recreated slice's process registers
at the old coordinator, JAX's coordination service refuses the new incarnation and terminates every old
process ("tried to connect with a different incarnation"), and the new process retries until the new
coordinator serves (seen with jax 0.10.2 on the test bed, tests/e2e/test_recovery.py); else SIGKILL after
the grace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 30.0


def attempt_in(path: str) -> int | None:
    try:
        with open(path) as file:
            text = file.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def main(program: list[str]) -> int:
    if program[0] in ("python", "python3"):  # the program runs under this interpreter
        program = [sys.executable, *program[1:]]
    path = os.environ.get("TPUJOB_RESTART_ATTEMPT_FILE")
    if not path:
        os.execvp(program[0], program)
    attempt = attempt_in(path) or int(os.environ.get("TPUJOB_ATTEMPT", "0"))
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        child = subprocess.Popen(program, env={**os.environ, "TPUJOB_ATTEMPT": str(attempt)})
        while child.poll() is None and (attempt_in(path) or 0) <= attempt:
            time.sleep(POLL_SECONDS)
        if child.poll() is not None:
            announced = attempt_in(path) or attempt
            if child.returncode != 0 or announced <= attempt:
                return child.returncode if child.returncode >= 0 else 128 - child.returncode
            # It finished as a newer attempt was announced: that success was the old attempt's, and the
            # recreated slice's processes wait for this one. Run the new attempt too.
            attempt = announced
            continue
        attempt = attempt_in(path) or attempt
        print(f"restart_in_place: attempt {attempt}: restarting {program[0]} in place", file=sys.stderr)
        child.terminate()
        try:
            child.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
