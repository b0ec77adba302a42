"""The trainer's in-place restart (tpujob_trainer/inplace.py): a supervisor process restarts its training
child as each new attempt the downward API file announces, and the child's own exit is the container's. A
small child program stands in for the trainer (its behaviour toward signals is the trainer's: SIGTERM ends
it with 143)."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tpujob_sandbox.waiting import wait_for

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    log = Path(os.environ["CHILD_LOG"])
    attempt = os.environ["TPUJOB_ATTEMPT"]
    signal.signal(signal.SIGTERM, lambda *_: (log.open("a").write(f"stopped {attempt}\\n"), sys.exit(143)))
    log.open("a").write(f"started {attempt}\\n")
    while not Path(os.environ["CHILD_DONE"]).exists():
        time.sleep(0.05)
    outcome = Path(os.environ["CHILD_DONE"]).read_text()
    Path(os.environ["CHILD_DONE"]).unlink()  # consumed: a child run again waits for its own
    if ":" in outcome:  # "<attempt>:<code>": the attempt is announced as this child ends
        announced, outcome = outcome.split(":")
        Path(os.environ["TPUJOB_RESTART_ATTEMPT_FILE"]).write_text(announced)
    sys.exit(int(outcome or 0))
    """
)

SUPERVISOR = (
    "import os, sys; from tpujob_trainer.inplace import supervise; "
    "sys.exit(supervise([], dict(os.environ), grace=5, program=[sys.executable, sys.argv[1]]))"
)


def start(tmp_path: Path, attempt_text: str) -> tuple[subprocess.Popen[bytes], Path, Path, Path]:
    child, attempt_file, log, done = (tmp_path / n for n in ("child.py", "attempt", "log", "done"))
    child.write_text(CHILD)
    attempt_file.write_text(attempt_text)
    env = {
        **os.environ,
        "TPUJOB_RESTART_ATTEMPT_FILE": str(attempt_file),
        "TPUJOB_ATTEMPT": "0",
        "CHILD_LOG": str(log),
        "CHILD_DONE": str(done),
    }
    process = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(child)], env=env)
    return process, attempt_file, log, done


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_raised_attempt_restarts_the_child_in_place_and_its_own_exit_is_the_supervisors(tmp_path):
    process, attempt_file, log, done = start(tmp_path, "2")
    try:
        wait_for(
            lambda: lines(log) == ["started 2"],
            timeout=20,
            what="the first child",
            last_state=lambda: lines(log),
        )
        attempt_file.write_text("1")  # never backwards
        attempt_file.write_text("")  # a half-written file is not an attempt
        attempt_file.write_text("3")
        wait_for(
            lambda: lines(log) == ["started 2", "stopped 2", "started 3"],
            timeout=20,
            what="the child restarted as attempt 3",
            last_state=lambda: lines(log),
        )
        done.write_text("7")
        assert process.wait(timeout=20) == 7
    finally:
        process.kill()


def test_a_child_that_succeeds_as_a_newer_attempt_is_announced_runs_again_as_that_attempt(tmp_path):
    """Its run ended as a peer failed at the end: the success was attempt 2's, and attempt 3's recreated
    workers wait for this one."""
    process, _attempt_file, log, done = start(tmp_path, "2")
    try:
        wait_for(
            lambda: lines(log) == ["started 2"], timeout=20, what="the child", last_state=lambda: lines(log)
        )
        done.write_text("3:0")
        wait_for(
            lambda: lines(log)[-1:] == ["started 3"],
            timeout=20,
            what="the child run again as attempt 3",
            last_state=lambda: (lines(log), process.poll()),
        )
        assert process.poll() is None
        done.write_text("0")
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()


def test_sigterm_to_the_supervisor_reaches_the_child(tmp_path):
    process, _attempt_file, log, _done = start(tmp_path, "0")
    try:
        wait_for(
            lambda: lines(log) == ["started 0"], timeout=20, what="the child", last_state=lambda: lines(log)
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 143
        assert lines(log) == ["started 0", "stopped 0"]
    finally:
        process.kill()
